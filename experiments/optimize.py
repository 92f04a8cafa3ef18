"""`memtrace optimize`: the Hydra app of the closed loop.

It builds the system, judge, optimizer and split from the config, runs `pipeline.loop.OptimizationLoop`
in one MLflow parent run (a nested run per iteration), checkpoints every iteration (`resume=<run dir>`
continues with the config it was started with, under the folder's run lock), exports the best prompt
set and prints the summary. Each start ends FAILED the RUNNING runs of its experiment whose folder's
lock is free; `resume=` of a folder without a checkpoint ends its run FAILED. The work is `pipeline`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dspy
import hydra
from hydra.core.hydra_config import HydraConfig
from memtrace_loop.experiments.config import OptimizeConfig, stand_in_tags, validated_optimize
from memtrace_loop.experiments.console import (
    RichProgress,
    budget_line,
    calls_table,
    candidate_cost_line,
    diagnosis_panel,
    failed_calls_lines,
    impact_clause,
    loop_tables,
    reuse_line,
    setup_logging,
)
from memtrace_loop.experiments.factory import (
    attributor_of,
    build_components,
    build_optimizer,
    launch_dir,
    local_models,
    resolve,
    secret_values,
    splits_of,
    to_plain,
)
from memtrace_loop.experiments.failure_analysis import loop_diagnosis, write_diagnosis
from memtrace_loop.experiments.lifecycle import run_app
from memtrace_loop.experiments.output_dirs import app_output_dir
from memtrace_loop.experiments.output_dirs import run_name as sweep_run_name
from memtrace_loop.experiments.secret_guard import guarded
from memtrace_loop.experiments.session import AppSession, open_session
from memtrace_loop.memory_systems.base import MemorySystem
from memtrace_loop.memory_systems.registry import spec_of
from memtrace_loop.optimizers.base import Optimizer
from memtrace_loop.optimizers.gepa_program import save_program_state
from memtrace_loop.pipeline.analysis.attribution.protocol import Attributor
from memtrace_loop.pipeline.analysis.diagnosis import Diagnosis
from memtrace_loop.pipeline.backends.embeddings import build_embedder
from memtrace_loop.pipeline.backends.failure_guard import FailedCalls, FinishedWithFailedCalls, failed_calls_outcome
from memtrace_loop.pipeline.backends.lm import LMSet
from memtrace_loop.pipeline.backends.preflight import check_endpoints
from memtrace_loop.pipeline.core.command_line import command_line
from memtrace_loop.pipeline.core.prompt_files import ExportedPrompts, write_prompts
from memtrace_loop.pipeline.core.prompt_formats import PromptFormat, write_prompt_formats
from memtrace_loop.pipeline.core.redaction import redact_tree, restore_tree
from memtrace_loop.pipeline.core.run_folder import RunFolder
from memtrace_loop.pipeline.core.run_lock import hold_run_lock
from memtrace_loop.pipeline.core.stop import Interrupted, StopToken
from memtrace_loop.pipeline.data.splits import Split
from memtrace_loop.pipeline.loop.checkpoint import (
    Checkpoint,
    CheckpointError,
    FinishedRun,
    mark_finished,
    read_checkpoint,
)
from memtrace_loop.pipeline.loop.failure_impact import FailureImpact, failure_impact
from memtrace_loop.pipeline.loop.optimization import LoopResult, OptimizationLoop
from memtrace_loop.pipeline.report.run_report import report_for_loop
from memtrace_loop.pipeline.tracking.loop_observer import TrackingLoopObserver
from memtrace_loop.pipeline.tracking.metric_names import ELAPSED_S
from memtrace_loop.pipeline.tracking.mlflow_tracker import MlflowTracker
from memtrace_loop.pipeline.tracking.redacting_tracker import RedactingTracker
from memtrace_loop.pipeline.tracking.run_logging import (
    dataset_input,
    dataset_source,
    failed_call_metrics,
    failed_call_tags,
    flatten,
    git_commit,
    log_params,
    process_tags,
    retry_metrics,
)
from memtrace_loop.pipeline.tracking.run_record import end_runs_of_folder, end_stale_runs, folder_tags
from memtrace_loop.pipeline.tracking.store_access import TrackingUnavailable, tracking_available
from omegaconf import DictConfig
from rich.console import Console

logger = logging.getLogger("memtrace.optimize")

CHECKPOINT = RunFolder.CHECKPOINT
SAVED_CONFIG = RunFolder.CONFIG
NOT_PART_OF_A_RUN = ("resume", "run_name", "workers")  # may differ when resuming


def config_digest(plain: Mapping[str, Any]) -> str:
    kept = {k: v for k, v in plain.items() if k not in NOT_PART_OF_A_RUN}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:16]


def _run_dir(plain: Mapping[str, Any], base_dir: Path) -> tuple[Path, Mapping[str, Any]]:
    """(run directory, the config to use): a resumed run's saved config (other overrides than `workers`
    ignored, with a warning naming them), else a new folder with the config saved in it (redacted)."""
    if plain.get("resume"):
        run_dir = resolve(str(plain["resume"]), base_dir)
        saved = run_dir / SAVED_CONFIG
        if not (run_dir / CHECKPOINT).exists() or not saved.exists():
            raise CheckpointError(f"resume={plain['resume']}: no {CHECKPOINT} and {SAVED_CONFIG} in {run_dir}")
        # saved redacted: the real values (a key in api_base) come back from the config given now
        config = restore_tree(json.loads(saved.read_text(encoding="utf-8")), plain, secret_values(plain))
        ignored = ignored_overrides(plain, config, typed_override_keys())
        if ignored:
            logger.warning(
                "resume: ignoring %s (a resumed run keeps the config it was started with; only workers may change)",
                ", ".join(ignored),
            )
        config["workers"] = plain["workers"]
        config["resume"] = plain["resume"]  # not part of a run (left out of its digest): says it is resumed
        return run_dir, config
    run_dir = app_output_dir("optimize", base_dir)
    saved = redact_tree(dict(plain), secret_values(plain))  # no key in api_base reaches the disk
    (run_dir / SAVED_CONFIG).write_text(json.dumps(saved, indent=2), encoding="utf-8")
    return run_dir, plain


def typed_override_keys() -> tuple[str, ...] | None:
    """The keys or groups of the overrides typed for this Hydra job (`+x=1` -> `x`); None without one."""
    if not HydraConfig.initialized():
        return None
    keys = (str(o).partition("=")[0].lstrip("+~").partition("@")[0] for o in HydraConfig.get().overrides.task)
    return tuple(key for key in keys if key and not key.startswith("hydra."))


def ignored_overrides(
    given: Mapping[str, Any], saved: Mapping[str, Any], typed: Sequence[str] | None = None
) -> list[str]:
    """The keys (never the values) whose value in `given` differs from the saved config; with `typed`
    only those typed (a key, or a group that changed a key under it): an untyped default is no override."""
    now, then = flatten(dict(given)), flatten(dict(saved))
    differing = sorted(
        key for key in set(now) | set(then)
        if key.split(".")[0] not in NOT_PART_OF_A_RUN and now.get(key) != then.get(key)
    )
    if typed is None:
        return differing
    return sorted({
        name for name in typed if name.split(".")[0] not in NOT_PART_OF_A_RUN
        and any(key == name or key.startswith(f"{name}.") for key in differing)
    })


def _already_finished(run_dir: Path, checkpoint: Checkpoint, finished: FinishedRun, console: Console) -> dict[str, Any]:
    console.print(
        f"Run {run_dir} already finished (MLflow run {checkpoint.run_id}); nothing to resume. "
        f"Test judge accuracy {finished.test_start:.3f} -> {finished.test_final:.3f}; "
        f"exported prompts: {finished.exported[0]}"
    )
    return {
        "run_id": checkpoint.run_id, "run_dir": str(run_dir), "exported": list(finished.exported),
        "test_start": finished.test_start, "test_final": finished.test_final, "result": None,
        "calls": None, "already_finished": True,
    }


def export_best(
    result: LoopResult, system_name: str, run_id: str, run_dir: Path, knobs: Mapping[str, Any] | None = None,
    formats: Sequence[PromptFormat] = (), mark: Mapping[str, float] | None = None,
) -> list[Path]:
    """The final prompt set as best_prompts.json and .yaml (headline metrics, the failed-calls `mark`, the
    knobs that differ from their defaults), then the files of the system's own prompt `formats`."""
    metrics = {
        "test_judge_accuracy": result.test_final.report.overall.judge_accuracy,
        "test_start_judge_accuracy": result.test_start.report.overall.judge_accuracy,
        "dev_judge_accuracy": result.dev_final.report.overall.judge_accuracy,
        **(mark or {}),
    }
    exported = ExportedPrompts.create(system_name, result.final_prompts, run_id, metrics, knobs=knobs)
    ours = [write_prompts(exported, path) for path in RunFolder(run_dir).best_prompts]
    return ours + write_prompt_formats(exported, formats, run_dir)


