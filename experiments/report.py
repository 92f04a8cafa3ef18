"""`memtrace report`: write report.html for a finished run, without rerunning it.

The source is a run of `memtrace run`: `run_id=<MLflow run id>` (its cases.json, graphs/, config and,
when present, attributions.json artifacts are downloaded through the tracker) or `run_dir=<directory>`
(what `memtrace run` saved). The failures' attributions are read from the run's attributions.json
when it saved one; otherwise the configured attributor (lineage by default: no LM) attributes them,
as `memtrace attribute` does. Writes report.html into this command's output directory and, with
`log=true` and a `run_id`, logs it as an artifact of the source run (its status is left as it was).
An entry point: the page is `pipeline.report`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import hydra
from memtrace_loop.experiments.attribute import ATTRIBUTIONS_FILE, attribute_saved_run, effective_config
from memtrace_loop.experiments.config import validated_report
from memtrace_loop.experiments.console import setup_logging
from memtrace_loop.experiments.console_layout import app_console
from memtrace_loop.experiments.factory import launch_dir, resolve, to_plain
from memtrace_loop.experiments.lifecycle import run_app
from memtrace_loop.experiments.output_dirs import app_output_dir
from memtrace_loop.experiments.secret_guard import guarded, protect
from memtrace_loop.experiments.sim_notice import stand_in_notice
from memtrace_loop.pipeline.analysis.attribution.records import Attribution
from memtrace_loop.pipeline.core.run_folder import RunFolder
from memtrace_loop.pipeline.report.render import render_report
from memtrace_loop.pipeline.report.run_report import REPORT_FILE, report_data
from memtrace_loop.pipeline.report.saved_attributions import attributions_from_rows
from memtrace_loop.pipeline.tracking.mlflow_tracker import MlflowTracker
from memtrace_loop.pipeline.tracking.redacting_tracker import RedactingTracker
from memtrace_loop.pipeline.tracking.run_logging import scrub
from memtrace_loop.pipeline.tracking.saved_run import SavedRun, download_saved_run, read_saved_run
from memtrace_loop.pipeline.tracking.store_access import configure_tracking_client
from omegaconf import DictConfig
from rich.console import Console

logger = logging.getLogger("memtrace.report")



def saved_attributions(folder: Path, saved: SavedRun) -> tuple[Attribution, ...] | None:
    """The attributions the run saved next to its cases (None when it saved none)."""
    for candidate in (folder / ATTRIBUTIONS_FILE, folder / "artifacts" / ATTRIBUTIONS_FILE):
        if candidate.is_file():
            return attributions_from_rows(json.loads(candidate.read_text(encoding="utf-8")), saved.results)
    return None


def report(cfg: DictConfig | Mapping[str, Any], console: Console | None = None) -> dict[str, Any]:
    """Read the run, attribute when needed, write (and log) report.html; returns its path and counts."""
    console = console or app_console()
    base_dir = launch_dir()
    given = to_plain(cfg)
    secrets = protect(given)
    config = validated_report(given)
    configure_tracking_client(config.tracking.timeout_s, config.tracking.max_retries)
    out_dir = app_output_dir("report", base_dir)
    tracker = RedactingTracker(MlflowTracker(config.tracking.uri), secrets)
    if config.run_id is not None:
        folder = RunFolder(out_dir).source
        saved = download_saved_run(tracker, config.run_id, folder)
        if ATTRIBUTIONS_FILE in tracker.get_run(config.run_id).artifacts:
            tracker.download_artifact(config.run_id, ATTRIBUTIONS_FILE, folder)
    else:
        folder = resolve(str(config.run_dir), base_dir)
        saved = read_saved_run(folder)
    source_config = effective_config(given, saved, config.use_run_config, validated_report)

    started = time.perf_counter()
    attributions = saved_attributions(Path(saved.source) if config.run_id is None else folder, saved)
    attributed_here = attributions is None
    if attributions is None:
        attributions = attribute_saved_run(saved, source_config, base_dir)
    source = f"run {config.run_id}" if config.run_id else str(config.run_dir)
    meta = {"source": source, "system": source_config.memory_system.name, "dataset": source_config.dataset.name}
    data = report_data(
        config.title or f"MemTrace report: {source}", saved.results, saved.graph_by_conversation,
        attributions=attributions, exclude_categories=source_config.evaluation.exclude_categories,
        meta=meta, max_nodes=config.max_nodes, banner=stand_in_notice(source_config),
    )
    path = out_dir / REPORT_FILE
    path.write_text(scrub(render_report(data), secrets), encoding="utf-8")
    elapsed = time.perf_counter() - started

    logged = False
    if config.log and config.run_id is not None:
        tracker.log_artifact_to(config.run_id, path)  # its FINISHED/FAILED status stays as it was
        logged = True
    failures = len(data.failures())
    how = "attributed here" if attributed_here else "attributions saved by the run"
    console.print(f"Wrote {path}: {failures} failures, {len(attributions)} attributed ({how}), {elapsed:.1f} s")
    if logged:
        console.print(f"Logged {REPORT_FILE} to MLflow run [bold]{config.run_id}[/]")
    return {"path": str(path), "out_dir": str(out_dir), "failures": failures, "attributions": attributions,
            "logged": logged}


@guarded  # refuses secret overrides before Hydra parses (and saves) them
@hydra.main(config_path="pkg://memtrace_loop.conf", config_name="report", version_base="1.3")
def main(cfg: DictConfig) -> None:
    setup_logging()
    run_app("report", lambda _stop: report(cfg))
