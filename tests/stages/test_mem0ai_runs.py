"""`memory_system=mem0ai` on the simulated world: runs with several workers (one `Memory` per
conversation, mem0's own thread pools inside) are identical to a run with one, and the graph of a
conversation grows linearly with its turns."""

from __future__ import annotations

import json
from typing import Any

import pytest
from memtrace_loop.memory_systems.registry import build_memory_system
from memtrace_loop.pipeline.analysis.judge import make_judge
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.graph_io import graph_to_dict
from memtrace_loop.pipeline.loop.runner import RunResult, run_dataset

from tests.support.sim import sim_dataset, sim_lm

pytestmark = pytest.mark.slow  # two runs of three conversations (~8 s)


def run(workers: int) -> RunResult:
    dataset = sim_dataset(seed=5, n_conversations=3)
    lm = sim_lm()
    system = build_memory_system({"name": "mem0ai"}, HashingEmbedder())
    system.set_lm(lm)
    return run_dataset(system, make_judge(lm), dataset, workers=workers)


def comparable(graph: ExecutionGraph) -> str:
    """The graph as JSON without mem0's own ids (uuid4s it draws at random: kept in meta for the user)."""
    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "mem0_id"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return json.dumps(strip(graph_to_dict(graph)), sort_keys=True)


@pytest.fixture(scope="module")
def runs() -> tuple[RunResult, RunResult]:
    return run(workers=1), run(workers=3)


def test_workers_do_not_change_results_or_graphs(runs):
    one, three = runs
    assert [(r.question.id, r.prediction, r.verdict) for r in one.results] == [
        (r.question.id, r.prediction, r.verdict) for r in three.results
    ]
    assert one.graph_by_conversation.keys() == three.graph_by_conversation.keys()
    for cid, graph in one.graph_by_conversation.items():
        assert comparable(graph) == comparable(three.graph_by_conversation[cid]), cid
    assert any(v.meta.get("mem0_id") for g in one.graph_by_conversation.values() for v in g.variables())


def test_a_conversation_graph_is_linear_in_its_turns(runs):
    graphs = runs[0].graph_by_conversation.values()
    for graph in graphs:
        turns = len(graph.names("turn:"))
        construction = [op for op in graph.operations() if not op.name.startswith(("retrieve", "question", "llm"))]
        assert len(construction) <= 8 * turns  # extract, search, decide and a few store effects per turn
        largest = max(len(json.dumps(dict(op.meta))) for op in construction)
        assert largest < 2000  # no operation carries the whole history