def export_program(result: LoopResult, system: MemorySystem, run_dir: Path) -> Path:
    """The final prompt set and knobs as a DSPy program state (best_program.json; `load_program`)."""
    final = system.with_knobs(result.final_knobs)  # the accepted knob changes too (the export's `knobs`)
    return save_program_state(final, result.final_prompts, RunFolder(run_dir).best_program)


@dataclass(frozen=True)
class _LoopParts:

    splits: Split
    lms: LMSet
    system: MemorySystem
    judge: dspy.Predict
    optimizer: Optimizer
    attributor: Attributor


@dataclass(frozen=True)
class _Finished:

    result: LoopResult
    paths: list[Path]
    plots: list[Path]
    report: Path
    diagnosed: int | None  # the iteration whose train failures were diagnosed (None: none attributed)
    diagnosis: Diagnosis
    improved: bool
    elapsed: float
    failed: FailedCalls  # LM calls that finally failed (none: a clean run)


def optimize(cfg: DictConfig, console: Console | None = None, stop: StopToken | None = None) -> dict[str, Any]:
    """`_optimize` inside the run's local model servers, under the run folder's lock."""
    plain = to_plain(cfg)
    _fail_unstarted_resume(plain)  # resume= of a folder without a checkpoint: its run ends FAILED, then refused
    with local_models() as servers:
        session = open_session("optimize", plain, validated_optimize, console=console, stop=stop,
                               servers=servers, folder_of=_run_dir)
        with hold_run_lock(session.folder.root, "memtrace optimize"):  # a second resume of it: RunLocked
            return _optimize(session)


