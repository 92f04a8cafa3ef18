"""`memtrace run`: the Hydra app that runs one memory system over one dataset split, traces every
operation, evaluates the answers and logs everything to MLflow, with a progress display and a summary.

This is an entry point: it is the only kind of module that configures DSPy globally (the cache) and
prints. The work itself lives in `pipeline.loop.runner` and `pipeline.tracking.run_logging`.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from memtrace_loop.experiments.config import validated_run
from memtrace_loop.experiments.console import RichProgress, calls_table, counts_line, report_table, setup_logging
from memtrace_loop.experiments.factory import (
    build_components,
    launch_dir,
    load_dataset,
    secret_values,
    select_split,
    to_plain,
)
from memtrace_loop.experiments.lifecycle import run_app
from memtrace_loop.pipeline.backends.call_count import CallLedger
from memtrace_loop.pipeline.backends.embeddings import build_embedder
from memtrace_loop.pipeline.backends.failure_guard import FailureGuard
from memtrace_loop.pipeline.backends.lm import configure_cache
from memtrace_loop.pipeline.backends.preflight import check_endpoints
from memtrace_loop.pipeline.backends.retry_ledger import RetryLedger
from memtrace_loop.pipeline.core.stop import StopToken
from memtrace_loop.pipeline.loop.runner import run_dataset
from memtrace_loop.pipeline.tracking.mlflow_tracker import MlflowTracker
from memtrace_loop.pipeline.tracking.run_logging import (
    ARTIFACTS_DIR,
    call_metrics,
    flatten,
    git_commit,
    log_params,
    log_run_result,
    save_run,
    scrub,
    token_metrics,
)
from omegaconf import DictConfig
from rich.console import Console

logger = logging.getLogger("memtrace.run")


def run(cfg: DictConfig, console: Console | None = None, stop: StopToken | None = None) -> dict[str, object]:
    """Run, evaluate and log; returns the MLflow run id and the overall judge accuracy. The MLflow run is
    opened before the work (FAILED if the work fails, KILLED when `stop` interrupts it) and the results
    are saved on disk before they are logged."""
    console = console or Console()
    plain = to_plain(cfg)
    config = validated_run(plain)  # every key checked before anything is built (ConfigError naming the key)
    secrets = secret_values(plain)
    base_dir = launch_dir()
    configure_cache(base_dir / plain["cache_dir"])

    calls = CallLedger()  # counts, per role, the calls the LMs really made and those DSPy's cache served
    retries, guard = RetryLedger(), FailureGuard(config.max_failed_share)
    lms, system, judge = build_components(plain, base_dir, calls, stop=stop, guard=guard, retries=retries)
    check_endpoints(lms, embedder=build_embedder(plain["embedder"]), stop=stop)  # before any work
    dataset = select_split(
        load_dataset(plain["dataset"], base_dir), plain["split"], plain["splits"]["fractions"],
        int(plain["splits"]["seed"]),
    )
    logger.info(
        "running %s on %s (%s split): %d conversations, %d questions",
        system.name, dataset.name, plain["split"], len(dataset.conversations), len(dataset.questions),
    )

    # saved beside Hydra's own files, so `memtrace attribute run_dir=<output dir>` can read them back
    run_dir = Path(HydraConfig.get().runtime.output_dir) / ARTIFACTS_DIR if HydraConfig.initialized() else None
    tracker = MlflowTracker(plain["tracking"]["uri"])
    tracker.open_experiment(plain["tracking"]["experiment"])
    run_name = config.run_name or f"run-{system.name}-{plain['dataset']['kind']}-{plain['split']}"
    with tracker.start_run(run_name) as run_id:
        tracker.set_tags(
            {
                "memtrace.command": "run",
                "memtrace.system": system.name,
                "memtrace.dataset": dataset.name,
                "memtrace.split": plain["split"],
                "git_commit": git_commit(base_dir),
            }
        )
        log_params(tracker, flatten(plain), secrets)
        started = time.perf_counter()
        with RichProgress(console) as progress:
            result = run_dataset(
                system, judge, dataset, workers=int(plain["workers"]), progress=progress,
                exclude_categories=tuple(plain["evaluation"]["exclude_categories"]), seed=int(plain["seed"]),
                stop=stop,
            )
        elapsed = time.perf_counter() - started
        saved = save_run(run_dir, result, system.prompt_set(), secrets, plain) if run_dir else None
        log_run_result(tracker, result, system.prompt_set(), secrets, plain, saved=saved)
        tally = calls.tally()
        tracker.log_metrics({"elapsed_s": elapsed, **call_metrics(tally, failed=True), **token_metrics(tally),
                             **retries.tally().metrics()})

    console.print(report_table(result.report, f"{system.name} on {dataset.name} ({plain['split']})"))
    console.print(calls_table(tally, title="LM calls by role (counted at the LM layer)"))
    console.print(counts_line(result.counts) + f", {elapsed:.1f} s")
    uri = scrub(plain["tracking"]["uri"], secrets)
    console.print(f"MLflow run [bold]{run_id}[/] in {uri} (experiment {plain['tracking']['experiment']!r})")
    if uri.startswith("sqlite:///"):
        console.print(f"Open it with: mlflow ui --backend-store-uri {uri}")
    if saved is not None:
        console.print(f"Saved cases and graphs in {saved}; attribute them with: "
                      f"memtrace attribute run_dir={saved.parent}")
    return {"run_id": run_id, "judge_accuracy": result.report.overall.judge_accuracy,
            "run_dir": str(saved.parent) if saved else None}


@hydra.main(config_path="pkg://memtrace_loop.conf", config_name="run", version_base="1.3")
def main(cfg: DictConfig) -> float:
    setup_logging()
    outcome = run_app("run", lambda stop: run(cfg, stop=stop), lambda: secret_values(to_plain(cfg)))
    accuracy = outcome["judge_accuracy"]
    return float(accuracy) if isinstance(accuracy, int | float) else math.nan
