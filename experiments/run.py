"""`memtrace run`: the Hydra app that runs one memory system over one dataset split, traces every
operation, evaluates the answers and logs everything to MLflow, with a progress display and a summary.

This is an entry point: it is the only kind of module that configures DSPy globally (the cache) and
prints. The work itself lives in `pipeline.loop.runner` and `pipeline.tracking.run_logging`.
"""

from __future__ import annotations

import logging
import math
import time
from contextlib import nullcontext

import hydra
from memtrace_loop.experiments.config import validated_run
from memtrace_loop.experiments.console import (
    RichProgress,
    blame_table,
    calls_table,
    counts_line,
    diagnosis_panel,
    report_table,
    setup_logging,
)
from memtrace_loop.experiments.console_layout import app_console
from memtrace_loop.experiments.factory import (
    attributor_of,
    build_components,
    launch_dir,
    load_dataset,
    local_models,
    secret_values,
    select_split,
    to_plain,
)
from memtrace_loop.experiments.failure_analysis import analyse_failures
from memtrace_loop.experiments.lifecycle import run_app
from memtrace_loop.experiments.output_dirs import app_output_dir
from memtrace_loop.experiments.run_names import run_name as sweep_run_name
from memtrace_loop.experiments.secret_guard import guarded, protect
from memtrace_loop.experiments.sim_notice import stand_in_notice, stand_in_tags
from memtrace_loop.pipeline.backends.call_count import CallLedger
from memtrace_loop.pipeline.backends.embeddings import build_embedder
from memtrace_loop.pipeline.backends.failure_guard import FailureGuard
from memtrace_loop.pipeline.backends.lm import configure_cache
from memtrace_loop.pipeline.backends.local_server import LocalServers
from memtrace_loop.pipeline.backends.preflight import check_endpoints
from memtrace_loop.pipeline.backends.retry_ledger import RetryLedger
from memtrace_loop.pipeline.core.command_line import command_line
from memtrace_loop.pipeline.core.stop import StopToken
from memtrace_loop.pipeline.loop.runner import run_dataset
from memtrace_loop.pipeline.report.run_report import report_for_run
from memtrace_loop.pipeline.tracking.metric_names import ELAPSED_S
from memtrace_loop.pipeline.tracking.mlflow_tracker import MlflowTracker
from memtrace_loop.pipeline.tracking.redacting_tracker import RedactingTracker
from memtrace_loop.pipeline.tracking.run_logging import (
    ARTIFACTS_DIR,
    RESULTS_TABLE,
    call_metrics,
    dataset_input,
    dataset_source,
    flatten,
    git_commit,
    params_for_logging,
    process_tags,
    result_columns,
    retry_metrics,
    run_metrics,
    save_run,
    scrub,
    token_metrics,
)
from memtrace_loop.pipeline.tracking.run_record import (
    RECORD_TAG,
    NotLoggedError,
    RunRecord,
    log_record,
    new_record_id,
    unreachable_message,
    write_run_record,
)
from memtrace_loop.pipeline.tracking.store_access import configure_tracking_client, failure_cause, tracking_available
from memtrace_loop.pipeline.tracking.traces import configure_trace_export, log_question_traces
from omegaconf import DictConfig
from rich.console import Console

logger = logging.getLogger("memtrace.run")


def run(cfg: DictConfig, console: Console | None = None, stop: StopToken | None = None) -> dict[str, object]:
    """`_run` inside the run's local model servers (`lm=local`: started on demand, stopped on the way out)."""
    with local_models() as servers:
        return _run(cfg, console, stop, servers)