def _fail_unstarted_resume(plain: Mapping[str, Any]) -> None:
    """`resume=` of a folder without a checkpoint (killed before its first iteration ended): under its
    lock, its RUNNING MLflow run is ended FAILED; `_run_dir` then refuses the resume."""
    run_dir = resolve(str(plain["resume"]), launch_dir()) if plain.get("resume") else None
    if run_dir is None or (run_dir / CHECKPOINT).exists() or not (run_dir / SAVED_CONFIG).is_file():
        return
    tracking = plain["tracking"]
    with hold_run_lock(run_dir, "memtrace optimize resume"):
        if tracking_available(tracking["uri"], tracking["timeout_s"]) is not None:
            return
        ended = end_runs_of_folder(MlflowTracker(tracking["uri"]), tracking["experiment"], run_dir)
    if ended:
        logger.warning("resume: %s has no %s (killed before its first iteration ended): MLflow run %s marked FAILED",
                       run_dir, CHECKPOINT, ", ".join(ended))


def _optimize(session: AppSession[OptimizeConfig]) -> dict[str, Any]:
    """Run the loop end to end; returns run id, paths and headline numbers (`resume=` of a finished run: a no-op)."""
    config, folder = session.config, session.folder
    # resume=: the checkpoint read and checked once (schema, config digest, iterations, the folder's run)
    checkpoint = read_checkpoint(folder.checkpoint, config_digest(session.source)) if config.resume else None
    if checkpoint is not None and checkpoint.finished is not None:
        return _already_finished(folder.root, checkpoint, checkpoint.finished, session.console)
    _require_store(session)
    parts = _build(session)
    if checkpoint is not None:  # before MLflow: its prompt sets and knob changes must be the system's own
        checkpoint.check_fits(parts.system)
    tracker = session.tracker()
    tracker.open_experiment(config.tracking.experiment)
    ended = end_stale_runs(tracker, config.tracking.experiment)  # left RUNNING by a dead process: lock free
    if ended:
        logger.warning("marked FAILED %d MLflow run(s) left RUNNING by a process that died: %s", len(ended),
                       ", ".join(ended))
    parent_id = _resumed_parent(tracker, checkpoint) if checkpoint is not None else None
    run_name = sweep_run_name("optimize", config.run_name, f"optimize-{parts.system.name}-{config.optimizer.name}")
    started = time.perf_counter()
    with _resume_note(folder), tracker.start_run(None if parent_id else run_name, run_id=parent_id) as run_id:
        tracker.set_tags(folder_tags(folder.root))  # first: a run killed from here on is found stale by its lock
        if checkpoint is None:
            _log_start(session, parts, tracker)
        observer = TrackingLoopObserver(
            tracker, parts.system.name, session.secrets, config.register_prompts, parts.system.non_default_knobs(),
            traces=session.failure_traces(), min_gain=config.loop.min_gain,
        )
        with RichProgress(session.console) as progress:
            loop = OptimizationLoop(
                parts.system, parts.judge, parts.optimizer, parts.splits,
                config.loop_settings(), checkpoint=folder.checkpoint, config_digest=config_digest(session.source),
                observers=[observer], progress=progress, run_id=run_id,
                attributor=parts.attributor, calls=session.ledger.calls, stop=session.services.stop,
            )
            result = loop.run(resume=checkpoint)
        if session.services.stop is not None:
            session.services.stop.check()  # interrupted during the final test evaluation: no export
        finished = _finish(session, parts, tracker, result, run_id, run_name, started)
        _print_summary(session, parts.system, finished, run_id)
        _end_with_failed_calls(session, finished)  # inside the MLflow run: it ends FAILED
    return {
        "run_id": run_id, "run_dir": str(folder.root), "exported": [str(p) for p in finished.paths],
        "test_start": result.test_start.report.overall.judge_accuracy,
        "test_final": result.test_final.report.overall.judge_accuracy,
        "result": result, "calls": session.ledger.calls, "improved": finished.improved,
    }


