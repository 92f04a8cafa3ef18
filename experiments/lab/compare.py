"""The lab's optimizer comparison: the Hydra callback behind `make compare` and its re-run,
`python -m memtrace_loop.experiments.lab.compare [sweep_dir=...]` (config `conf/compare.yaml`).

The optimize runs of a multirun directory (each job's checkpoint names its MLflow run), else every
`memtrace optimize` run of the experiment (latest per optimizer, system, seed), are read back from
MLflow (`optimizer_run`), compared and written as comparison.md/.png/.json (`experiments.lab.comparison`),
logged to a `comparison` run. Not a `memtrace` command.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import hydra
from hydra.experimental.callback import Callback
from memtrace_loop.experiments.app_setup import quiet_progress_bars
from memtrace_loop.experiments.config import validated_compare
from memtrace_loop.experiments.console import setup_logging
from memtrace_loop.experiments.console_layout import app_console, markdown_blocks
from memtrace_loop.experiments.factory import launch_dir, resolve, to_plain
from memtrace_loop.experiments.lab.comparison import (
    ComparisonRow,
    OptimizerRun,
    QuestionOutcome,
    compare_runs,
    markdown_report,
    plot_comparison,
    rows_to_json,
    wilson_interval,
)
from memtrace_loop.experiments.lifecycle import run_app
from memtrace_loop.experiments.secret_guard import guarded, protect
from memtrace_loop.pipeline.core.command_line import command_line, program
from memtrace_loop.pipeline.core.run_folder import RunFolder
from memtrace_loop.pipeline.loop.costs import CandidateCosts, ProgressPoint
from memtrace_loop.pipeline.tracking import metric_names as names
from memtrace_loop.pipeline.tracking.loop_observer import TEST_QUESTIONS
from memtrace_loop.pipeline.tracking.mlflow_tracker import MlflowTracker
from memtrace_loop.pipeline.tracking.store_access import configure_tracking_client
from memtrace_loop.pipeline.tracking.tracker import TrackedRun, Tracker
from omegaconf import DictConfig
from rich.console import Console

logger = logging.getLogger("memtrace.compare")

CALLS_METRIC = names.BUDGET_SPENT  # cumulative LM calls spent, step = iteration (the loop's budget)
REPORT_NAMES = ("comparison.md", "comparison.png", "comparison.json")
ENTRY_POINT = "memtrace_loop.experiments.lab.compare"  # `python -m` this module: the comparison again


class ComparisonError(ValueError):
    """The runs cannot be compared (none found, one without per-question test scores)."""


def _metric(run: TrackedRun, key: str, older_key: str | None = None) -> float:
    """A final metric of a run under its name, its flat legacy name (`metric_names.legacy_name`) or `older_key`."""
    for name in (key, names.legacy_name(key), older_key):
        if name is not None and name in run.metrics:
            return float(run.metrics[name])
    return math.nan


def _history(source: Tracker, run_id: str, key: str) -> list[tuple[int, float]]:
    """A metric's (step, value) history, under its name or its flat legacy name."""
    history = source.metric_history(run_id, key)
    legacy = names.legacy_name(key)
    return history if history or legacy is None else source.metric_history(run_id, legacy)


def _tokens(run: TrackedRun) -> float:
    """Prompt + completion tokens of the calls the LMs received (older runs: `lm_tokens_made`)."""
    prompt = _metric(run, names.TOKENS_PROMPT)
    if not math.isnan(prompt):
        completion = _metric(run, names.TOKENS_COMPLETION)
        return prompt + (0.0 if math.isnan(completion) else completion)
    return _metric(run, names.TOKENS_MADE)


def calls_by_iteration(source: Tracker, run: TrackedRun, iterations: Sequence[int]) -> tuple[dict[int, float], bool]:
    """Cumulative LM calls spent by the end of each iteration (`CALLS_METRIC`), and whether that is an
    estimate: a run logged without it gets its total calls spread evenly over its iterations."""
    spent = dict(_history(source, run.run_id, CALLS_METRIC))
    if spent:
        return {int(k): float(v) for k, v in spent.items()}, False
    total = _metric(run, names.CALLS_MADE, "lm_calls_made")
    ordered = sorted(iterations)
    return {it: total * (index + 1) / len(ordered) for index, it in enumerate(ordered)}, True