def _run(
    cfg: DictConfig, console: Console | None, stop: StopToken | None, servers: LocalServers
) -> dict[str, object]:
    """Run, evaluate and log; returns the MLflow run id and the overall judge accuracy. The MLflow run is
    opened before the work (FAILED if the work fails, KILLED when `stop` interrupts it) and the results
    are saved on disk before they are logged."""
    console = console or app_console()
    plain = to_plain(cfg)
    secrets = protect(plain)  # first: Hydra's saved files scrubbed, logs and console masked
    config = validated_run(plain)  # every key checked before anything is built (ConfigError naming the key)
    configure_tracking_client(config.tracking.timeout_s, config.tracking.max_retries)  # fail fast when MLflow is down
    configure_trace_export()  # before the store is opened: MLflow reads it at its first span
    base_dir = launch_dir()
    configure_cache(base_dir / plain["cache_dir"])

    calls = CallLedger()  # counts, per role, the calls the LMs really made and those DSPy's cache served
    dataset = select_split(  # data first: an empty file or split fails before anything is built
        load_dataset(plain["dataset"], base_dir), plain["split"], plain["splits"]["fractions"],
        int(plain["splits"]["seed"]),
    )
    retries, guard = RetryLedger(), FailureGuard(config.max_failed_share)
    lms, system, judge = build_components(plain, base_dir, calls, stop=stop, guard=guard, retries=retries,
                                           servers=servers)
    check_endpoints(lms, embedder=build_embedder(plain["embedder"]), stop=stop)  # before any work
    attributor = attributor_of(plain, lms, system, judge)  # its LM calls count under the attributor role
    logger.info(
        "running %s on %s (%s split): %d conversations, %d questions",
        system.name, dataset.name, plain["split"], len(dataset.conversations), len(dataset.questions),
    )
    notice = stand_in_notice(plain)  # the stand-in LM on a real dataset: said at the start, the end, tag, report
    if notice:
        logger.warning(notice)

    # saved beside Hydra's own files, so `memtrace attribute run_dir=<output dir>` can read them back
    out_dir = app_output_dir("run", base_dir)
    run_dir = out_dir / ARTIFACTS_DIR
    run_name = sweep_run_name("run", config.run_name, f"run-{system.name}-{plain['dataset']['kind']}-{plain['split']}")
    record_id = new_record_id()
    tags = {"memtrace.command": "run", "memtrace.system": system.name, "memtrace.dataset": dataset.name,
            "memtrace.split": plain["split"], "git_commit": git_commit(base_dir), RECORD_TAG: record_id,
            "memtrace.attributor": attributor.name, **stand_in_tags(plain),
            **process_tags()}
    params = params_for_logging(flatten(plain), secrets)
    source = scrub(dataset_source(plain["dataset"], base_dir), secrets)
    data_input = dataset_input(dataset, "eval", plain["split"], source)  # logged live and kept in the record
    # the MLflow run is opened before the work (FAILED / KILLED if the work fails or is interrupted); when the
    # store is unreachable the work goes on and its results wait on disk for `memtrace upload`
    store = MlflowTracker(plain["tracking"]["uri"])
    tracker: RedactingTracker | None = RedactingTracker(store, secrets)
    unreachable = tracking_available(plain["tracking"]["uri"], config.tracking.timeout_s)
    if unreachable is None:
        try:
            store.open_experiment(plain["tracking"]["experiment"])
        except Exception as exc:
            unreachable = failure_cause(exc)
    if unreachable is not None:
        logger.warning("MLflow unreachable (%s): running without it; the results will be saved in %s",
                       scrub(unreachable, secrets), out_dir)
        tracker = None
    with tracker.start_run(run_name) if tracker else nullcontext(None) as run_id:
        if tracker is not None:
            tracker.set_tags(tags)
            tracker.log_params(params)
            tracker.log_dataset(data_input)  # again with the record (MLflow keeps one input per dataset)
        started = time.perf_counter()
        with RichProgress(console) as progress:
            result = run_dataset(
                system, judge, dataset, workers=int(plain["workers"]), progress=progress,
                exclude_categories=tuple(plain["evaluation"]["exclude_categories"]), seed=int(plain["seed"]),
                stop=stop,
            )
            failures = analyse_failures(result, dataset, attributor, lms.attributor,  # why the failures failed
                                        plain["evaluation"]["exclude_categories"], progress, stop)
        elapsed = time.perf_counter() - started

        # written locally first (artifacts/ and run_record.json: everything MLflow gets), so an MLflow outage
        # costs only the upload (`memtrace upload run_dir=<output dir>`)
        tally = calls.tally()
        saved = save_run(run_dir, result, system.prompt_set(), secrets, plain)
        failures.write(saved, secrets)  # attributions.json, blame.json, diagnosis.json, diagnosis.md
        report = report_for_run(  # report.html beside them: logged with the artifacts
            result, saved, title=f"{run_name}: {system.name} on {dataset.name} ({plain['split']})",
            attributions=failures.attributions, conversation_by_id={c.id: c for c in dataset.conversations},
            diagnosis=failures.diagnosis,
            meta={"system": system.name, "dataset": dataset.name, "split": plain["split"],
                  "attributor": attributor.name},
            banner=notice,
        )
        columns = result_columns(result, secrets)
        record = RunRecord(
            plain["tracking"]["experiment"], run_name, tags=tags, params=params,
            metrics={**run_metrics(result), ELAPSED_S: elapsed, **call_metrics(tally, failed=True),
                     **token_metrics(tally), **retry_metrics(retries.tally()), **failures.metrics()},
            tables={**({RESULTS_TABLE: columns} if columns else {}), **failures.tables(secrets)}, record_id=record_id,
            datasets=(data_input,),
        )
        write_run_record(out_dir, record)
        console.print(report_table(result.report, f"{system.name} on {dataset.name} ({plain['split']})"))
        if failures.attributions:
            console.print(blame_table(failures.blame, f"blame per stage ({attributor.name}): "
                                      f"{len(failures.attributions)} of {failures.failures} failures"))
        console.print(diagnosis_panel(failures.diagnosis))
        if tracker is None:
            cause = f"{plain['tracking']['uri']}: {unreachable}"
            raise NotLoggedError(scrub(unreachable_message(out_dir, cause), secrets))
        try:
            log_record(tracker, record, saved)
        except Exception as exc:  # the results are on disk: say how to log them later
            raise NotLoggedError(scrub(unreachable_message(out_dir, exc), secrets)) from exc
        if config.tracking.traces and config.tracking.max_traces:  # never raises: a failure only warns
            assert run_id is not None  # the tracker is up (refused above when it is not): its run is open
            traced = log_question_traces(result, failures.attributions, run_id=run_id,
                                         cap=config.tracking.max_traces, secrets=secrets, stop=stop)
            logger.info("logged %d question traces (with their blame) to MLflow run %s", traced, run_id)

    console.print(calls_table(tally, title="LM calls by role (counted at the LM layer)"))
    console.print(counts_line(result.counts) + f", {elapsed:.1f} s")
    uri = scrub(plain["tracking"]["uri"], secrets)
    console.print(f"MLflow run [bold]{run_id}[/] in {uri} (experiment {plain['tracking']['experiment']!r})")
    if uri.startswith("sqlite:///"):
        console.print(f"Open it with: mlflow ui --backend-store-uri {uri}")
    console.print(f"Report: {report} (open it in a browser; also in the MLflow run's artifacts)")
    console.print(f"Saved cases and graphs in {saved}; attribute them with: "
                  f"{command_line('memtrace', 'attribute', run_dir=out_dir)}", soft_wrap=True, markup=False)
    if notice:
        logger.warning(notice)
    return {"run_id": run_id, "judge_accuracy": result.report.overall.judge_accuracy, "run_dir": str(out_dir)}


@guarded  # refuses secret overrides before Hydra parses (and saves) them
@hydra.main(config_path="pkg://memtrace_loop.conf", config_name="run", version_base="1.3")
def main(cfg: DictConfig) -> float:
    setup_logging()
    outcome = run_app("run", lambda stop: run(cfg, stop=stop), lambda: secret_values(to_plain(cfg)))
    accuracy = outcome["judge_accuracy"]
    return float(accuracy) if isinstance(accuracy, int | float) else math.nan
