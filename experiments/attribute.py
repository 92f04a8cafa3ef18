"""`memtrace attribute`: attribute the failures of a finished run without rerunning it.

The source is `run_id=<MLflow run id>` (its artifacts downloaded), `run_dir=<folder memtrace run
saved>` or `graphs=<another tool's graph files>`. Dataset, system, embedder, excluded categories and
prompts come from the source run's config (`use_run_config`); attributor, LMs and tracking from this
command's. `attributor.verify=true` checks each verdict by a replay that restores memory from the graph.
Writes attributions.json and blame.json, prints the blame table and logs both to MLflow as a child run
of the source (`memtrace.command=attribute`, `memtrace.source_run_id`, `mlflow.parentRunId`).

It becomes the run's latest attribution: `attribution_record.json` says which (attributor, verify, when,
source), and the same record goes to the source as `latest_attribution.json` (into its folder, and as an
artifact of its MLflow run), which `memtrace report` and `memtrace graph convert` follow. It counts as
the report does: attributed of scored failures. The work lives in `pipeline.analysis.attribution`.
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import hydra
from memtrace_loop.experiments.app_setup import no_lm_history
from memtrace_loop.experiments.config import AttributeConfig, validated_attribute
from memtrace_loop.experiments.console import RichProgress, blame_table, setup_logging
from memtrace_loop.experiments.console_layout import app_console
from memtrace_loop.experiments.factory import (
    attributor_of,
    build_system,
    launch_dir,
    load_chosen_dataset,
    local_models,
    resolve,
    to_plain,
)
from memtrace_loop.experiments.lifecycle import run_app
from memtrace_loop.experiments.output_dirs import app_output_dir
from memtrace_loop.experiments.secret_guard import guarded, protect
from memtrace_loop.pipeline.analysis.attribution.protocol import TracedRun, attribute_run
from memtrace_loop.pipeline.analysis.attribution.records import Attribution, Check
from memtrace_loop.pipeline.analysis.blame import BlameTable, aggregate_blame
from memtrace_loop.pipeline.backends.registry import build_lm_set
from memtrace_loop.pipeline.core.command_line import command_line
from memtrace_loop.pipeline.core.config import ConfigError
from memtrace_loop.pipeline.core.run_folder import RunFolder
from memtrace_loop.pipeline.report.attribution_record import (
    ATTRIBUTE_COMMAND,
    AttributionRecord,
    FailureCount,
    now_utc,
    record_latest,
    write_record,
)
from memtrace_loop.pipeline.tracking import metric_names as names
from memtrace_loop.pipeline.tracking.redacting_tracker import RedactingTracker
from memtrace_loop.pipeline.tracking.run_logging import (
    SavedRun,
    attribution_columns,
    attribution_metrics,
    attribution_rows,
    download_saved_run,
    flatten,
    git_commit,
    log_params,
    read_saved_run,
    scrub,
)
from memtrace_loop.pipeline.tracking.run_record import RECORD_TAG, read_run_record
from memtrace_loop.pipeline.tracking.store_access import configure_tracking_client
from memtrace_loop.pipeline.tracking.tracker import Tracker
from omegaconf import DictConfig
from rich.console import Console

if TYPE_CHECKING:
    from memtrace_loop.pipeline.backends.local_server import LocalServers
    from memtrace_loop.pipeline.interop.foreign_graphs import ForeignGraph

logger = logging.getLogger("memtrace.attribute")

FROM_SOURCE = ("dataset", "memory_system", "embedder", "evaluation")  # taken from the source run's config
PARENT_TAG = "mlflow.parentRunId"  # the MLflow UI lists a run under the run this tag names


def merged_source(given: Mapping[str, Any], saved: SavedRun, use_run_config: bool) -> dict[str, Any]:
    """This command's composed config with the source run's dataset, system, embedder and evaluation nodes."""
    merged = dict(given)
    if use_run_config:
        merged.update({key: saved.config[key] for key in FROM_SOURCE if key in saved.config})
    return merged


def effective_config(
    given: Mapping[str, Any], saved: SavedRun, use_run_config: bool,
    validate: Callable[[Mapping[str, Any]], AttributeConfig] = validated_attribute,
) -> AttributeConfig:
    """`merged_source`, validated (`validated_report` for `memtrace report`)."""
    return validate(merged_source(given, saved, use_run_config))


def attribute_saved_run(
    saved: SavedRun, config: AttributeConfig, base_dir: Path, progress: RichProgress | None = None,
    servers: LocalServers | None = None,
) -> tuple[Attribution, ...]:
    """Attribute every failure of `saved` with the configured attributor (LMs, system and judge built
    only when one is needed: verification or the LLM attributor)."""
    needs_lm = config.attributor.settings.verify or config.attributor.name == "llm"
    lms = system = judge = None
    if needs_lm:  # the LM stack, imported here: a lineage attribution (`memtrace report`'s default) needs none
        from memtrace_loop.pipeline.analysis.judge import make_judge
        from memtrace_loop.pipeline.backends.lm import configure_cache
        from memtrace_loop.pipeline.backends.services import RunServices

        no_lm_history()  # DSPy is loaded here, after `setup_logging`
        configure_cache(base_dir / config.cache_dir, used=any(lm.cache for lm in config.lm.by_role().values()))
        lms = build_lm_set(config.lm, RunServices(servers=servers))
        system = build_system(config.memory_system, config.embedder)
        if saved.prompts is not None:
            system = system.with_prompts(saved.prompts)
        system.set_lm(lms.task)
        judge = make_judge(lms.judge)
    attributor = attributor_of(config, lms, system, judge)
    dataset = load_chosen_dataset(config.dataset, base_dir)
    run = TracedRun(
        saved.results, saved.graph_by_conversation, {c.id: c for c in dataset.conversations},
        config.evaluation.exclude_categories,
    )
    if progress is None:
        return attribute_run(attributor, run)
    progress.begin("attribute", len(run.failures()))
    return attribute_run(attributor, run, lambda _case: progress.advance("attribute"))


def attribute_graph_files(
    config: AttributeConfig, base_dir: Path, progress: RichProgress | None = None
) -> tuple[tuple[ForeignGraph, ...], tuple[Attribution, ...]]:
    """Attribute the failures of another tool's graph files (`config.graphs`); `verify` is refused."""
    if config.attributor.settings.verify:
        raise ConfigError("attributor.verify: replay re-runs a memory system of ours; graphs= from another "
                          "tool cannot be replayed (drop attributor.verify=true)")
    from memtrace_loop.pipeline.backends.services import RunServices
    from memtrace_loop.pipeline.interop.foreign_graphs import foreign_run, read_foreign_graphs, read_stage_map

    stage_map = read_stage_map(config.stage_map, base_dir)
    graphs = read_foreign_graphs(resolve(str(config.graphs), base_dir), stage_map)
    lms = None
    if config.attributor.name == "llm":
        no_lm_history()  # DSPy is loaded here, after `setup_logging`
        lms = build_lm_set(config.lm, RunServices())
    run = foreign_run(graphs)
    attributor = attributor_of(config, lms, None, None)
    if progress is None:
        return graphs, attribute_run(attributor, run)
    progress.begin("attribute", len(run.failures()))
    return graphs, attribute_run(attributor, run, lambda _case: progress.advance("attribute"))