def progress_points(
    dev_by_iteration: dict[int, float], dev_final: float, calls: dict[int, float]
) -> tuple[ProgressPoint, ...]:
    """The state after each iteration: the dev accuracy logged at the START of iteration i + 1 (or the
    final one) is the incumbent's after iteration i."""
    iterations = sorted(dev_by_iteration)
    after = [*(dev_by_iteration[i] for i in iterations[1:]), dev_final]
    return tuple(ProgressPoint(i, calls.get(i, math.nan), dev) for i, dev in zip(iterations, after, strict=False))


def _test_questions(source: Tracker, run_id: str) -> tuple[QuestionOutcome, ...]:
    with tempfile.TemporaryDirectory(prefix="memtrace-compare-") as tmp:
        try:
            path = source.download_artifact(run_id, TEST_QUESTIONS, Path(tmp))
            rows = json.loads(path.read_text(encoding="utf-8"))
        except Exception as exc:  # MLflow's own error for a missing artifact (this module does not import MLflow)
            raise ComparisonError(
                f"run {run_id} has no {TEST_QUESTIONS} (logged by `memtrace optimize` since the comparison "
                f"exists): rerun it to compare it: {exc}"
            ) from exc
    return tuple(
        QuestionOutcome(str(row["question_id"]), float(row["start"]), float(row["final"]))
        for row in rows if row.get("counted", True)
    )


def optimizer_run(source: Tracker, run_id: str) -> OptimizerRun:
    """One `memtrace optimize` parent run read back as the comparison needs it."""
    run = source.get_run(run_id)
    missing = [tag for tag in ("memtrace.optimizer", "memtrace.system") if tag not in run.tags]
    if missing:
        raise ComparisonError(f"run {run_id} is not a `memtrace optimize` run (no tag {', '.join(missing)})")
    dev = dict(_history(source, run_id, names.quality(names.DEV, names.JUDGE_ACCURACY)))  # step = iteration
    dev_final = _metric(run, names.quality(names.DEV_FINAL, names.JUDGE_ACCURACY))
    calls, estimated = calls_by_iteration(source, run, sorted(dev))
    budget = run.params.get("loop.budget_calls")  # "None" when unset
    # the candidate costs as logged (`candidates/*`; zeros for runs logged before them)
    costs = (_metric(run, names.candidate_cost(f.name)) for f in fields(CandidateCosts))
    candidates = CandidateCosts(*(0 if math.isnan(v) else int(v) for v in costs))
    return OptimizerRun(
        run_id, run.tags["memtrace.optimizer"], run.tags["memtrace.system"], int(run.params.get("seed", "0")),
        _test_questions(source, run_id), lm_calls=_metric(run, names.CALLS_MADE, "lm_calls_made"),
        tokens=_tokens(run), prompt_chars=_metric(run, names.PROMPT_CHARS_FINAL), seconds=_metric(run, names.ELAPSED_S),
        progress=progress_points({int(k): v for k, v in dev.items()}, dev_final, calls), calls_estimated=estimated,
        budget="" if budget in (None, "None", "") else str(budget), candidates=candidates,
    )


def audit_note(runs: Sequence[OptimizerRun], confidence: float = 0.95) -> str | None:
    """How many audited screened-out candidates (`loop.screen.audit`) would have passed the gate, pooled
    over the runs, with a Wilson interval; None when no run audited one."""
    audited = sum(r.candidates.audited for r in runs)
    if not audited:
        return None
    would = sum(r.candidates.audit_would_pass for r in runs)
    low, high = wilson_interval(would, audited, confidence)
    return (f"Screen audit: {would} of {audited} screened-out candidates would have passed the gate on the whole "
            f"dev split ({100 * would / audited:.1f}%, {round(100 * confidence)}% Wilson interval "
            f"[{100 * low:.1f}, {100 * high:.1f}]).")


