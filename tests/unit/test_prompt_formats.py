"""The prompt-format seam (`pipeline.core.prompt_formats`, `MemorySystemSpec.prompt_formats`), over every
registered system: each format a system declares writes files that `prompts=` reads back into stages the
system has, applied to a copy whose other stages and knobs are untouched; a document of a format the
system does not declare is refused in one line."""

from __future__ import annotations

import dataclasses
import re

import pytest
from memtrace_loop.experiments.factory import with_prompt_file
from memtrace_loop.memory_systems.mem0ai.fragment import MEM0_CONFIG_FRAGMENT
from memtrace_loop.memory_systems.registry import SYSTEMS, build_memory_system, spec_of
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.core.prompt_files import ExportedPrompts, PromptFileError
from memtrace_loop.pipeline.core.prompt_formats import read_prompt_file, write_prompt_formats

DECLARED = [(name, f) for name in SYSTEMS.names for f in spec_of(name).prompt_formats]


def marked(text: str) -> str:
    return text + "\n- (rewritten)"


@pytest.mark.parametrize(("name", "prompt_format"), DECLARED, ids=[f"{n}:{f.format_id}" for n, f in DECLARED])
def test_each_declared_format_round_trips_its_stages_and_changes_nothing_else(tmp_path, name, prompt_format):
    system = build_memory_system({"name": name}, HashingEmbedder())
    start = system.prompt_set()
    rewritten = ExportedPrompts.create(name, type(start)({s: marked(t) for s, t in start.instruction_by_stage.items()}),
                                       knobs=system.knob_values())
    paths = write_prompt_formats(rewritten, (prompt_format,), tmp_path)
    assert paths and all(p.parent == tmp_path for p in paths)
    for path in paths:
        loaded = read_prompt_file(path, name, spec_of(name).prompt_formats)
        held = set(loaded.prompts.stages())
        assert held and held <= set(start.stages())
        assert all(loaded.prompts[s] == rewritten.prompts[s] for s in held)
        applied = with_prompt_file(system, path, tmp_path, spec_of(name).prompt_formats).prompt_set()
        assert applied == start.replace(**{s: marked(start[s]) for s in held})  # the others keep theirs


@pytest.mark.parametrize("name", SYSTEMS.names)
def test_a_format_the_system_does_not_declare_is_refused_in_one_line(tmp_path, name):
    path = tmp_path / "other.yaml"
    path.write_text("format: somebody-elses-format\nconfig: {a: b}\n")
    expected = f"prompt file {path}: key 'format': 'somebody-elses-format' is not a prompt format of memory system"
    with pytest.raises(PromptFileError, match=re.escape(expected)) as caught:
        read_prompt_file(path, name, spec_of(name).prompt_formats)
    assert "\n" not in str(caught.value)


def test_a_spec_declares_each_format_once():
    spec = spec_of(SYSTEMS.names[0])
    with pytest.raises(ValueError, match="declares a prompt format twice"):
        dataclasses.replace(spec, prompt_formats=(MEM0_CONFIG_FRAGMENT, MEM0_CONFIG_FRAGMENT))
