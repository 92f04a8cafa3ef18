"""Tracking an optimization run: one nested run per iteration under the tracker's active parent run.

Each iteration's nested run (dated back to when its work began) gets the train/dev metrics (step =
iteration), blame and attribution tables, `attribution/*` shares, every candidate's prompt diff
(`candidates/<i>-accepted|rejected.diff.txt`, a sentence per line: `prompt_diff`) and verdict, the
cumulative `lm_calls/<role>/made|cached|reused` and `lm_calls/budget_spent`, and (given `traces`) the
train failures as MLflow traces; an accepted set is registered in the prompt registry (`CHAMPION`). The
parent run gets the headline curves per iteration and, at the end, the test metrics of the starting and
final sets, `test_questions.json` (what the lab's comparison pairs), the run's LM-call totals
(`final_call_metrics`), candidate costs, prompt lengths, the plots and the history and prompt files.
Metric names are `metric_names`'. Every text passes `scrub`; everything goes through the `Tracker`
protocol. It does not run the loop and decides nothing.
"""

from __future__ import annotations

import difflib
import json
import logging
import math
import re
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from memtrace_loop.pipeline.core.records import PromptSet
from memtrace_loop.pipeline.loop.costs import calls_to_gain, candidate_costs
from memtrace_loop.pipeline.loop.failure_impact import failure_impact
from memtrace_loop.pipeline.loop.optimization import IterationRecord, LoopResult
from memtrace_loop.pipeline.tracking import metric_names as names
from memtrace_loop.pipeline.tracking.plots import IterationScore, plot_blame, plot_scores
from memtrace_loop.pipeline.tracking.run_logging import (
    attribution_columns,
    attribution_metrics,
    call_metrics,
    impact_metrics,
    run_metrics,
    scrub,
)
from memtrace_loop.pipeline.tracking.traces import FailureTraces
from memtrace_loop.pipeline.tracking.tracker import CHAMPION, Tracker

logger = logging.getLogger(__name__)


DIFF_WIDTH = 100  # a diffed instruction line: one sentence, wrapped at this many characters
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")


def instruction_lines(text: str, width: int = DIFF_WIDTH) -> list[str]:
    """An instruction as the lines its diff compares: its own lines, each cut after every sentence and
    wrapped at `width` (never inside a word), so a changed sentence is a changed line, not the whole
    paragraph. Blank lines are kept."""
    lines: list[str] = []
    for line in text.splitlines():
        if not line.strip():
            lines.append("")
            continue
        indent = line[: len(line) - len(line.lstrip())]
        for sentence in _SENTENCE_END.split(line.strip()):
            lines.extend(textwrap.wrap(sentence, width, initial_indent=indent, subsequent_indent=indent,
                                       break_long_words=False, break_on_hyphens=False) or [indent])
    return lines


def prompt_diff(before: PromptSet, after: PromptSet) -> str:
    """A line-wise unified diff of every stage instruction that changed (`instruction_lines`: a sentence
    per line, wrapped), so an edited sentence shows as a changed line among unchanged context."""
    chunks: list[str] = []
    for stage in sorted(set(before) | set(after)):
        old = before.instruction_by_stage.get(stage, "")
        new = after.instruction_by_stage.get(stage, "")
        if old != new:
            chunks.extend(
                difflib.unified_diff(
                    instruction_lines(old), instruction_lines(new), f"{stage} (current)", f"{stage} (candidate)",
                    lineterm="",
                )
            )
    return "\n".join(chunks)


TEST_QUESTIONS = "test_questions.json"
# MLflow's artifact viewer previews a file by its last extension only (`txt`, `json`, `yaml`, `md`, ...;
# `diff` and `patch` show "Select a file to preview"): diffs end in `.diff.txt` to be readable in the UI
DIFF_SUFFIX = ".diff.txt"


def test_question_rows(result: LoopResult) -> list[dict[str, object]]:
    """One row per test question: the judge scores of the starting and the final prompt set on it, and
    whether it counts in the overall score (`counted`: its category is not excluded)."""
    final_by_id = result.test_final.result_by_question
    excluded = set(result.test_start.report.excluded_categories)
    rows: list[dict[str, object]] = []
    for start in result.test_start.results:
        final = final_by_id.get(start.question.id)
        if final is None:
            continue
        rows.append({
            "question_id": start.question.id, "conversation_id": start.question.conversation_id,
            "category": start.question.category, "counted": start.question.category not in excluded,
            "start": start.scores.judge, "final": final.scores.judge,
        })
    return rows


def final_call_metrics(result: LoopResult) -> dict[str, float]:
    """The run's LM-call totals (test evaluation included): per role, all roles, saved, reused (and
    the share of calls reuse saved, per role and in all), tokens."""
    total = result.calls.total()
    return {
        **call_metrics(result.calls, failed=True),
        **{names.role_calls(role, names.REUSED_SHARE): calls.reuse_share
           for role, calls in result.calls.by_role.items()},
        names.CALLS_MADE: float(result.lm_calls_made),
        names.CALLS_CACHED: float(total.cached),
        names.CALLS_REUSED: float(total.reused),
        names.CALLS_REUSED_SHARE: total.reuse_share,
        names.CALLS_SAVED: float(result.lm_calls_saved),
        names.TOKENS_PROMPT: float(total.prompt_tokens),
        names.TOKENS_COMPLETION: float(total.completion_tokens),
    }