def run_ids_in_sweep(sweep_dir: Path) -> list[str]:
    """The MLflow run of every job of a multirun directory (each job's checkpoint names it; rglob: a job's
    directory nests when an override value holds a path)."""
    checkpoints = sorted(Path(sweep_dir).rglob(RunFolder.CHECKPOINT))
    found = (json.loads(c.read_text(encoding="utf-8")).get("mlflow_run_id") for c in checkpoints)
    return [str(run_id) for run_id in found if run_id]


@dataclass(frozen=True)
class ComparisonReport:
    rows: tuple[ComparisonRow, ...]
    runs: tuple[OptimizerRun, ...]
    paths: tuple[Path, ...]  # comparison.md, comparison.png, comparison.json
    run_id: str | None  # the MLflow run the report was logged to


def write_report(
    runs: Sequence[OptimizerRun], out_dir: Path, *, reference: str = "attribution", confidence: float = 0.95,
    n_resamples: int = 1000, seed: int = 0,
) -> tuple[tuple[ComparisonRow, ...], tuple[Path, ...]]:
    """The rows, and the Markdown table, plot and JSON written into `out_dir`."""
    rows = compare_runs(runs, reference, n_resamples=n_resamples, confidence=confidence, seed=seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    markdown, plot, data = (out_dir / name for name in REPORT_NAMES)
    notes = [f"Seeds: {', '.join(str(s) for s in sorted({r.seed for r in runs}))}; {len(runs)} runs."]
    notes += [audit] if (audit := audit_note(runs, confidence)) else []
    budgets = [r.budget for r in runs]
    markdown.write_text(markdown_report(rows, reference=reference, budgets=budgets, confidence=confidence,
                                        notes=notes), encoding="utf-8")
    plot_comparison(rows, plot)
    extra = {
        "reference": reference, "confidence": confidence, "n_resamples": n_resamples,
        "runs": [{"run_id": r.run_id, "optimizer": r.optimizer, "system": r.system, "seed": r.seed,
                  "budget": r.budget} for r in runs],
    }
    data.write_text(json.dumps(rows_to_json(rows, extra), indent=1), encoding="utf-8")
    return rows, (markdown, plot, data)


def log_report(
    tracker: MlflowTracker, experiment: str, rows: Sequence[ComparisonRow], runs: Sequence[OptimizerRun],
    paths: Sequence[Path], reference: str,
) -> str:
    """A `comparison` run in `experiment`: the report files, each row's gain and CI as metrics
    (`gain/<optimizer>/<system>/mean|ci_low|ci_high`) and the compared run ids as tags."""
    tracker.open_experiment(experiment)
    with tracker.start_run("comparison") as run_id:
        tracker.set_tags({
            "memtrace.command": "compare",
            "memtrace.reference": reference,
            "memtrace.compared_runs": ",".join(r.run_id for r in runs),
            "memtrace.optimizers": ",".join(dict.fromkeys(r.optimizer for r in runs)),
            "memtrace.systems": ",".join(sorted({r.system for r in runs})),
        })
        metrics = {names.gain(row.optimizer, row.system, stat): getattr(row.gain, stat)
                   for row in rows if row.gain.n for stat in ("mean", "ci_low", "ci_high")}
        tracker.log_metrics({k: v for k, v in metrics.items() if math.isfinite(v)})
        for path in paths:
            tracker.log_artifact(path)
    return run_id


def compare(
    tracking_uri: str, experiment: str, out_dir: Path, *, sweep_dir: Path | None = None,
    reference: str = "attribution", confidence: float = 0.95, n_resamples: int = 1000, log: bool = True,
) -> ComparisonReport:
    """Read the runs (of `sweep_dir`, else of the whole experiment), write the report, log it."""
    tracker = MlflowTracker(tracking_uri)
    if sweep_dir is not None:
        run_ids = run_ids_in_sweep(sweep_dir)
        where = f"multirun directory {sweep_dir}"
    else:
        run_ids = tracker.search_run_ids(experiment, "tags.`memtrace.command` = 'optimize'")
        where = f"MLflow experiment {experiment!r} at {tracking_uri}"
    if not run_ids:
        raise ComparisonError(f"no `memtrace optimize` runs in the {where}")
    found = (optimizer_run(tracker, run_id) for run_id in run_ids)  # oldest first: the latest per key kept
    runs = list({(run.optimizer, run.system, run.seed): run for run in found}.values())
    rows, paths = write_report(runs, out_dir, reference=reference, confidence=confidence, n_resamples=n_resamples)
    run_id = log_report(tracker, experiment, rows, runs, paths, reference) if log else None
    return ComparisonReport(rows, tuple(runs), paths, run_id)


def _show(report: ComparisonReport, console: Console) -> None:
    for block in markdown_blocks(report.paths[0].read_text(encoding="utf-8")):  # its tables fitted to the width
        console.print(block)
    console.print(f"Comparison of {len(report.runs)} runs: {', '.join(str(p) for p in report.paths)}")
    if report.run_id:
        console.print(f"MLflow run [bold]{report.run_id}[/] (`comparison`)")


class ComparisonCallback(Callback):
    """After a `memtrace optimize` multirun: compare its runs into `<sweep dir>/comparison/`, logged to
    the sweep's MLflow experiment. Registered under `hydra.callbacks` by the experiment config."""

    def __init__(self, reference: str = "attribution", confidence: float = 0.95, n_resamples: int = 1000) -> None:
        self.reference = reference
        self.confidence = confidence
        self.n_resamples = n_resamples

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        quiet_progress_bars()  # the launcher's process: the jobs (which set it up) may have run elsewhere
        sweep_dir = resolve(str(config.hydra.sweep.dir), Path.cwd())
        try:
            report = compare(
                str(config.tracking.uri), str(config.tracking.experiment), sweep_dir / "comparison",
                sweep_dir=sweep_dir, reference=self.reference, confidence=self.confidence,
                n_resamples=self.n_resamples,
            )
        except Exception:
            # Hydra turns a callback's exception into a warning; `make compare` must fail instead
            again = command_line(program("python"), "-m", ENTRY_POINT, sweep_dir=sweep_dir)
            logger.exception("the comparison failed; once fixed: %s", again)
            raise SystemExit(1) from None
        _show(report, app_console(echo=False))  # the log file still open is the last job's


def run_compare(cfg: DictConfig, console: Console | None = None) -> ComparisonReport:
    """The comparison from its composed config (`conf/compare.yaml`)."""
    base_dir = launch_dir()
    config = validated_compare(to_plain(cfg))
    configure_tracking_client(config.tracking.timeout_s, config.tracking.max_retries)
    sweep_dir = resolve(config.sweep_dir, base_dir) if config.sweep_dir else None
    default_out = sweep_dir / "comparison" if sweep_dir else f"outputs/compare/{config.tracking.experiment}"
    report = compare(
        config.tracking.uri, config.tracking.experiment, resolve(config.out or default_out, base_dir),
        sweep_dir=sweep_dir, reference=config.reference,
        confidence=config.confidence, n_resamples=config.n_resamples, log=config.log,
    )
    _show(report, console or app_console())
    return report


@guarded  # refuses secret overrides before Hydra parses (and saves) them
@hydra.main(config_path="pkg://memtrace_loop.conf", config_name="compare", version_base="1.3")
def main(cfg: DictConfig) -> None:
    setup_logging()
    protect(to_plain(cfg))  # Hydra's saved files scrubbed, logs and console masked
    run_app("compare", lambda _stop: run_compare(cfg))


if __name__ == "__main__":
    sys.argv[0] = f"python -m {ENTRY_POINT}"  # the program its one-line errors name
    main()