@dataclass(frozen=True)
class Attributed:
    """What the source gave, attributed (`saved_folder`: the source run's files; None for graph files)."""

    config: AttributeConfig
    source: str
    count: FailureCount
    attributions: tuple[Attribution, ...]
    rows: list[dict[str, Any]]
    params: Mapping[str, Any]
    saved_folder: Path | None = None


def _attributed(config: AttributeConfig, given: Mapping[str, Any], tracker: RedactingTracker, out_dir: Path,
                base_dir: Path, console: Console) -> Attributed:
    """The attributions of the source `config` names (graph files, a logged run or a saved run)."""
    if config.graphs is not None:
        from memtrace_loop.pipeline.interop.foreign_graphs import blame_rows

        with RichProgress(console) as progress:
            graphs, attributions = attribute_graph_files(config, base_dir, progress)
        rows = [{**row, **named} for row, named in zip(attribution_rows(attributions),
                                                           blame_rows(attributions, graphs), strict=True)]
        failures = sum(1 for g in graphs for c in g.cases if not c.correct)
        return Attributed(config, str(config.graphs), FailureCount(len(attributions), failures), attributions,
                          rows, given)
    if config.run_id is not None:
        saved = download_saved_run(tracker, config.run_id, RunFolder(out_dir).source)
        saved_folder = RunFolder(out_dir).source.resolve()  # the download (`saved.source` names the run)
    else:
        saved = read_saved_run(resolve(str(config.run_dir), base_dir))
        saved_folder = Path(saved.source).resolve()
    config = effective_config(given, saved, config.use_run_config)
    with local_models() as servers, RichProgress(console) as progress:  # a `local` LM's server: stopped on the way out
        attributions = attribute_saved_run(saved, config, base_dir, progress, servers)
    source = f"run {config.run_id}" if config.run_id else str(config.run_dir)
    count = FailureCount.of(saved.results, config.evaluation.exclude_categories, attributions)
    return Attributed(config, source, count, attributions, attribution_rows(attributions),
                      merged_source(given, saved, config.use_run_config), saved_folder)