def candidate_cost_metrics(result: LoopResult, min_gain: float) -> dict[str, float]:
    """What the run's candidates cost (`pipeline.loop.costs`), and the calls to 90% of its final dev gain."""
    costs = candidate_costs(result.history, min_gain)
    values = {
        "candidates": costs.candidates, "screened": costs.screened, "screened_out": costs.screened_out,
        "accepted": costs.accepted, "screen_calls": costs.screen_calls, "full_calls": costs.full_calls,
        "calls_per_candidate": costs.per_candidate, "calls_per_accepted": costs.per_accepted,
        "audited": costs.audited, "audit_would_pass": costs.audit_would_pass,
    }
    metrics = {names.candidate_cost(k): float(v) for k, v in values.items() if not math.isnan(float(v))}
    to_gain = calls_to_gain(result.history, result.dev_final.report.overall.judge_accuracy)
    return metrics if to_gain is None else {**metrics, names.CALLS_TO_90: to_gain}


def final_impact_metrics(result: LoopResult) -> dict[str, float]:
    """`<scope>/failures/*` of the final test evaluations, and of every evaluation on train and dev
    summed (scopes `train`, `dev`: verdicts, a question counting once per evaluation)."""
    metrics = {
        **impact_metrics(failure_impact(result.test_start), names.TEST_START),
        **impact_metrics(failure_impact(result.test_final), names.TEST_FINAL),
    }
    for split, impact in result.impact_by_split.items():
        if split != "test":
            metrics.update(impact_metrics(impact, split))
    return metrics


def iteration_params(record: IterationRecord) -> dict[str, str]:
    """The params telling iterations apart in the MLflow UI's run table: `iteration`, `candidates`,
    `candidate.<i>.stages|verdict`, `accepted` (index or `none`), `stage` (what it changed), `accepted.knobs`,
    `blamed_stage` (the most blamed)."""
    params = {"iteration": str(record.iteration), "candidates": str(len(record.outcomes))}
    accepted_index = "none"
    for index, outcome in enumerate(record.outcomes):
        params[f"candidate.{index}.stages"] = ",".join(outcome.candidate.changed_stages) or "none"
        params[f"candidate.{index}.verdict"] = "accepted" if outcome.accepted else "rejected"
        if outcome.accepted:
            accepted_index = str(index)
    accepted = record.accepted
    params["accepted"] = accepted_index
    params["stage"] = ",".join(accepted.candidate.changed_stages) if accepted is not None else "none"
    if accepted is not None and accepted.candidate.knobs:
        params["accepted.knobs"] = ",".join(f"{k}={v}" for k, v in sorted(accepted.candidate.knobs.items()))
    params["blamed_stage"] = record.blame.rows[0].stage if record.blame.rows else "none"  # most blamed first
    return params


