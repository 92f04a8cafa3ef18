"""The metric names grouped with `/` (`pipeline.tracking.metric_names`): what a run's evaluation, its LM
calls and retries are logged as, and the flat names older runs are read back under."""

from __future__ import annotations

import pytest
from memtrace_loop.pipeline.analysis.evaluation import EvaluationReport, MetricSummary
from memtrace_loop.pipeline.backends.call_count import CallTally, RoleCalls
from memtrace_loop.pipeline.backends.services import RetryTally
from memtrace_loop.pipeline.tracking import metric_names as names
from memtrace_loop.pipeline.tracking.run_logging import call_metrics, quality_metrics, retry_metrics, token_metrics


def report() -> EvaluationReport:
    overall = MetricSummary(n=4, judge_accuracy=0.5, ci_low=0.25, ci_high=0.75, f1=0.4, bleu1=0.3, n_failed=1)
    temporal = MetricSummary(n=2, judge_accuracy=1.0, ci_low=1.0, ci_high=1.0, f1=0.9, bleu1=0.8)
    empty = MetricSummary(n=0, judge_accuracy=float("nan"), ci_low=float("nan"), ci_high=float("nan"),
                          f1=float("nan"), bleu1=float("nan"))
    return EvaluationReport(overall, {"temporal": temporal, "multi-hop": empty}, (5,), failed_judge_calls=1)


def test_an_evaluation_is_logged_under_its_scope_with_categories_below_cat():
    metrics = quality_metrics(report(), names.TEST_FINAL)
    assert metrics["test/final/judge_accuracy"] == 0.5
    assert metrics["test/final/judge_ci_low"] == 0.25 and metrics["test/final/failed_judge_calls"] == 1
    assert metrics["test/final/cat/temporal/f1"] == 0.9
    assert metrics["test/final/cat/multi_hop/n"] == 0  # a category's name made a name segment
    assert "test/final/cat/multi_hop/judge_accuracy" not in metrics  # NaN left out
    assert quality_metrics(report())["eval/judge_accuracy"] == 0.5  # `memtrace run`'s scope


def test_lm_calls_tokens_and_retries_are_grouped_per_role():
    tally = CallTally({"task": RoleCalls(made=3, cached=2, failed=1, prompt_tokens=10, completion_tokens=4,
                                         reused=5)})
    assert call_metrics(tally, failed=True) == {
        "lm_calls/task/made": 3.0, "lm_calls/task/cached": 2.0, "lm_calls/task/reused": 5.0,
        "lm_calls/task/failed": 1.0,
    }
    assert token_metrics(tally) == {"lm_tokens/prompt": 10.0, "lm_tokens/completion": 4.0}
    retries = RetryTally({"judge": {"server_error": 2}, "attributor": {"rate_limited": 1}})
    assert retry_metrics(retries) == {
        "lm_retries/total": 3.0, "lm_retries/attributor": 1.0, "lm_retries/attributor/rate_limited": 1.0,
        "lm_retries/judge": 2.0, "lm_retries/judge/server_error": 2.0,
    }
    assert retry_metrics(RetryTally()) == {"lm_retries/total": 0.0}


@pytest.mark.parametrize(("name", "legacy"), [
    (names.quality(names.DEV, names.JUDGE_ACCURACY), "dev_judge_accuracy"),
    (names.quality(names.TEST_FINAL, names.JUDGE_ACCURACY), "test_final_judge_accuracy"),
    (names.BUDGET_SPENT, "lm_calls.budget_spent"),
    (names.ELAPSED_S, "elapsed_s"),
    (names.quality(names.EVAL, "f1"), "f1"),
])
def test_every_name_a_reader_uses_has_the_flat_name_older_runs_logged(name, legacy):
    assert "/" in name and names.legacy_name(name) == legacy


def test_a_comparison_gain_is_named_by_optimizer_and_system():
    assert names.gain("attribution", "all") == "gain/attribution/all/mean"
    assert names.gain("gepa", "mem0", "ci_low") == "gain/gepa/mem0/ci_low"
