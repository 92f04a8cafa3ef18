"""`memtrace stages`: every stage of every memory system, with its current instruction."""

from __future__ import annotations

import json

import pytest
from hydra import compose, initialize_config_module
from memtrace_loop.experiments.stages import stages
from memtrace_loop.memory_systems.registry import SYSTEMS, build_memory_system
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.core.prompt_files import ExportedPrompts, write_prompts


def listed(*overrides: str):
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        cfg = compose("stages", overrides=list(overrides))
    return stages(cfg)


@pytest.mark.parametrize("name", list(SYSTEMS))
def test_every_stage_of_every_system_is_listed_with_its_instruction(name, capsys):
    system = build_memory_system({"name": name}, HashingEmbedder())
    rows = listed(f"memory_system={name}", "format=json")
    printed = json.loads(capsys.readouterr().out)
    assert printed["system"] == name
    llm_rows = {r["stage"]: r["instruction"] for r in rows if r["llm"]}
    assert llm_rows == dict(system.prompt_set().instruction_by_stage)
    assert "respond" in llm_rows
    assert all(r["instruction"] for r in rows)


def test_stages_show_the_instructions_a_prompt_file_sets(tmp_path):
    path = write_prompts(
        ExportedPrompts.create("mem0", build_memory_system({"name": "mem0"}, HashingEmbedder()).prompt_set()
                               .replace(respond="Answer briefly and give dates.")),
        tmp_path / "p.yaml",
    )
    rows = listed(f"prompts={path}")
    assert {r["stage"]: r["instruction"] for r in rows}["respond"] == "Answer briefly and give dates."