def _require_store(session: AppSession[OptimizeConfig]) -> None:
    """Every iteration is logged: fail before any LM work rather than lose it."""
    tracking = session.config.tracking
    unreachable = tracking_available(tracking.uri, tracking.timeout_s)
    if unreachable is not None:
        raise TrackingUnavailable(
            f"MLflow unreachable at {tracking.uri} ({unreachable}); the loop logs every iteration "
            "there: start it again when the store is back (nothing was run)"
        )


def _build(session: AppSession[OptimizeConfig]) -> _LoopParts:
    """Data first (an empty split fails before anything is built), then LMs (counting into the ledger),
    system, judge, optimizer and attributor, the endpoints checked before any work."""
    config, base_dir = session.config, session.base_dir
    session.configure_cache()
    splits = splits_of(config, base_dir)
    lms, system, judge = build_components(config, base_dir, session.services)
    check_endpoints(lms, embedder=build_embedder(config.embedder), stop=session.services.stop)  # before any work
    attributor = attributor_of(config, lms, system, judge)
    optimizer = build_optimizer(config, lms, system, attributor, session.folder.root / RunFolder.OPTIMIZER)
    if session.notice:
        logger.warning(session.notice)
    return _LoopParts(splits, lms, system, judge, optimizer, attributor)


def _resumed_parent(tracker: RedactingTracker, checkpoint: Checkpoint) -> str | None:
    """The MLflow run a resumed run continues, without the nested runs of iterations it redoes."""
    parent_id = checkpoint.run_id
    if parent_id:
        dropped = tracker.delete_children(parent_id, "memtrace.iteration", checkpoint.progress.iteration)
        if dropped:
            logger.info("resume: deleted %d nested run(s) of iterations the checkpoint did not record", len(dropped))
    return parent_id


@contextmanager
def _resume_note(folder: RunFolder) -> Iterator[None]:
    """An error leaving a checkpoint behind says how to resume."""
    try:
        yield
    except (Interrupted, KeyboardInterrupt) as error:
        error.add_note(f"the last checkpoint is kept; resume with: {resume_command(folder.root)}")
        raise
    except FinishedWithFailedCalls:  # the run finished: nothing to resume
        raise
    except Exception as error:  # e.g. MLflow went down mid-run: the finished iterations are checkpointed
        if folder.checkpoint.exists():
            error.add_note(f"the last checkpoint is kept; resume with: {resume_command(folder.root)}")
        raise


