"""Evidence finding: gold ids when given, else BM25 (and embedding) pseudo-evidence, fused."""

from __future__ import annotations

from memtrace_loop.pipeline.analysis.attribution.evidence import EvidenceFinder
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.records import Question

TURNS = {
    "D1:1": "[8 May 2023] Alice: I adopted a puppy named Rex.",
    "D1:2": "[8 May 2023] Bob: The weather is nice today.",
    "D1:3": "[9 May 2023] Alice: I moved to Lisbon last week.",
}


def graph() -> ExecutionGraph:
    g = ExecutionGraph("c1")
    for turn_id, text in TURNS.items():
        g.add_variable(f"turn:{turn_id}", "turn", text)
    return g


def test_gold_evidence_is_used_when_present():
    found = EvidenceFinder(graph()).find(Question("c1:q0", "c1", "Where does Alice live?", "Lisbon", 1, ("D1:3",)))
    assert found.turn_vars == ("turn:D1:3@1",) and not found.pseudo and found.method == "gold"


def test_pseudo_evidence_ranks_the_turn_that_holds_the_answer_first():
    question = Question("c1:q1", "c1", "What is the name of Alice's puppy?", "Rex", 1, ())
    by_bm25 = EvidenceFinder(graph(), k=1).find(question)
    fused = EvidenceFinder(graph(), HashingEmbedder(), k=1).find(question)
    assert by_bm25.turn_vars == fused.turn_vars == ("turn:D1:1@1",)
    assert by_bm25.pseudo and by_bm25.method == "bm25" and fused.method == "bm25+embeddings"


def test_evidence_ids_missing_from_the_graph_fall_back_to_pseudo_evidence():
    question = Question("c1:q2", "c1", "Where did Alice move?", "Lisbon", 1, ("D9:9",))
    found = EvidenceFinder(graph(), k=1).find(question)
    assert found.pseudo and found.turn_vars == ("turn:D1:3@1",)
