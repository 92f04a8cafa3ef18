"""Tests for pipeline.analysis.evaluation: lexical metrics, the judge signature, bootstrap, summaries, paired test."""

from __future__ import annotations

import math
import re
import typing

import dspy
import pytest
from dspy.utils import DummyLM
from dspy.utils.exceptions import AdapterParseError
from memtrace_loop.pipeline.analysis.evaluation import (
    EvaluationReport,
    MetricSummary,
    bootstrap_ci,
    flat_metrics,
    paired_difference,
    summarize,
)
from memtrace_loop.pipeline.analysis.judge import JudgeAnswer, bleu1, score_case, token_f1
from memtrace_loop.pipeline.backends.text import normalize_answer
from memtrace_loop.pipeline.core.records import CaseResult, Question

# --------------------------------------------------------------------------- normalization and metrics


@pytest.mark.parametrize(
    ("text", "normalized"),
    [
        ("The Quick, brown fox!", "quick brown fox"),
        ("An apple a day", "apple day"),
        ("  Theater   and  Thermos ", "theater and thermos"),  # articles only as whole words
        ("Don't stop.", "dont stop"),
        ("7 May, 2023", "7 may 2023"),
        ("...", ""),
    ],
)
def test_normalize_answer(text: str, normalized: str) -> None:
    assert normalize_answer(text) == normalized


@pytest.mark.parametrize(
    ("prediction", "gold", "f1", "bleu"),
    [
        # "cat sat on mat" (4) vs "cat on mat" (3): overlap 3; P=3/4, R=1, F1=2*(3/4)/(7/4)=6/7.
        # BLEU-1: precision 3/4, prediction longer than gold -> no penalty -> 0.75.
        ("The cat sat on the mat", "a cat on a mat", 6 / 7, 0.75),
        # "paris" vs "paris france": P=1, R=1/2, F1=2/3. BLEU-1: precision 1, c=1 < r=2 ->
        # penalty exp(1 - 2/1) = exp(-1) = 0.36788.
        ("Paris", "Paris, France", 2 / 3, math.exp(-1)),
        # "dog dog dog" vs "dog house": clipped overlap 1; P=1/3, R=1/2, F1=2*(1/6)/(5/6)=0.4.
        # BLEU-1: precision 1/3, c=3 > r=2 -> 1/3.
        ("dog dog dog", "dog house", 0.4, 1 / 3),
        # same tokens in another order: F1 1; BLEU-1 precision 1, c == r -> exp(0) = 1.
        ("May 7, 2023", "7 May 2023", 1.0, 1.0),
        # "she went to lisbon in june" (6) vs "lisbon" (1): P=1/6, R=1, F1=2*(1/6)/(7/6)=2/7;
        # BLEU-1: precision 1/6, prediction longer -> no penalty -> 1/6.
        ("She went to Lisbon in June.", "Lisbon", 2 / 7, 1 / 6),
        ("blue", "green", 0.0, 0.0),
        ("", "green", 0.0, 0.0),
        ("green", "", 0.0, 0.0),
        ("the", "a", 0.0, 0.0),  # both empty after normalization
    ],
)
def test_token_f1_and_bleu1(prediction: str, gold: str, f1: float, bleu: float) -> None:
    assert token_f1(prediction, gold) == pytest.approx(f1)
    assert bleu1(prediction, gold) == pytest.approx(bleu)


def test_bleu1_brevity_penalty_value() -> None:
    # "x y" vs "x y z w" -> tokens (2) vs (4): precision 1, penalty exp(1 - 4/2) = exp(-1)
    assert bleu1("x y", "x y z w") == pytest.approx(0.36787944)


# --------------------------------------------------------------------------- score_case


def _question(i: int, category: int, gold: str = "Lisbon") -> Question:
    return Question(id=f"c:q{i}", conversation_id="c", text=f"question {i}?", gold=gold, category=category)


def test_score_case_correct_wrong_failed() -> None:
    question = _question(0, 4)
    correct = score_case(question, "In Lisbon", "CORRECT", None)
    assert correct.verdict == "CORRECT" and correct.correct
    assert correct.scores.judge == 1.0
    assert correct.scores.f1 == pytest.approx(2 / 3)  # "in lisbon" vs "lisbon": P=1/2, R=1
    assert correct.scores.bleu1 == pytest.approx(0.5)
    wrong = score_case(question, "Porto", "WRONG", None)
    assert (wrong.verdict, wrong.scores.judge, wrong.scores.f1) == ("WRONG", 0.0, 0.0)
    failed = score_case(question, "Lisbon", None, "judge output unparsable")
    assert failed.verdict == "FAILED" and not failed.correct
    assert failed.scores.judge == 0.0
    assert failed.scores.f1 == 1.0  # lexical metrics do not depend on the judge
    assert failed.error == "judge output unparsable"


def test_score_case_rejects_unknown_label() -> None:
    with pytest.raises(ValueError, match="judge label"):
        score_case(_question(0, 4), "x", "correct", None)


# --------------------------------------------------------------------------- judge signature


