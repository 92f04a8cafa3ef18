"""`memtrace stages`: every stage of a memory system with its current instruction or settings.

LLM stages are the system's DSPy predictors (their path is the stage's public name, used by blame,
prompt sets, MLflow and exports); non-LLM stages are listed with the knobs that tune them. With
`prompts=<file>` the listed instructions are the ones that file sets. An entry point.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import hydra
from memtrace_loop.experiments.config import validated_stages
from memtrace_loop.experiments.console import setup_logging
from memtrace_loop.experiments.console_layout import app_console
from memtrace_loop.experiments.factory import build_prompted_system, launch_dir, to_plain
from memtrace_loop.experiments.lifecycle import run_app
from memtrace_loop.experiments.secret_guard import guarded, protect
from memtrace_loop.memory_systems.base import MemorySystem
from omegaconf import DictConfig
from rich.console import Console
from rich.table import Table


def stage_rows(system: MemorySystem) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for name, predictor in system.named_predictors():
        signature = predictor.signature
        rows.append(
            {
                "stage": name,
                "llm": True,
                "construction": name in system.construction_stages,
                "signature": f"{', '.join(signature.input_fields)} -> {', '.join(signature.output_fields)}",
                "instruction": signature.instructions,
            }
        )
    for name, knobs in system.non_llm_stages().items():
        rows.append({"stage": name, "llm": False, "construction": None, "signature": "", "instruction": knobs})
    return rows


def stages(cfg: DictConfig, console: Console | None = None) -> list[dict[str, Any]]:
    config = validated_stages(to_plain(cfg))
    system = build_prompted_system(config.memory_system, config.embedder, config.prompts, launch_dir())
    rows = stage_rows(system)
    if config.format == "json":
        sys.stdout.write(json.dumps({"system": system.name, "stages": rows}, indent=2) + "\n")
        return rows
    console = console or app_console()
    table = Table(title=f"stages of {system.name}", show_lines=True)
    for column in ("stage", "kind", "signature", "instruction / settings"):
        table.add_column(column, overflow="fold")
    for row in rows:
        kind = ("LLM, construction" if row["construction"] else "LLM, answering") if row["llm"] else "non-LLM (knobs)"
        table.add_row(row["stage"], kind, row["signature"], row["instruction"])
    console.print(table)
    return rows


@guarded  # refuses secret overrides before Hydra parses (and saves) them
@hydra.main(config_path="pkg://memtrace_loop.conf", config_name="stages", version_base="1.3")
def main(cfg: DictConfig) -> None:
    setup_logging()
    protect(to_plain(cfg))  # Hydra's saved files scrubbed, logs and console masked
    run_app("stages", lambda _stop: stages(cfg))