def source_run_id(tracker: Tracker, config: AttributeConfig, saved_folder: Path | None) -> str:
    """The source's MLflow run: `run_id=`, else the run of the saved folder's run record; "" for none."""
    if config.run_id is not None:
        return config.run_id
    if saved_folder is None:
        return ""
    try:
        saved = read_run_record(saved_folder)
    except (FileNotFoundError, ValueError):
        return ""  # a folder without a run record (saved by hand, or by an old version): no MLflow run known
    found = tracker.search_run_ids(saved.experiment, f"tags.`{RECORD_TAG}` = '{saved.record_id}'")
    return found[-1] if found else ""


def record_of(found: Attributed, out_dir: Path, source_run: str, mlflow_run_id: str = "") -> AttributionRecord:
    """The record of this attribution (`attribution_record.json`, and the source's latest)."""
    config = found.config
    return AttributionRecord(
        config.attributor.name, config.attributor.settings.verify, now_utc(), ATTRIBUTE_COMMAND,
        str(out_dir.resolve()), found.source, str(found.saved_folder or ""), source_run, mlflow_run_id,
    )


def link_source(tracker: Tracker, record: AttributionRecord, console: Console, saved_folder: Path | None) -> None:
    """Make `record` the latest attribution of the source run: in its folder (a `run_dir=`) and, when both
    are logged, as the source MLflow run's `latest_attribution.json` (what `report run_id=` follows)."""
    if saved_folder is not None:
        console.print(f"Recorded as the latest attribution of {record.source}: "
                      f"{record_latest(saved_folder, record)}")
    if not (record.source_run_id and record.mlflow_run_id):
        return
    with tempfile.TemporaryDirectory() as scratch:
        pointer = write_record(Path(scratch) / RunFolder.LATEST_ATTRIBUTION, record)
        tracker.log_artifact_to(record.source_run_id, pointer)
    console.print(f"Recorded as the latest attribution of MLflow run {record.source_run_id}")


