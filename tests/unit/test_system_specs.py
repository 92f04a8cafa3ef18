"""Every registered memory system's `SPEC` agrees with the system it builds (the contract is one place),
states the facts the registry-parametrized tests read from it (its graph's unit namespaces and operation
kinds, how far replay goes, its rescue oracle knob worlds), and the rescue oracle takes its knob worlds
from the spec: every system that states them, and a loud refusal of one that does not."""

from __future__ import annotations

import dataclasses
import importlib

import pytest
from memtrace_loop.experiments.lab.bench import rescue_bench
from memtrace_loop.experiments.lab.bench.rescue_bench import build
from memtrace_loop.experiments.lab.benchmark import rescue
from memtrace_loop.memory_systems.registry import SYSTEMS, UnknownSystemError, build_memory_system, spec_of
from memtrace_loop.memory_systems.spec import FaultKind, KnobWorld, MemorySystemSpec, Replay
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.backends.registry import backend_test_world
from memtrace_loop.pipeline.core.conventions import MEMORY_KINDS, Namespace, OpKind, kind_of


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


@pytest.mark.parametrize("name", SYSTEMS.names)
def test_the_spec_states_its_graph_its_replay_and_its_knob_worlds(name):
    spec = spec_of(name)
    assert spec.unit_namespaces and all(kind_of(f"{ns}:x") in MEMORY_KINDS for ns in spec.unit_namespaces)
    assert all(type(ns) is Namespace for ns in spec.unit_namespaces)
    assert OpKind.RESPONSE in spec.op_kinds and OpKind.JUDGE not in spec.op_kinds  # the judge is not the system's
    assert type(spec.replay) is Replay
    if spec.compare:  # a compared system is in the rescue bench: it states worlds that degrade its knobs
        assert spec.knob_worlds, f"{name}: a compared system states its knob worlds"
    fields = {f.name for f in dataclasses.fields(spec.knobs)}
    stages = {s.name for s in spec.stages}
    for world in spec.knob_worlds or ():
        assert set(world.knobs) <= fields, world
        assert set(world.owners) <= set(world.knobs) and set(world.owners.values()) <= stages, world
        degraded = build_memory_system({"name": name, **world.knobs}, HashingEmbedder())  # the record takes it
        assert {k: degraded.knob_values()[k] for k in world.knobs} == dict(world.knobs)


@pytest.mark.parametrize("name", [n for n, spec in SYSTEMS.items() if spec.knob_worlds is not None])
def test_the_rescue_oracle_runs_every_knob_world_the_spec_states(name):
    worlds = rescue.degraded_worlds(name, build, backend_test_world())
    knob_worlds = [w for w in worlds if w.knobs]
    assert [(w.name, dict(w.knobs), dict(w.owners)) for w in knob_worlds] == [
        (k.name, dict(k.knobs), dict(k.owners)) for k in spec_of(name).knob_worlds or ()
    ]
    assert worlds[0].name == "default" and all(w.system == name for w in worlds)


@pytest.fixture
def silent_system(monkeypatch: pytest.MonkeyPatch) -> str:
    """A registered system whose spec, for this test, states no knob worlds."""
    name = SYSTEMS.names[0]
    module = importlib.import_module(SYSTEMS.module_of(name))
    monkeypatch.setattr(module, "SPEC", dataclasses.replace(spec_of(name), knob_worlds=None))
    return name


def test_a_system_whose_spec_states_no_knob_worlds_is_refused_by_name(silent_system, capsys):
    with pytest.raises(rescue.NoKnobWorldsError, match=rf"^memory system '{silent_system}': its spec states no knob"):
        rescue.degraded_worlds(silent_system, build, backend_test_world())
    with pytest.raises(SystemExit) as exit_:  # the rescue bench: one line, before any run
        rescue_bench.main(["--systems", silent_system, "--seeds", "1", "--no-injected"])
    assert exit_.value.code == 2
    assert f"memory systems ['{silent_system}']: their specs state no knob worlds" in capsys.readouterr().err


def test_an_unknown_system_is_named_with_the_choices():
    with pytest.raises(UnknownSystemError, match=r"memory_system.name: unknown memory system 'nope' \(available: "):
        spec_of("nope")


def test_a_spec_declares_each_stage_and_knob_world_once():
    spec = spec_of(SYSTEMS.names[0])
    with pytest.raises(ValueError, match="declares a stage twice"):
        dataclasses.replace(spec, stages=(spec.stages[0], spec.stages[0]))
    world = KnobWorld("small", {"top_k": 1})
    with pytest.raises(ValueError, match="declares a knob world twice"):
        dataclasses.replace(spec, knob_worlds=(world, world))