def _log_start(session: AppSession[OptimizeConfig], parts: _LoopParts, tracker: RedactingTracker) -> None:
    config, splits = session.config, parts.splits
    tracker.set_tags({
        "memtrace.command": "optimize", "memtrace.system": parts.system.name,
        "memtrace.dataset": splits.train.name, "memtrace.optimizer": config.optimizer.name,
        "memtrace.attributor": parts.attributor.name, "git_commit": git_commit(session.base_dir),
        **stand_in_tags(config), **process_tags(),
    })
    log_params(tracker, flatten(dict(session.source)), session.secrets)
    tracker.log_params({f"split.{name}_conversations": len(getattr(splits, name).conversations)
                        for name in ("train", "dev", "test")})
    source = dataset_source(session.config.dataset.node("kind"), session.base_dir)
    for context in ("train", "dev", "test"):
        tracker.log_dataset(dataset_input(getattr(splits, context), context, context, source))


def _finish(
    session: AppSession[OptimizeConfig], parts: _LoopParts, tracker: RedactingTracker, result: LoopResult,
    run_id: str, run_name: str, started: float,
) -> _Finished:
    """Export and log the best prompt set, program, plots, diagnosis and report; mark the checkpoint finished."""
    folder, system = session.folder, parts.system
    improved = result.final_prompts != result.start_prompts or bool(result.final_knobs)
    failed = FailedCalls.of(session.ledger.guard, result.calls)
    tracker.set_tags({"memtrace.improved": str(improved).lower(), **failed_call_tags(failed)})
    tracker.log_metrics(failed_call_metrics(failed))
    final_knobs = system.with_knobs(result.final_knobs).non_default_knobs()
    formats = spec_of(session.config.memory_system.name).prompt_formats
    mark = failed_calls_mark(failed, result)
    paths = export_best(result, system.name, run_id, folder.root, final_knobs, formats, mark)
    for path in paths:
        tracker.log_artifact(path, "export")
    tracker.log_artifact(export_program(result, system, folder.root), "program")
    for table in folder.optimizer_tables:  # e.g. GEPA's candidate pools
        tracker.log_artifact(table, f"optimizer/{table.parent.name}")
    plots = TrackingLoopObserver.plots(result, folder.root)
    diagnosed, diagnosis = loop_diagnosis(result, parts.lms.attributor)  # latest attributed train failures
    for path in write_diagnosis(folder.root, diagnosis, session.secrets):
        tracker.log_artifact(path)
    report = report_for_loop(  # the final test failures (lineage), scores per iteration, accepted rewrites
        result, folder.root, title=f"{run_name}: {system.name}",
        conversation_by_id={c.id: c for c in parts.splits.test.conversations},
        diagnosis=diagnosis, diagnosis_scope=f"Train failures of iteration {diagnosed}: ",
        meta={"system": system.name, "optimizer": session.config.optimizer.name, "attributor": parts.attributor.name},
        banner=session.notice,
    )
    tracker.log_artifact(report)
    elapsed = time.perf_counter() - started
    tracker.log_metrics({ELAPSED_S: elapsed, **retry_metrics(session.ledger.retry_tally())})
    mark_finished(folder.checkpoint, FinishedRun(
        result.test_start.report.overall.judge_accuracy, result.test_final.report.overall.judge_accuracy,
        tuple(str(p) for p in paths),
    ))  # a later resume= is then a no-op
    return _Finished(result, paths, plots, report, diagnosed, diagnosis, improved, elapsed, failed)


def failed_calls_mark(failed: FailedCalls, result: LoopResult) -> dict[str, float]:
    """The metrics an export of a run with finally failed LM calls carries (none for a clean run)."""
    if not failed:
        return {}
    touched = {split: float(result.impact_by_split.get(split, FailureImpact()).touched) for split in ("dev", "test")}
    return {"failed_lm_calls": float(failed.failed), "dev_verdicts_touched_by_failures": touched["dev"],
            "test_verdicts_touched_by_failures": touched["test"]}  # test: its start and final evaluations