def attribute(cfg: DictConfig | Mapping[str, Any], console: Console | None = None) -> dict[str, Any]:
    """Attribute, write and log; returns the paths, the attributions and the MLflow run id."""
    from memtrace_loop.pipeline.tracking.mlflow_tracker import MlflowTracker  # not for `memtrace report`

    console = console or app_console()
    base_dir = launch_dir()
    given = to_plain(cfg)
    secrets = protect(given)  # first: Hydra's saved files scrubbed, logs and console masked
    config = validated_attribute(given)  # every key checked first (ConfigError naming the key)
    configure_tracking_client(config.tracking.timeout_s, config.tracking.max_retries)
    out_dir = app_output_dir("attribute", base_dir)
    tracker = RedactingTracker(MlflowTracker(config.tracking.uri), secrets)

    started = time.perf_counter()
    found = _attributed(config, given, tracker, out_dir, base_dir, console)
    config, attributions, rows = found.config, found.attributions, found.rows
    elapsed = time.perf_counter() - started
    blame = aggregate_blame(attributions)
    attributions_path = out_dir / RunFolder.ATTRIBUTIONS
    blame_path = out_dir / RunFolder.BLAME
    attributions_path.write_text(scrub(json.dumps(rows, indent=1, ensure_ascii=False), secrets), encoding="utf-8")
    blame_path.write_text(json.dumps(blame.as_rows(), indent=2), encoding="utf-8")
    metrics = {**attribution_metrics(attributions), names.ELAPSED_S: elapsed}
    source_run = source_run_id(tracker, config, found.saved_folder) if config.log else ""
    record = record_of(found, out_dir, source_run)

    run_id = None
    if config.log:
        tracker.open_experiment(config.tracking.experiment)
        attributor_name = config.attributor.name + ("+replay" if config.attributor.settings.verify else "")
        with tracker.start_run(config.run_name or f"attribute-{attributor_name}") as run_id:
            tracker.set_tags(
                {
                    "memtrace.command": "attribute",
                    "memtrace.attributor": attributor_name,
                    "memtrace.source_run_id": source_run,
                    **({PARENT_TAG: source_run} if source_run else {}),
                    "memtrace.source_dir": "" if config.run_id else str(config.run_dir or config.graphs),
                    "memtrace.system": "" if config.graphs else config.memory_system.name,
                    "git_commit": git_commit(base_dir),
                }
            )
            log_params(tracker, flatten(found.params), secrets)
            tracker.log_metrics(metrics)
            tracker.log_artifact(attributions_path)
            tracker.log_artifact(blame_path)
            if attributions:
                tracker.log_table(attribution_columns(attributions, secrets), "attributions_table.json")
            record = record_of(found, out_dir, source_run, run_id)
            tracker.log_artifact(write_record(out_dir / RunFolder.ATTRIBUTION_RECORD, record))
    else:
        write_record(out_dir / RunFolder.ATTRIBUTION_RECORD, record)

    _print_outcome(found, blame, metrics, console)
    console.print(f"Wrote {attributions_path} and {blame_path.name} ({elapsed:.1f} s)")
    if run_id is not None:
        console.print(f"MLflow run [bold]{run_id}[/] in {scrub(config.tracking.uri, secrets)}")
    link_source(tracker, record, console, found.saved_folder if config.run_dir is not None else None)
    if config.graphs is None:
        console.print(f"See it in report.html with: {report_command(config, record)}")
    return {
        "run_id": run_id, "out_dir": str(out_dir), "attributions": attributions, "blame": blame,
        "attributions_path": str(attributions_path), "blame_path": str(blame_path), "count": found.count,
        "record": record,
    }


def report_command(config: AttributeConfig, record: AttributionRecord) -> str:
    """The `memtrace report` line that shows this attribution: of the source folder, else of this one."""
    return command_line("memtrace", "report", run_dir=str(config.run_dir or record.folder))


def _print_outcome(found: Attributed, blame: BlameTable, metrics: Mapping[str, float], console: Console) -> None:
    attributions = found.attributions
    console.print(blame_table(blame, f"blame per stage of {found.source}: {found.count.line()}"))
    for row in found.rows if found.config.graphs is not None else ():  # another tool's graphs: its op names, ids
        console.print(f"{row['question_id']}: {row['error_type']} at operation {row['operation']!r} "
                      f"({row['source_op_id'] or row['op']}), stage {row['stage']!r} in {row['file']}")
    checks = Counter(a.check for a in attributions)
    joint = sum(1 for a in attributions if len(a.joint) > 1)
    if set(checks) - {Check.UNCHECKED}:
        console.print(f"replay: {checks[Check.VERIFIED]} verified, {checks[Check.REFUTED]} refuted, "
                      f"{checks[Check.UNVERIFIABLE]} unverifiable, {joint} joint causes; "
                      f"{int(metrics[names.attribution('replay_calls')])} replayed calls")


@guarded  # refuses secret overrides before Hydra parses (and saves) them
@hydra.main(config_path="pkg://memtrace_loop.conf", config_name="attribute", version_base="1.3")
def main(cfg: DictConfig) -> None:
    setup_logging()
    run_app("attribute", lambda _stop: attribute(cfg))