def test_judge_signature_shape() -> None:
    assert list(JudgeAnswer.input_fields) == ["question", "gold_answer", "generated_answer"]
    assert list(JudgeAnswer.output_fields) == ["label"]
    annotation = JudgeAnswer.output_fields["label"].annotation
    assert typing.get_origin(annotation) is typing.Literal
    assert set(typing.get_args(annotation)) == {"CORRECT", "WRONG"}
    assert "CORRECT" in JudgeAnswer.instructions and "WRONG" in JudgeAnswer.instructions


@pytest.mark.usefixtures("lm_history")  # reads `lm.history` (off in the test session)
def test_judge_with_scripted_lm_yields_label() -> None:
    lm = DummyLM([{"label": "CORRECT"}, {"label": "WRONG"}])
    judge = dspy.Predict(JudgeAnswer)
    with dspy.context(lm=lm):
        first = judge(question="Where?", gold_answer="Lisbon", generated_answer="In Lisbon, Portugal")
        second = judge(question="Where now?", gold_answer="Lisbon", generated_answer="Porto")
    assert (first.label, second.label) == ("CORRECT", "WRONG")
    prompt = lm.history[0]["messages"][0]["content"]
    assert "generous" in prompt.lower()  # the docstring is the judge prompt


@pytest.mark.usefixtures("lm_history")  # reads `lm.history` (off in the test session)
def test_judge_unparsable_label_raises_adapter_parse_error() -> None:
    # The ChatAdapter fails on "MAYBE", falls back to the JSONAdapter (a second LM call), which also
    # fails: dspy raises AdapterParseError, which the traced judge stage records as a failure.
    lm = DummyLM([{"label": "MAYBE"}, {"label": "MAYBE"}])
    judge = dspy.Predict(JudgeAnswer)
    with dspy.context(lm=lm), pytest.raises(AdapterParseError) as info:
        judge(question="When?", gold_answer="7 May 2023", generated_answer="sometime")
    assert isinstance(info.value, AdapterParseError)
    assert len(lm.history) == 2
    result = score_case(_question(1, 2, gold="7 May 2023"), "sometime", None, str(info.value).splitlines()[0])
    assert result.verdict == "FAILED"


# --------------------------------------------------------------------------- bootstrap


def test_bootstrap_deterministic_and_contains_mean() -> None:
    values = [1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0] * 5  # mean 0.7, n 50
    low, high = bootstrap_ci(values, seed=7)
    assert (low, high) == bootstrap_ci(values, seed=7)
    assert (low, high) != bootstrap_ci(values, seed=8)
    assert low < 0.7 < high
    # normal approximation: 0.7 +- 1.96 * sqrt(0.7 * 0.3 / 50) = 0.7 +- 0.127
    assert 0.55 < low < 0.62 and 0.78 < high < 0.85


def test_bootstrap_width_follows_confidence() -> None:
    values = [float(i % 2) for i in range(100)]  # mean 0.5; SE 0.05
    low95, high95 = bootstrap_ci(values)
    low80, high80 = bootstrap_ci(values, confidence=0.8)
    assert low95 < low80 < 0.5 < high80 < high95
    assert 0.38 < low95 < 0.42 and 0.58 < high95 < 0.62


def test_bootstrap_degenerate_cases() -> None:
    low, high = bootstrap_ci([])
    assert math.isnan(low) and math.isnan(high)
    assert bootstrap_ci([0.25]) == (0.25, 0.25)
    assert bootstrap_ci([1.0, 1.0, 1.0]) == (1.0, 1.0)
    with pytest.raises(ValueError):
        bootstrap_ci([1.0, 0.0], confidence=1.5)


# --------------------------------------------------------------------------- summarize


def _results() -> list[CaseResult]:
    """multi-hop: 1 right, 1 wrong; temporal: 2 right, 1 FAILED; adversarial: 2 right."""
    plan = [
        (1, "Lisbon", "CORRECT"),
        (1, "Porto", "WRONG"),
        (2, "Lisbon", "CORRECT"),
        (2, "in Lisbon", "CORRECT"),
        (2, "Lisbon", None),
        (5, "Not mentioned", "CORRECT"),
        (5, "No idea", "CORRECT"),
    ]
    results = []
    for i, (category, prediction, label) in enumerate(plan):
        gold = "Not mentioned in the conversation" if category == 5 else "Lisbon"
        results.append(score_case(_question(i, category, gold), prediction, label, None))
    return results


def test_summarize_overall_excludes_category_5() -> None:
    report = summarize(_results())
    assert isinstance(report, EvaluationReport)
    overall = report.overall
    assert overall.n == 5
    assert overall.judge_accuracy == pytest.approx(3 / 5)
    # f1 per kept case: 1, 0, 1, 2/3, 1 -> mean (11/3)/5 = 11/15
    assert overall.f1 == pytest.approx(11 / 15)
    # bleu1 per kept case: 1, 0, 1, 1/2, 1 -> 3.5/5
    assert overall.bleu1 == pytest.approx(0.7)
    assert overall.ci_low <= overall.judge_accuracy <= overall.ci_high
    assert overall.n_failed == 1
    assert report.failed_judge_calls == 1
    assert report.excluded_categories == (5,)