def _impacts(result: LoopResult) -> dict[str, FailureImpact]:
    """What failed operations did, per scope the console names: train and dev (all evaluations), test."""
    empty = FailureImpact()
    return {"train (all evaluations)": result.impact_by_split.get("train", empty),
            "dev (all evaluations)": result.impact_by_split.get("dev", empty),
            "test/start": failure_impact(result.test_start), "test/final": failure_impact(result.test_final)}


def _print_failed_calls(session: AppSession[OptimizeConfig], done: _Finished) -> None:
    lines = failed_calls_lines(done.failed, _impacts(done.result), unit="verdicts")
    if lines:
        lines.append(f"The exported prompts were chosen and tested with failed LM calls: {done.paths[0].name} "
                     f"carries failed_lm_calls={done.failed.failed} in its metrics; MLflow tag memtrace.outcome")
    for line in lines:
        session.console.print(line, style="bold red", soft_wrap=True, markup=False)


def _end_with_failed_calls(session: AppSession[OptimizeConfig], done: _Finished) -> None:
    """Exit 3 and a FAILED MLflow run when LM calls finally failed, unless `allow_failed_calls` (docs/usage.md)."""
    test_final = impact_clause("test/final", failure_impact(done.result.test_final), "verdicts")
    error = failed_calls_outcome(done.failed, allowed=session.config.allow_failed_calls,
                                 impact=f"{test_final}; the export is marked (failed_lm_calls)")
    if error is not None:
        raise error
    if done.failed:
        logger.warning("accepted (allow_failed_calls=true): %s", done.failed.summary())


def _print_summary(session: AppSession[OptimizeConfig], system: MemorySystem, done: _Finished, run_id: str) -> None:
    console, result, settings = session.console, done.result, session.config.loop
    for table in loop_tables(result, system.name):
        console.print(table)
    console.print(diagnosis_panel(done.diagnosis, f"diagnosis: train failures of iteration {done.diagnosed}"))
    console.print(calls_table(result.calls, result.lm_calls_saved))
    console.print(reuse_line(result.calls))
    console.print(budget_line(result, settings.budget_calls, settings.budget_counts_cached) + f"; {done.elapsed:.1f} s")
    console.print(candidate_cost_line(result, settings.min_gain))
    console.print(f"MLflow run [bold]{run_id}[/] in {session.uri} "
                  f"(experiment {session.config.tracking.experiment!r})")
    if result.final_knobs:
        changed = ", ".join(f"{k} {system.knob_values()[k]} -> {v}" for k, v in sorted(result.final_knobs.items()))
        console.print(f"Knobs changed by accepted candidates: {changed}")
    if not done.improved:
        console.print("[bold yellow]No rewrite was accepted: the exported prompt set is the starting one "
                      "(nothing beat it on dev).[/]")
    console.print(f"Report: {done.report}")
    _print_failed_calls(session, done)
    paths = done.paths
    console.print(f"Exported prompts: {paths[0]} and {', '.join(p.name for p in paths[1:])}; "
                  f"plots: {', '.join(str(p) for p in done.plots)}")
    selection = {f"memory_system.{k}": v for k, v in system.selection_overrides().items()}
    load = command_line("memtrace", "run", memory_system=system.name, **selection, prompts=paths[0])  # as printed
    console.print(f"Load them with: {load}", soft_wrap=True, markup=False)
    if session.uri.startswith("sqlite:///"):
        mlflow_ui = command_line("mlflow", "ui", "--backend-store-uri", session.uri)
        console.print(f"Open MLflow with: {mlflow_ui}", soft_wrap=True, markup=False)
    if session.notice:
        logger.warning(session.notice)


def resume_command(run_dir: Path) -> str:
    """The command that continues the run of `run_dir`, runnable as printed."""
    return command_line("memtrace", "optimize", resume=run_dir)


@guarded  # refuses secret overrides before Hydra parses (and saves) them
@hydra.main(config_path="pkg://memtrace_loop.conf", config_name="optimize", version_base="1.3")
def main(cfg: DictConfig) -> float:
    setup_logging()
    outcome = run_app("optimize", lambda stop: optimize(cfg, stop=stop), lambda: secret_values(to_plain(cfg)))
    return float(outcome["test_final"])
