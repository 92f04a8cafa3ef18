"""Every registered memory system's `SPEC` agrees with the system it builds (the contract is one place)."""

from __future__ import annotations

import pytest
from memtrace_loop.memory_systems.registry import SYSTEMS, UnknownSystemError, build_memory_system, spec_of
from memtrace_loop.memory_systems.spec import FaultKind, MemorySystemSpec
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder


@pytest.mark.parametrize("name", SYSTEMS.names)
def test_the_spec_describes_the_system_it_builds(name):
    spec = spec_of(name)
    assert isinstance(spec, MemorySystemSpec) and spec.name == name
    system = build_memory_system({"name": name}, HashingEmbedder())
    assert isinstance(system.knobs, spec.knobs) and system.stages == spec.stages
    assert set(system.stage_names()) == {s.name for s in spec.stages if s.llm}
    assert set(system.non_llm_stages()) <= {s.name for s in spec.stages if not s.llm}
    assert set(spec.generous_knobs) <= set(system.knob_values())
    assert FaultKind.RESPONSE_WRONG in spec.fault_kinds


def test_an_unknown_system_is_named_with_the_choices():
    with pytest.raises(UnknownSystemError, match=r"memory_system.name: unknown memory system 'nope' \(available: "):
        spec_of("nope")


def test_a_spec_declares_each_stage_once():
    stage = spec_of(SYSTEMS.names[0]).stages[0]
    with pytest.raises(ValueError, match="declares a stage twice"):
        MemorySystemSpec("x", object, lambda knobs, embedder: None, (stage, stage))  # type: ignore[arg-type,return-value]
