"""Where one piece of information went (pipeline/analysis/attribution/information_flow.py), on small
graphs built by hand (tests/support/hand_graphs.py): the tracks a case needs, what carries them, the
drops on the way, and what carries them at question time. No verdicts: those are test_lineage_cases.py's."""

from __future__ import annotations

import doctest

from memtrace_loop.pipeline.analysis.attribution import information_flow
from memtrace_loop.pipeline.analysis.attribution.information_flow import Drop, InformationFlow, Track
from memtrace_loop.pipeline.core.graph import ExecutionGraph, OpKind
from memtrace_loop.pipeline.core.records import Question

from tests.support.hand_graphs import (
    LIVES,
    MOVED,
    QID,
    case,
    extract,
    mem0_overwrote_lisbon,
    memory_add,
    new_graph,
    search_and_decide,
    turn,
)

SAID = "turn:D1:1@1"


def lisbon(flow: InformationFlow) -> Track:
    """The gold answer's track of LIVES ("Lisbon", from turn D1:1)."""
    [track] = flow.tracks(case(LIVES, "Porto"), [SAID])
    return track


def chunk(graph: ExecutionGraph, index: int, turns: list[str], text: str) -> str:
    """A RAG chunk (`rag.py`: `chunk_turns`, no prompt) of `turns` holding `text`."""
    out = graph.add_variable(f"chunk:{index}", "chunk", text).id
    graph.add_operation("chunk_turns", "chunk", OpKind.EXTRACTION, turns, [out])
    return out


def test_the_worked_example_in_the_module_doc_holds() -> None:
    failures, tried = doctest.testmod(information_flow)
    assert tried >= 8 and failures == 0


def test_tracks_are_the_gold_answer_and_what_a_turn_says_without_its_speakers() -> None:
    graph = new_graph()
    turn(graph, "D1:1", "Bob", "Alice moved to Lisbon in May.")
    when = Question(QID, "c1", "When did Alice move to Lisbon?", "May 2023", 2, ("D1:1",))
    flow = InformationFlow(graph, ["Alice", "Bob"])
    gold, said = flow.tracks(case(when, "June"), [SAID])
    assert (gold.label, gold.target, gold.sources, gold.is_gold) == ('the answer "May 2023"', {"may", "2023"},
                                                                      (SAID,), True)
    assert (said.label, said.target, said.is_gold, said.text) == (
        'what turn:D1:1 says about "lisbon may"', {"lisbon", "may"}, False, "Alice moved to Lisbon in May.")
    # a speaker's name is no content of the turn: without the speakers, "alice" is part of what it says
    assert InformationFlow(graph).tracks(case(when, "June"), [SAID])[1].target == {"alice", "lisbon", "may"}
    # a turn that says nothing beyond the gold answer is followed as the gold answer alone
    assert [t.label for t in flow.tracks(case(LIVES, "Porto"), [SAID])] == ['the answer "Lisbon"']


def test_follow_finds_the_update_that_overwrote_the_stored_fact() -> None:
    graph, wrote = mem0_overwrote_lisbon()
    flow = InformationFlow(graph, ["Alice"])

    live, drops = flow.follow(lisbon(flow))
    assert live == {SAID, "facts:D1:1@1", "decision:D1:1@1", wrote.stored}
    assert drops == [Drop(wrote.update, graph.variable(wrote.stored), graph.variable(wrote.overwritten))]
    assert flow.decision_maker(wrote.update) == wrote.decide  # the store write only executed the decision
    assert [m.id for m in flow.live_memories] == [wrote.overwritten]
    assert flow.content_survivors(lisbon(flow)) == []


def test_a_write_that_did_not_take_the_information_is_no_drop_when_another_did() -> None:
    graph = new_graph("extract", "decide")
    turn(graph, "D1:1", "Alice", MOVED)
    facts, _ = extract(graph, "D1:1", ["Alice moved to Lisbon", "Alice likes coffee"])
    actions = [{"event": "ADD", "text": "Alice lives in Lisbon"}, {"event": "ADD", "text": "Alice likes coffee"}]
    decision, _ = search_and_decide(graph, "D1:1", facts, [], actions)
    kept = memory_add(graph, decision, "m1", "Alice lives in Lisbon", "D1:1")
    memory_add(graph, decision, "m2", "Alice likes coffee", "D1:1")
    flow = InformationFlow(graph)

    live, drops = flow.follow(lisbon(flow))
    assert kept in live and "memory:m2@1" not in live and drops == []


def test_a_copy_step_carries_a_turn_only_whole() -> None:
    """A turn cut into two chunks: neither fragment carries it, though one holds the word "Lisbon"."""
    graph = new_graph()
    turn(graph, "D1:1", "Alice", MOVED)
    head = chunk(graph, 1, [SAID], "I moved to")
    tail = chunk(graph, 2, [SAID], "Lisbon in May.")
    query = graph.add_variable(f"query:{QID}", "query", LIVES.text).id
    context = graph.add_variable(f"retrieved:{QID}", "context", "I moved to\nLisbon in May.").id
    search = graph.add_operation("retrieve_chunks", "retrieve", OpKind.RETRIEVAL, [query, head, tail], [context])
    flow = InformationFlow(graph)

    live, drops = flow.follow(lisbon(flow))
    assert live == {SAID} and [(d.op.name, d.carrier.id, d.output and d.output.id) for d in drops] == [
        ("chunk_turns", SAID, head), ("chunk_turns", SAID, tail)]
    assert all(flow.is_fragment(graph.variable(v)) for v in (head, tail))
    assert flow.crowding_copy_step(search) == graph.producer(head)
    # a fragment of the source turn itself is not the information living elsewhere
    assert flow.content_survivors(lisbon(flow)) == []


def test_content_survivors_are_llm_written_units_or_copies_of_another_turn_for_the_gold_answer() -> None:
    """D1:1's own extract lost Lisbon; D1:2 says it again, copied whole into a chunk and stored by an LLM."""
    graph = new_graph("extract", "decide")
    turn(graph, "D1:1", "Alice", MOVED)
    extract(graph, "D1:1", ["Alice moved in May"])
    again = turn(graph, "D1:2", "Alice", "Lisbon is home now.")
    copy = chunk(graph, 1, [again], f"[8 May 2023] Alice: {graph.variable(again).value}")
    facts, _ = extract(graph, "D1:2", ["Alice's home is Lisbon"])
    decision, _ = search_and_decide(graph, "D1:2", facts, [], [{"event": "ADD", "text": "Alice's home is Lisbon"}])
    written = memory_add(graph, decision, "m1", "Alice's home is Lisbon", "D1:2")
    flow = InformationFlow(graph, ["Alice"])
    gold = lisbon(flow)
    said = Track("what turn:D1:1 says about \"lisbon\"", gold.target, gold.sources, False, MOVED)

    assert flow.follow(gold)[0] == {SAID}
    assert [m.id for m in flow.content_survivors(gold)] == [copy, written]
    assert [m.id for m in flow.content_survivors(said)] == [written]  # only an LLM's unit
