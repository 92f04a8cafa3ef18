"""Every memory system writes its graph by the written conventions (`pipeline.core.conventions`):
each variable's kind is a declared `VarKind` and is the kind its name's namespace fixes, memory units
are of the memory kinds (exactly the namespaces the system's spec states, `unit_namespaces`), and every LLM
operation reads its stage's `prompt:<stage>` variable."""

from __future__ import annotations

import pytest
from memtrace_loop.memory_systems.registry import SYSTEMS, build_memory_system, spec_of
from memtrace_loop.pipeline.analysis.judge import make_judge
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.core.conventions import (
    MEMORY_KINDS,
    Namespace,
    OpStatus,
    VarKind,
    kind_of,
    prompt_name,
    split_name,
)
from memtrace_loop.pipeline.loop.runner import run_dataset

from tests.support.sim import sim_dataset, sim_lm


@pytest.mark.parametrize("system_name", sorted(SYSTEMS))
def test_every_variable_and_operation_follows_the_conventions(system_name):
    dataset = sim_dataset(n_conversations=1)
    lm = sim_lm()
    system = build_memory_system({"name": system_name}, HashingEmbedder())
    system.set_lm(lm)
    result = run_dataset(system, make_judge(lm), dataset, workers=2)
    (graph,) = result.graph_by_conversation.values()
    namespaces = set()
    for var in graph.variables():
        assert type(var.kind) is VarKind, f"{var.id}: undeclared kind {var.kind!r}"
        assert var.kind == kind_of(var.name), f"{var.id}: kind {var.kind} but its name says {kind_of(var.name)}"
        namespaces.add(split_name(var.name)[0])
    units = {ns for ns in namespaces if kind_of(f"{ns}:x") in MEMORY_KINDS}
    assert units == spec_of(system_name).unit_namespaces
    assert {Namespace.TURN, Namespace.QUERY, Namespace.ANSWER, Namespace.GOLD, Namespace.VERDICT} <= namespaces
    llm_ops = [op for op in graph.operations() if op.prompt is not None]
    assert {op.stage for op in llm_ops} >= {"respond", "judge"}
    for op in graph.operations():
        assert type(op.status) is OpStatus
        if op.prompt is not None:
            assert graph.variable(op.prompt).name == prompt_name(op.stage)