def test_summarize_per_category_covers_all() -> None:
    report = summarize(_results())
    assert list(report.by_category) == ["multi-hop", "temporal", "adversarial"]
    multi, temporal, adversarial = (report.by_category[k] for k in ("multi-hop", "temporal", "adversarial"))
    assert (multi.n, multi.judge_accuracy) == (2, 0.5)
    assert (temporal.n, temporal.judge_accuracy, temporal.n_failed) == (3, pytest.approx(2 / 3), 1)
    assert (adversarial.n, adversarial.judge_accuracy) == (2, 1.0)
    assert (adversarial.ci_low, adversarial.ci_high) == (1.0, 1.0)
    # "not mentioned" vs "not mentioned in conversation": P=1, R=2/4, F1=2/3; "no idea": 0
    assert adversarial.f1 == pytest.approx(1 / 3)


def test_summarize_without_exclusions_and_deterministic() -> None:
    everything = summarize(_results(), exclude_categories=())
    assert everything.overall.n == 7
    assert everything.overall.judge_accuracy == pytest.approx(5 / 7)
    assert summarize(_results(), seed=3) == summarize(_results(), seed=3)


def test_summarize_empty() -> None:
    report = summarize([])
    assert report.overall.n == 0 and math.isnan(report.overall.judge_accuracy)
    assert dict(report.by_category) == {}
    assert flat_metrics(report) == {"n": 0.0, "judge_failed": 0.0, "failed_judge_calls": 0.0}


def test_flat_metrics_names_and_values() -> None:
    report = summarize(_results())
    metrics = flat_metrics(report)
    assert metrics["judge_accuracy"] == pytest.approx(0.6)
    assert metrics["n"] == 5.0
    assert metrics["f1"] == pytest.approx(11 / 15)
    assert metrics["judge_ci_low"] == report.overall.ci_low
    assert metrics["cat_temporal_judge_accuracy"] == pytest.approx(2 / 3)
    assert metrics["cat_multi_hop_n"] == 2.0
    assert metrics["cat_adversarial_judge_accuracy"] == 1.0
    assert metrics["failed_judge_calls"] == 1.0
    assert all(re.fullmatch(r"[a-z0-9_]+", key) for key in metrics)
    assert all(isinstance(value, float) and math.isfinite(value) for value in metrics.values())


def test_metric_summary_is_frozen() -> None:
    summary = summarize(_results()).overall
    assert isinstance(summary, MetricSummary)
    with pytest.raises(AttributeError):
        summary.n = 3  # type: ignore[misc]


# --------------------------------------------------------------------------- paired difference


def _run(labels: list[str], order: list[int] | None = None) -> list[CaseResult]:
    results = [score_case(_question(i, 4), "x", label, None) for i, label in enumerate(labels)]
    return [results[i] for i in order] if order else results


def test_paired_difference_counts_and_ci() -> None:
    a = _run(["CORRECT", "CORRECT", "CORRECT", "WRONG"])
    b = _run(["WRONG", "CORRECT", "WRONG", "WRONG"], order=[3, 2, 1, 0])  # aligned by question id
    diff = paired_difference(a, b, seed=1)
    assert diff.n == 4
    assert diff.mean_difference == pytest.approx(0.5)  # per question: 1, 0, 1, 0
    assert (diff.a_wins, diff.b_wins, diff.ties) == (2, 0, 2)
    assert 0.0 <= diff.ci_low <= 0.5 <= diff.ci_high <= 1.0
    assert paired_difference(a, b, seed=1) == diff
    reverse = paired_difference(b, a, seed=1)
    assert reverse.mean_difference == pytest.approx(-0.5)
    assert (reverse.a_wins, reverse.b_wins) == (0, 2)


def test_paired_difference_identical_runs() -> None:
    a = _run(["CORRECT", "WRONG", "CORRECT"])
    diff = paired_difference(a, a)
    assert (diff.mean_difference, diff.ci_low, diff.ci_high, diff.ties) == (0.0, 0.0, 0.0, 3)


def test_paired_difference_excludes_category_5_by_default() -> None:
    a = [*_run(["CORRECT", "WRONG"]), score_case(_question(9, 5), "x", "CORRECT", None)]
    b = [*_run(["CORRECT", "WRONG"]), score_case(_question(9, 5), "x", "WRONG", None)]
    assert paired_difference(a, b).n == 2
    assert paired_difference(a, b).a_wins == 0
    assert paired_difference(a, b, exclude_categories=()).a_wins == 1


def test_paired_difference_needs_same_questions() -> None:
    a = _run(["CORRECT", "WRONG", "CORRECT"])
    with pytest.raises(ValueError, match="same question ids"):
        paired_difference(a, a[:2])
    with pytest.raises(ValueError, match="more than once"):
        paired_difference(a + a[:1], a)
