"""`memtrace optimize`: the Hydra app of the closed loop.

It builds the system, judge, optimizer and train/dev/test split from the config, runs
`pipeline.loop.OptimizationLoop` inside one MLflow parent run (one nested run per iteration), writes a
checkpoint after every iteration (`resume=<run dir>` continues an interrupted run with the config it
was started with), exports the best prompt set as JSON and YAML, and prints the summary tables.
An entry point: it configures DSPy's cache and prints; the work lives in `pipeline`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import hydra
from memtrace_loop.experiments.config import validated_optimize
from memtrace_loop.experiments.console import (
    RichProgress,
    budget_line,
    calls_table,
    diagnosis_panel,
    loop_tables,
    setup_logging,
)
from memtrace_loop.experiments.console_layout import app_console
from memtrace_loop.experiments.factory import (
    attributor_of,
    build_components,
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
from memtrace_loop.experiments.run_names import run_name as sweep_run_name
from memtrace_loop.experiments.secret_guard import guarded, protect
from memtrace_loop.experiments.sim_notice import stand_in_notice, stand_in_tags
from memtrace_loop.memory_systems.base import MemorySystem
from memtrace_loop.optimizers.gepa_program import save_program_state
from memtrace_loop.optimizers.registry import build_optimizer
from memtrace_loop.pipeline.backends.call_count import CallLedger
from memtrace_loop.pipeline.backends.embeddings import build_embedder
from memtrace_loop.pipeline.backends.failure_guard import FailureGuard
from memtrace_loop.pipeline.backends.lm import configure_cache
from memtrace_loop.pipeline.backends.local_server import LocalServers
from memtrace_loop.pipeline.backends.preflight import check_endpoints
from memtrace_loop.pipeline.backends.retry_ledger import RetryLedger
from memtrace_loop.pipeline.core.command_line import command_line
from memtrace_loop.pipeline.core.prompt_files import ExportedPrompts, write_prompts
from memtrace_loop.pipeline.core.redaction import redact_tree, restore_tree
from memtrace_loop.pipeline.core.stop import Interrupted, StopToken
from memtrace_loop.pipeline.loop.checkpoint import CheckpointError, mark_checkpoint_finished, read_checkpoint
from memtrace_loop.pipeline.loop.optimization import LoopResult, OptimizationLoop, Splits
from memtrace_loop.pipeline.report.run_report import report_for_loop
from memtrace_loop.pipeline.tracking.loop_observer import TrackingLoopObserver
from memtrace_loop.pipeline.tracking.metric_names import ELAPSED_S
from memtrace_loop.pipeline.tracking.mlflow_tracker import MlflowTracker
from memtrace_loop.pipeline.tracking.redacting_tracker import RedactingTracker
from memtrace_loop.pipeline.tracking.run_logging import (
    dataset_input,
    dataset_source,
    flatten,
    git_commit,
    log_params,
    process_tags,
    retry_metrics,
    scrub,
)
from memtrace_loop.pipeline.tracking.store_access import (
    TrackingUnavailable,
    configure_tracking_client,
    tracking_available,
)
from omegaconf import DictConfig
from rich.console import Console

logger = logging.getLogger("memtrace.optimize")

CHECKPOINT = "checkpoint.json"
SAVED_CONFIG = "config.json"
NOT_PART_OF_A_RUN = ("resume", "run_name", "workers")  # may differ when resuming


def config_digest(plain: dict[str, Any]) -> str:
    kept = {k: v for k, v in plain.items() if k not in NOT_PART_OF_A_RUN}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:16]


def _run_dir(plain: dict[str, Any], base_dir: Path) -> tuple[Path, dict[str, Any], bool]:
    """(run directory, the config to use, resuming?) — a resumed run uses the config it was started with
    (overrides given with `resume=` other than `workers` are ignored, with a warning naming them)."""
    if plain.get("resume"):
        run_dir = resolve(str(plain["resume"]), base_dir)
        saved = run_dir / SAVED_CONFIG
        if not (run_dir / CHECKPOINT).exists() or not saved.exists():
            raise CheckpointError(f"resume={plain['resume']}: no {CHECKPOINT} and {SAVED_CONFIG} in {run_dir}")
        # saved redacted: the real values (a key in api_base) come back from the config given now
        config = restore_tree(json.loads(saved.read_text(encoding="utf-8")), plain, secret_values(plain))
        ignored = ignored_overrides(plain, config)
        if ignored:
            logger.warning(
                "resume: ignoring %s (a resumed run keeps the config it was started with; only workers may change)",
                ", ".join(ignored),
            )
        config["workers"] = plain["workers"]
        return run_dir, config, True
    run_dir = app_output_dir("optimize", base_dir)
    saved = redact_tree(plain, secret_values(plain))  # no key in api_base reaches the disk
    (run_dir / SAVED_CONFIG).write_text(json.dumps(saved, indent=2), encoding="utf-8")
    return run_dir, plain, False


def ignored_overrides(given: Mapping[str, Any], saved: Mapping[str, Any]) -> list[str]:
    """The keys (never the values) whose value in `given` differs from the run's saved config."""
    now, then = flatten(dict(given)), flatten(dict(saved))
    return sorted(
        key for key in set(now) | set(then)
        if key.split(".")[0] not in NOT_PART_OF_A_RUN and now.get(key) != then.get(key)
    )


