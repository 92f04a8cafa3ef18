"""`memtrace export`: write the best prompt set of an MLflow run as JSON or YAML.

An optimization run gives the prompt set it exported (`export/best_prompts.json`), a `memtrace run` the
one it used (`prompts.json` + its system tag). The file loads back with `prompts=<file>`; beside it go
`<name>.program.json` (the same as a DSPy program state, `optimizers.gepa_program`) and the files of the
system's own prompt formats (its spec's `prompt_formats`). Files are `pipeline.core.prompt_files`.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import hydra
from memtrace_loop.experiments.config import validated_export
from memtrace_loop.experiments.console import setup_logging
from memtrace_loop.experiments.console_layout import app_console
from memtrace_loop.experiments.factory import launch_dir, resolve, to_plain
from memtrace_loop.experiments.lifecycle import run_app
from memtrace_loop.experiments.secret_guard import guarded, protect
from memtrace_loop.memory_systems.registry import build_memory_system, spec_of
from memtrace_loop.optimizers.gepa_program import save_program_state
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.core.command_line import command_line
from memtrace_loop.pipeline.core.prompt_files import ExportedPrompts, read_prompts, write_prompts
from memtrace_loop.pipeline.core.prompt_formats import write_prompt_formats
from memtrace_loop.pipeline.core.records import PromptSet
from memtrace_loop.pipeline.tracking import metric_names as names
from memtrace_loop.pipeline.tracking.mlflow_tracker import MlflowTracker
from memtrace_loop.pipeline.tracking.store_access import configure_tracking_client
from memtrace_loop.pipeline.tracking.tracker import RunNotFoundError, TrackedRun, Tracker
from omegaconf import DictConfig
from rich.console import Console


class ExportError(ValueError):
    """The run cannot be exported (unknown run, no prompt set logged)."""


def run_quality(run: TrackedRun) -> dict[str, float]:
    """The judge accuracy, F1 and BLEU-1 a `memtrace run` logged (`eval/...`, or the flat names of runs
    logged before the `/` scheme), keyed by their short names as an exported file keeps them."""
    found: dict[str, float] = {}
    for metric in ("judge_accuracy", "f1", "bleu1"):
        for name in (names.quality(names.EVAL, metric), names.legacy_name(names.quality(names.EVAL, metric))):
            if name is not None and name in run.metrics:
                found[metric] = float(run.metrics[name])
                break
    return found


def exported_from_run(tracker: Tracker, run_id: str) -> ExportedPrompts:
    try:
        run = tracker.get_run(run_id)
    except RunNotFoundError as exc:
        raise ExportError(f"run {run_id!r} not found in the tracking store: {exc}") from exc
    names = set(run.artifacts)
    with tempfile.TemporaryDirectory(prefix="memtrace-export-") as tmp:
        if "export" in names:
            return read_prompts(tracker.download_artifact(run_id, "export/best_prompts.json", Path(tmp)))
        if "prompts.json" in names:
            prompts = json.loads(tracker.download_artifact(run_id, "prompts.json", Path(tmp)).read_text())
            system = run.tags.get("memtrace.system")
            if not system:
                raise ExportError(f"run {run_id!r} has no memtrace.system tag")
            metrics = run_quality(run)
            return ExportedPrompts.create(system, PromptSet(prompts), source_run=run_id, metrics=metrics)
    raise ExportError(f"run {run_id!r} logged no prompt set (neither export/best_prompts.json nor prompts.json)")


def export(cfg: DictConfig, console: Console | None = None) -> Path:
    console = console or app_console()
    base_dir = launch_dir()
    config = validated_export(to_plain(cfg))
    configure_tracking_client(config.tracking.timeout_s, config.tracking.max_retries)
    exported = exported_from_run(MlflowTracker(config.tracking.uri), config.run_id)
    path = write_prompts(exported, resolve(config.out, base_dir))
    console.print(f"wrote {len(exported.prompts)} stage prompts of {exported.system!r} to {path}")
    failed = exported.metrics.get("failed_lm_calls")
    if failed:  # optimize marks an export chosen and tested with failed LM calls (docs/usage.md, exit codes)
        console.print(f"note: run {config.run_id} had {failed:g} LM calls that finally failed; these prompts were "
                      "chosen and tested on measurements with failures (failed_lm_calls in the file's metrics)",
                      style="bold yellow", markup=False, soft_wrap=True)
    for extra in write_prompt_formats(exported, spec_of(exported.system).prompt_formats, path.parent):
        console.print(f"and in the system's own format to {extra}")
    program = save_program_state(  # the exported knobs too: load_program(path) rebuilds the exported system
        build_memory_system({"name": exported.system}, HashingEmbedder()).with_knobs(exported.knobs),
        exported.prompts, path.with_name(f"{path.stem}.program.json"),
    )
    console.print(f"and as a DSPy program state to {program} (load_program(path), docs/dspy.md)")
    load = command_line("memtrace", "run", memory_system=exported.system, prompts=path)  # runs as printed
    console.print(f"load them with: {load}", soft_wrap=True, markup=False)
    return path


@guarded  # refuses secret overrides before Hydra parses (and saves) them
@hydra.main(config_path="pkg://memtrace_loop.conf", config_name="export", version_base="1.3")
def main(cfg: DictConfig) -> None:
    setup_logging()
    protect(to_plain(cfg))  # Hydra's saved files scrubbed, logs and console masked
    run_app("export", lambda _stop: export(cfg))
