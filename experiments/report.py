"""`memtrace report`: write report.html for a finished run, without rerunning it.

The source is `run_id=<MLflow run id>` (its artifacts downloaded) or `run_dir=<folder>` (what `memtrace
run` saved, or a `memtrace attribute` output folder: that attribution of its source run). The page shows
the run's latest attribution (`pipeline.report.attribution_record`: the last `memtrace attribute`, else
the run's own attributions); with none, the configured attributor (lineage by default: no LM) makes them
here. Header and console say which attribution it is and count it as `memtrace attribute` does. With
`log=true` and a `run_id` the page is logged to the source run (its status left as it was). A saved run
is read from its folder alone: no MLflow client, no LM stack. The page itself is `pipeline.report`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import hydra
from memtrace_loop.experiments.attribute import attribute_saved_run, effective_config
from memtrace_loop.experiments.config import ReportConfig, stand_in_notice, validated_report
from memtrace_loop.experiments.console import setup_logging
from memtrace_loop.experiments.console_layout import app_console
from memtrace_loop.experiments.factory import launch_dir, resolve, to_plain
from memtrace_loop.experiments.lifecycle import run_app
from memtrace_loop.experiments.output_dirs import app_output_dir
from memtrace_loop.experiments.secret_guard import guarded, protect
from memtrace_loop.pipeline.core.run_folder import RunFolder
from memtrace_loop.pipeline.data.reader import DataError
from memtrace_loop.pipeline.report.attribution_record import (
    AttributionRecord,
    ChosenAttributions,
    FailureCount,
    checks_line,
    latest_attributions,
    now_utc,
    read_record,
    write_record,
)
from memtrace_loop.pipeline.report.render import render_report
from memtrace_loop.pipeline.report.run_report import REPORT_FILE, report_data
from memtrace_loop.pipeline.tracking.redacting_tracker import RedactingTracker
from memtrace_loop.pipeline.tracking.run_logging import SavedRun, download_saved_run, read_saved_run, scrub
from memtrace_loop.pipeline.tracking.store_access import configure_tracking_client
from memtrace_loop.pipeline.tracking.tracker import RunNotFoundError, Tracker
from omegaconf import DictConfig
from rich.console import Console

logger = logging.getLogger("memtrace.report")


def downloaded_latest(tracker: Tracker, run_id: str, folder: Path) -> None:
    """The logged run's latest attribution (`latest_attribution.json` and its attribute run's files)
    brought into `folder`; a warning when that attribute run is gone."""
    if RunFolder.LATEST_ATTRIBUTION not in tracker.get_run(run_id).artifacts:
        return
    pointer = tracker.download_artifact(run_id, RunFolder.LATEST_ATTRIBUTION, folder)
    record = read_record(pointer)
    target = folder / "latest" / record.mlflow_run_id
    try:
        held = tracker.get_run(record.mlflow_run_id).artifacts
    except RunNotFoundError:
        held = ()
    if RunFolder.ATTRIBUTIONS not in held:
        logger.warning("run %s: its latest attribution, MLflow run %r, is gone or holds no %s; showing the run's "
                       "own attributions", run_id, record.mlflow_run_id, RunFolder.ATTRIBUTIONS)
        pointer.unlink()
        return
    target.mkdir(parents=True, exist_ok=True)
    for name in (RunFolder.ATTRIBUTIONS, RunFolder.BLAME):
        if name in held:
            tracker.download_artifact(record.mlflow_run_id, name, target)
    write_record(pointer, replace(record, folder=str(target)))


def attribution_folder(folder: Path) -> tuple[SavedRun, ChosenAttributions] | None:
    """The source run and the attribution of a `memtrace attribute` output directory (None for any other)."""
    path = folder / RunFolder.ATTRIBUTION_RECORD
    if not path.is_file():
        return None
    record = read_record(path)
    if not record.source_dir:
        raise DataError(str(folder), "attributes another tool's graph files; a report needs a run of ours "
                                     "(run_id= or run_dir=)")
    saved = read_saved_run(record.source_dir)
    return saved, ChosenAttributions.read(record, folder, saved.results) or ChosenAttributions(record, ())


def source_of(config: ReportConfig, tracker: Tracker | None, out_dir: Path, base_dir: Path
              ) -> tuple[SavedRun, ChosenAttributions | None]:
    """The run to report and the attribution to show (None: none made yet); `tracker` for a `run_id`."""
    if tracker is not None and config.run_id is not None:
        folder = RunFolder(out_dir).source
        saved = download_saved_run(tracker, config.run_id, folder)
        logged = tracker.get_run(config.run_id).artifacts
        for name in (RunFolder.ATTRIBUTIONS, RunFolder.BLAME):
            if name in logged:
                tracker.download_artifact(config.run_id, name, folder)
        downloaded_latest(tracker, config.run_id, folder)
        return saved, latest_attributions(folder, saved.results, saved.config)
    folder = resolve(str(config.run_dir), base_dir)
    of_attribute = attribution_folder(folder)
    if of_attribute is not None:
        return of_attribute
    saved = read_saved_run(folder)
    return saved, latest_attributions(Path(saved.source), saved.results, saved.config)


def report(cfg: DictConfig | Mapping[str, Any], console: Console | None = None) -> dict[str, Any]:
    """Write (and log) report.html; returns its path, counts and the record of the attribution shown."""
    console = console or app_console()
    base_dir = launch_dir()
    given = to_plain(cfg)
    secrets = protect(given)
    config = validated_report(given)
    configure_tracking_client(config.tracking.timeout_s, config.tracking.max_retries)
    out_dir = app_output_dir("report", base_dir)
    tracker = None  # MLflow, only for a logged run: a saved one is read from its folder
    if config.run_id is not None:
        from memtrace_loop.pipeline.tracking.mlflow_tracker import MlflowTracker

        tracker = RedactingTracker(MlflowTracker(config.tracking.uri), secrets)
    saved, chosen = source_of(config, tracker, out_dir, base_dir)
    source_config = effective_config(given, saved, config.use_run_config, validated_report)

    started = time.perf_counter()
    if chosen is None:
        settings = source_config.attributor
        record = AttributionRecord(settings.name, settings.settings.verify, now_utc(), "memtrace report", "")
        chosen = ChosenAttributions(record, attribute_saved_run(saved, source_config, base_dir))
    attributions = chosen.attributions
    count = FailureCount.of(saved.results, source_config.evaluation.exclude_categories, attributions)
    source = f"run {config.run_id}" if config.run_id else str(config.run_dir)
    meta = {"source": source, "system": source_config.memory_system.name, "dataset": source_config.dataset.name,
            "attribution": chosen.record.label(), "attributed": count.line(), "replay": checks_line(attributions)}
    data = report_data(
        config.title or f"MemTrace report: {source}", saved.results, saved.graph_by_conversation,
        attributions=attributions, exclude_categories=source_config.evaluation.exclude_categories,
        blame=chosen.blame, meta=meta, max_nodes=config.max_nodes, banner=stand_in_notice(source_config),
    )
    path = out_dir / REPORT_FILE
    path.write_text(scrub(render_report(data), secrets), encoding="utf-8")
    elapsed = time.perf_counter() - started

    logged = False
    if config.log and tracker is not None and config.run_id is not None:
        tracker.log_artifact_to(config.run_id, path)  # its FINISHED/FAILED status stays as it was
        logged = True
    console.print(f"Wrote {path}: {count.line()}, {elapsed:.1f} s")
    console.print(f"Attribution shown: {chosen.record.label()}; replay: {checks_line(attributions)}")
    if logged:
        console.print(f"Logged {REPORT_FILE} to MLflow run [bold]{config.run_id}[/]")
    return {"path": str(path), "out_dir": str(out_dir), "failures": len(data.failures()), "attributions": attributions,
            "logged": logged, "count": count, "record": chosen.record}


@guarded  # refuses secret overrides before Hydra parses (and saves) them
@hydra.main(config_path="pkg://memtrace_loop.conf", config_name="report", version_base="1.3")
def main(cfg: DictConfig) -> None:
    setup_logging()
    run_app("report", lambda _stop: report(cfg))