def check_resumable(run_dir: Path, plain: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint of `run_dir`, after checking it may be resumed with `plain` (the saved config):
    `CheckpointError` when it was written by another configuration. Nothing in MLflow is touched."""
    checkpoint = read_checkpoint(run_dir / CHECKPOINT)
    if checkpoint.get("config_digest") != config_digest(plain):
        raise CheckpointError(
            f"{run_dir / CHECKPOINT}: was written by a run with another configuration than {run_dir / SAVED_CONFIG}; "
            "start a new run instead"
        )
    return checkpoint


def _already_finished(run_dir: Path, checkpoint: Mapping[str, Any], console: Console) -> dict[str, Any]:
    finished = checkpoint["finished"]
    console.print(
        f"Run {run_dir} already finished (MLflow run {checkpoint.get('mlflow_run_id')}); nothing to resume. "
        f"Test judge accuracy {finished['test_start']:.3f} -> {finished['test_final']:.3f}; "
        f"exported prompts: {finished['exported'][0]}"
    )
    return {
        "run_id": checkpoint.get("mlflow_run_id"), "run_dir": str(run_dir), "exported": finished["exported"],
        "test_start": finished["test_start"], "test_final": finished["test_final"], "result": None,
        "calls": None, "already_finished": True,
    }


def export_best(
    result: LoopResult, system_name: str, run_id: str, run_dir: Path, knobs: Mapping[str, Any] | None = None
) -> list[Path]:
    """The final prompt set as best_prompts.json and .yaml (with the finite headline metrics and the
    system's knobs that differ from their defaults, accepted knob changes included)."""
    metrics = {
        "test_judge_accuracy": result.test_final.report.overall.judge_accuracy,
        "test_start_judge_accuracy": result.test_start.report.overall.judge_accuracy,
        "dev_judge_accuracy": result.dev_final.report.overall.judge_accuracy,
    }
    exported = ExportedPrompts.create(
        system_name, result.final_prompts, source_run=run_id,
        metrics={k: v for k, v in metrics.items() if math.isfinite(v)}, knobs=knobs,
    )
    return [write_prompts(exported, run_dir / name) for name in ("best_prompts.json", "best_prompts.yaml")]


def export_program(result: LoopResult, system: MemorySystem, run_dir: Path) -> Path:
    """The final prompt set as a DSPy program state (best_program.json; `MemoryProgram(system).load`)."""
    return save_program_state(system, result.final_prompts, run_dir / "best_program.json")


def optimize(cfg: DictConfig, console: Console | None = None, stop: StopToken | None = None) -> dict[str, Any]:
    """`_optimize` inside the run's local model servers (`lm=local`: started on demand, stopped on the way out)."""
    with local_models() as servers:
        return _optimize(cfg, console, stop, servers)


def _optimize(  # noqa: C901 - made thin by the app-session change (issue 21 item 4)
    cfg: DictConfig, console: Console | None, stop: StopToken | None, servers: LocalServers
) -> dict[str, Any]:
    """Run the loop end to end; returns run id, paths and the headline numbers. `resume=` of a finished
    run is a no-op that says so; an interruption (`stop`) leaves the last checkpoint and a KILLED run."""
    console = console or app_console()
    base_dir = launch_dir()
    given = to_plain(cfg)
    secrets = protect(given)  # first: Hydra's saved files scrubbed, logs and console masked
    run_dir, plain, resuming = _run_dir(given, base_dir)
    config = validated_optimize(plain)  # every key checked before anything is built (ConfigError naming the key)
    configure_tracking_client(config.tracking.timeout_s, config.tracking.max_retries)  # fail fast when MLflow is down
    secrets = (*secrets, *protect(plain))  # a resumed run's saved config may name other key variables
    checkpoint = check_resumable(run_dir, plain) if resuming else {}
    if checkpoint.get("finished"):
        return _already_finished(run_dir, checkpoint, console)
    unreachable = tracking_available(plain["tracking"]["uri"], config.tracking.timeout_s)
    if unreachable is not None:  # every iteration is logged: fail before any LM work rather than lose it
        raise TrackingUnavailable(
            f"MLflow unreachable at {plain['tracking']['uri']} ({unreachable}); the loop logs every iteration "
            "there: start it again when the store is back (nothing was run)"
        )
    configure_cache(base_dir / plain["cache_dir"])
    calls = CallLedger()  # every LM below counts its role's calls into it (GEPA's own calls included)
    parts = splits_of(plain, base_dir)  # data first; an empty split is an EmptySplitError naming splits.fractions
    retries, guard = RetryLedger(), FailureGuard(config.max_failed_share)
    lms, system, judge = build_components(plain, base_dir, calls, stop=stop, guard=guard, retries=retries,
                                           servers=servers)
    check_endpoints(lms, embedder=build_embedder(plain["embedder"]), stop=stop)  # before any work
    settings = config.loop_settings()
    attributor = attributor_of(plain, lms, system, judge)
    optimizer = build_optimizer(plain["optimizer"]["name"], lms.rewriter, plain["optimizer"], system=system,
                                attributor=attributor, work_dir=run_dir / "optimizer")
    notice = stand_in_notice(plain)  # the stand-in LM on a real dataset: said at the start, the end, tag, report
    if notice:
        logger.warning(notice)

    tracker = RedactingTracker(MlflowTracker(plain["tracking"]["uri"]), secrets)
    tracker.open_experiment(plain["tracking"]["experiment"])
    parent_id = checkpoint.get("mlflow_run_id") if resuming else None
    if parent_id:  # iterations started after the checkpoint (a kill mid-iteration) are redone: drop their runs
        dropped = tracker.delete_children(parent_id, "memtrace.iteration", int(checkpoint["iteration"]))
        if dropped:
            logger.info("resume: deleted %d nested run(s) of iterations the checkpoint did not record", len(dropped))
    run_name = sweep_run_name("optimize", config.run_name, f"optimize-{system.name}-{plain['optimizer']['name']}")
    started = time.perf_counter()
    try:
        with tracker.start_run(None if parent_id else run_name, run_id=parent_id) as run_id:
            if not resuming:
                tracker.set_tags(
                    {
                        "memtrace.command": "optimize",
                        "memtrace.system": system.name,
                        "memtrace.dataset": parts.train.name,
                        "memtrace.optimizer": plain["optimizer"]["name"],
                        "memtrace.attributor": attributor.name,
                        "git_commit": git_commit(base_dir),
                        **stand_in_tags(plain),
                        **process_tags(),
                    }
                )
                log_params(tracker, flatten(plain), secrets)
                tracker.log_params({"split.train_conversations": len(parts.train.conversations),
                                   "split.dev_conversations": len(parts.dev.conversations),
                                   "split.test_conversations": len(parts.test.conversations)})
                source = dataset_source(plain["dataset"], base_dir)
                for context, part in (("train", parts.train), ("dev", parts.dev), ("test", parts.test)):
                    tracker.log_dataset(dataset_input(part, context, context, source))
            observer = TrackingLoopObserver(tracker, system.name, secrets, config.register_prompts)
            with RichProgress(console) as progress:
                loop = OptimizationLoop(
                    system, judge, optimizer, Splits(parts.train, parts.dev, parts.test), settings,
                    checkpoint=run_dir / CHECKPOINT, config_digest=config_digest(plain), observers=[observer],
                    progress=progress, checkpoint_extra=lambda: {"mlflow_run_id": run_id},
                    attributor=attributor, calls=calls, stop=stop,
                )
                result = loop.run(resume=resuming)
            if stop is not None:
                stop.check()  # interrupted during the final test evaluation: no export
            improved = result.final_prompts != result.start_prompts or bool(result.final_knobs)
            tracker.set_tags({"memtrace.improved": str(improved).lower()})
            final_knobs = system.with_knobs(result.final_knobs).non_default_knobs()
            paths = export_best(result, system.name, run_id, run_dir, final_knobs)
            for path in paths:
                tracker.log_artifact(path, "export")
            tracker.log_artifact(export_program(result, system, run_dir), "program")
            for table in sorted((run_dir / "optimizer").glob("*/*.json")):  # e.g. GEPA's candidate pools
                tracker.log_artifact(table, f"optimizer/{table.parent.name}")
            plots = TrackingLoopObserver.plots(result, run_dir)
            diagnosed, diagnosis = loop_diagnosis(result, lms.attributor)  # latest attributed train failures
            for path in write_diagnosis(run_dir, diagnosis, secrets):
                tracker.log_artifact(path)
            report = report_for_loop(  # the final test failures (lineage), scores per iteration, accepted rewrites
                result, run_dir, title=f"{run_name}: {system.name}",
                conversation_by_id={c.id: c for c in parts.test.conversations},
                diagnosis=diagnosis, diagnosis_scope=f"Train failures of iteration {diagnosed}: ",
                meta={"system": system.name, "optimizer": plain["optimizer"]["name"], "attributor": attributor.name},
                banner=notice,
            )
            tracker.log_artifact(report)
            elapsed = time.perf_counter() - started
            tracker.log_metrics({ELAPSED_S: elapsed, **retry_metrics(retries.tally())})
            mark_finished(run_dir / CHECKPOINT, result, paths)
    except (Interrupted, KeyboardInterrupt) as error:
        error.add_note(f"the last checkpoint is kept; resume with: {resume_command(run_dir)}")
        raise
    except Exception as error:  # e.g. MLflow went down mid-run: the finished iterations are checkpointed
        if (run_dir / CHECKPOINT).exists():
            error.add_note(f"the last checkpoint is kept; resume with: {resume_command(run_dir)}")
        raise

    for shown in loop_tables(result, system.name):
        console.print(shown)
    console.print(diagnosis_panel(diagnosis, f"diagnosis: train failures of iteration {diagnosed}"))
    uri = scrub(plain["tracking"]["uri"], secrets)
    console.print(calls_table(result.calls, result.lm_calls_saved))
    console.print(budget_line(result, settings.budget_calls, settings.budget_counts_cached) + f"; {elapsed:.1f} s")
    console.print(f"MLflow run [bold]{run_id}[/] in {uri} (experiment {plain['tracking']['experiment']!r})")
    if result.final_knobs:
        changed = ", ".join(f"{k} {system.knob_values()[k]} -> {v}" for k, v in sorted(result.final_knobs.items()))
        console.print(f"Knobs changed by accepted candidates: {changed}")
    if not improved:
        console.print("[bold yellow]No rewrite was accepted: the exported prompt set is the starting one "
                      "(nothing beat it on dev).[/]")
    console.print(f"Report: {report}")
    console.print(f"Exported prompts: {paths[0]} and {paths[1].name}; plots: {', '.join(str(p) for p in plots)}")
    load = command_line("memtrace", "run", memory_system=system.name, prompts=paths[0])  # runs as printed
    console.print(f"Load them with: {load}", soft_wrap=True, markup=False)
    if uri.startswith("sqlite:///"):
        console.print(f"Open MLflow with: mlflow ui --backend-store-uri {uri}")
    if notice:
        logger.warning(notice)
    return {
        "run_id": run_id,
        "run_dir": str(run_dir),
        "exported": [str(p) for p in paths],
        "test_start": result.test_start.report.overall.judge_accuracy,
        "test_final": result.test_final.report.overall.judge_accuracy,
        "result": result,
        "calls": calls,
        "improved": improved,
    }


def resume_command(run_dir: Path) -> str:
    """The command that continues the run of `run_dir`, runnable as printed (a sweep job's folder holds `=`, `,`)."""
    return command_line("memtrace", "optimize", resume=run_dir)


def mark_finished(path: Path, result: LoopResult, exported: list[Path]) -> None:
    """Record in the checkpoint that the run finished (a later `resume=` is then a no-op)."""
    mark_checkpoint_finished(path, {
        "test_start": result.test_start.report.overall.judge_accuracy,
        "test_final": result.test_final.report.overall.judge_accuracy,
        "exported": [str(p) for p in exported],
    })


@guarded  # refuses secret overrides before Hydra parses (and saves) them
@hydra.main(config_path="pkg://memtrace_loop.conf", config_name="optimize", version_base="1.3")
def main(cfg: DictConfig) -> float:
    setup_logging()
    outcome = run_app("optimize", lambda stop: optimize(cfg, stop=stop), lambda: secret_values(to_plain(cfg)))
    return float(outcome["test_final"])