class TrackingLoopObserver:
    """A `LoopObserver` logging into the tracker's active (parent) run. An iteration's nested run is dated
    back to when its work began (the observer's creation, then the end of the previous iteration's
    logging: the loop tells only of finished iterations), so its UI duration is its work and logging."""

    def __init__(
        self, tracker: Tracker, system_name: str, secrets: Iterable[str], register_prompts: bool = True,
        base_knobs: Mapping[str, Any] | None = None, traces: FailureTraces | None = None,
        clock: Callable[[], float] = time.time, min_gain: float = 0.0,
    ) -> None:
        self.tracker, self.system_name, self.secrets = tracker, system_name, tuple(secrets)
        self.min_gain = min_gain  # the gate's, to count which audited screened-out candidates would have passed
        self.register_prompts = register_prompts
        # the configured system's knobs that differ from their defaults: with the accepted knob changes,
        # the knob values registered with an accepted set (what the export's `knobs` holds)
        self.base_knobs = dict(base_knobs or {})
        self.traces, self.clock = traces, clock
        self.work_started = clock()  # when the next iteration's work began

    def _text(self, text: str, artifact: str) -> None:
        self.tracker.log_text(scrub(text, self.secrets), artifact)

    def on_iteration(self, record: IterationRecord) -> None:
        try:
            self._log_iteration(record)
        finally:
            self.work_started = self.clock()

    def _log_iteration(self, record: IterationRecord) -> None:
        tracker = self.tracker
        nested = tracker.start_run(f"iteration-{record.iteration}", nested=True, start_time=self.work_started)
        with nested as run_id:
            tracker.set_tags({"memtrace.iteration": str(record.iteration)})
            tracker.log_params({k: scrub(v, self.secrets) for k, v in iteration_params(record).items()})
            metrics = {
                **run_metrics(record.train, names.TRAIN),
                **run_metrics(record.dev, names.DEV),
                names.CANDIDATES: len(record.outcomes),
                names.ACCEPTED: int(record.accepted is not None),
                names.ATTRIBUTED_FAILURES: len(record.attributions),
                **attribution_metrics(record.attributions),
                **call_metrics(record.calls),
                names.BUDGET_SPENT: record.budget_spent,
            }
            tracker.log_metrics(metrics, step=record.iteration)
            self._text(json.dumps(record.prompts.to_dict(), indent=2, ensure_ascii=False), "prompts.json")
            self._text(json.dumps(record.blame.as_rows(), indent=2), "blame.json")
            if record.attributions:
                tracker.log_table(attribution_columns(record.attributions, self.secrets), "attributions.json")
            for index, outcome in enumerate(record.outcomes):
                verdict = "accepted" if outcome.accepted else "rejected"
                header = (
                    f"# candidate {index} ({verdict}): stages {', '.join(outcome.candidate.changed_stages)}\n"
                    f"# dev accuracy {outcome.dev_accuracy:.4f}, paired gain {outcome.gain.mean_difference:+.4f} "
                    f"[{outcome.gain.ci_low:+.4f}, {outcome.gain.ci_high:+.4f}]\n# {outcome.candidate.rationale}\n"
                )
                self._text(header + prompt_diff(record.prompts, outcome.candidate.prompts),
                           f"candidates/{index}-{verdict}{DIFF_SUFFIX}")
                for stage, feedback in outcome.candidate.feedback_by_stage.items():
                    self._text(feedback, f"candidates/{index}-feedback-{stage}.txt")
                for name, columns in outcome.candidate.tables.items():  # e.g. GEPA's candidate pool
                    tracker.log_table(dict(columns), f"candidates/{index}-{name}")
            if self.traces is not None:  # never raises for a logging failure (`traces.log_question_traces`)
                traced = self.traces(record.train, record.attributions, run_id)
                logger.info("iteration %d: logged %d train failure traces to MLflow run %s", record.iteration,
                            traced, run_id)
            accepted = record.accepted
        # the parent run gets the headline curves too, one point per iteration
        tracker.log_metrics(
            {names.quality(names.DEV, names.JUDGE_ACCURACY): record.dev.report.overall.judge_accuracy,
             names.quality(names.TRAIN, names.JUDGE_ACCURACY): record.train.report.overall.judge_accuracy,
             names.BUDGET_SPENT: record.budget_spent},
            step=record.iteration,
        )
        if accepted is not None and self.register_prompts:
            try:
                tracker.register_prompts(
                    self.system_name, accepted.candidate.prompts,
                    f"iteration {record.iteration}: {accepted.candidate.rationale}"[:500],
                    {"iteration": str(record.iteration), "dev_accuracy": f"{accepted.dev_accuracy:.4f}"},
                    alias=CHAMPION, knobs={**self.base_knobs, **record.knobs, **accepted.candidate.knobs},
                )
            except Exception as exc:  # the registry is a convenience; never lose a run over it
                logger.warning("could not register the accepted prompt set: %s", exc)

    def on_finish(self, result: LoopResult) -> None:
        self.tracker.log_metrics(
            {
                **run_metrics(result.test_start, names.TEST_START),
                **run_metrics(result.test_final, names.TEST_FINAL),
                **run_metrics(result.dev_final, names.DEV_FINAL),
                **final_call_metrics(result),
                **final_impact_metrics(result),
                **candidate_cost_metrics(result, self.min_gain),
                names.TOKENS_MADE: result.lm_tokens_made,
                names.PROMPT_CHARS_START: sum(map(len, result.start_prompts.instruction_by_stage.values())),
                names.PROMPT_CHARS_FINAL: sum(map(len, result.final_prompts.instruction_by_stage.values())),
                names.ITERATIONS: len(result.history) - 1,
            }
        )
        if result.stop_reason:
            self.tracker.set_tags({"memtrace.stop_reason": result.stop_reason})
        self._text(json.dumps([s.to_dict() for s in result.history], indent=2, ensure_ascii=False), "history.json")
        self._text(json.dumps(result.final_prompts.to_dict(), indent=2, ensure_ascii=False), "final_prompts.json")
        self._text(prompt_diff(result.start_prompts, result.final_prompts), f"final_prompts{DIFF_SUFFIX}")
        self._text(json.dumps(test_question_rows(result), indent=1), TEST_QUESTIONS)
        with tempfile.TemporaryDirectory(prefix="memtrace-plots-") as tmp:
            for path in self.plots(result, Path(tmp)):
                self.tracker.log_artifact(path, "plots")

    @staticmethod
    def plots(result: LoopResult, directory: Path) -> list[Path]:
        scores = [
            IterationScore(
                s.iteration, s.dev_accuracy, s.dev_ci[0], s.dev_ci[1], s.train_accuracy,
                tuple(c.dev_accuracy for c in s.candidates if c.accepted),
                tuple(c.dev_accuracy for c in s.candidates if not c.accepted),
            )
            for s in result.history
        ]
        paths = [plot_scores(scores, directory / "scores.png")]
        blame = [(summary.iteration, summary.blame) for summary in result.history if summary.blame.rows]
        if blame:
            paths.append(plot_blame(blame, directory / "blame.png"))
        return paths
