"""The repairs' hints: the answer stage is pointed at lines of its own context, never given the gold
answer; a repaired unit supersedes the line it says more than; calendar words alone carry nothing."""

from __future__ import annotations

from memtrace_loop.pipeline.analysis.attribution.repairs import (
    answer_hint,
    construction_hint,
    evidence_lines,
    reach,
    steer_hint,
    superseded,
    swappable,
)
from memtrace_loop.pipeline.core.conventions import OpKind, VarKind
from memtrace_loop.pipeline.core.graph import ExecutionGraph

CONTEXT = """Memory: Ximena went skiing at Vail. Time: 23 May 2022
Memory: Ximena works at Hooli. Time: 23 May 2022
Memory: Ximena has a neighbor named Julia. Time: 13 May 2022"""
TURN = "[23 May 2022] Ximena: I went skiing at Vail last Sunday!"


def test_evidence_lines_are_lines_of_the_context_that_share_the_turns_information():
    assert evidence_lines(CONTEXT, [TURN]) == ("Memory: Ximena went skiing at Vail. Time: 23 May 2022",)
    assert evidence_lines(CONTEXT, ["[2 July 2022] Maya: I adopted a hamster."]) == ()  # a date alone: nothing


def test_a_known_unit_marks_its_line_even_without_shared_words():
    assert evidence_lines(CONTEXT, ["unrelated"], ["Ximena has a neighbor named Julia."]) == (
        "Memory: Ximena has a neighbor named Julia. Time: 13 May 2022",
    )


def test_a_repaired_unit_supersedes_the_line_it_says_more_than():
    lines = ("Memory: Ximena went skiing at Vail. Time: 23 May 2022",
             "Memory: Ximena went skiing at Vail on 22 May 2022. Time: 22 May 2022")
    assert superseded(lines, ["Ximena went skiing at Vail on 22 May 2022."]) == lines[1:]
    assert superseded(lines, []) == lines


def test_the_answer_hint_quotes_context_lines_and_never_the_gold_answer():
    lines = evidence_lines(CONTEXT, [TURN])
    hint = answer_hint(lines)
    assert '"Memory: Ximena went skiing at Vail. Time: 23 May 2022"' in hint
    assert "22 May 2022" not in hint  # the gold answer of "When did Ximena go skiing?"


def test_construction_and_steering_hints_quote_what_they_carry_with_inner_quotes_made_single():
    hint = construction_hint(['Ximena: my dog "Rex" ran off'], "22 May 2022")
    assert hint.count('"') == 4 and "'Rex'" in hint and '"22 May 2022"' in hint
    expected = 'Make sure the search also reaches this memory: "Julia lives in Austin.".'
    assert steer_hint(["Julia lives in Austin."]) == expected


def _deleted_before_the_search() -> tuple[ExecutionGraph, dict[str, str]]:
    """turn -> decide -> memory:m1@1 written; a later decide deletes it (m1@2); then the search runs."""
    g = ExecutionGraph("g")
    turn = g.add_variable("turn:D1:1", VarKind.TURN, "Farid: I love pottery.").id
    first = g.add_variable("decision:D1:1", VarKind.DECISION, "ADD").id
    decide_1 = g.add_operation("decide_updates", "decide", OpKind.UPDATE, [turn], [first]).id
    unit = g.add_variable("memory:m1", VarKind.MEMORY, "Farid enjoys pottery.").id
    g.add_operation("memory_add", "store", OpKind.EXTRACTION, [first], [unit])
    later = g.add_variable("decision:D2:1", VarKind.DECISION, "DELETE m1").id
    decide_2 = g.add_operation("decide_updates", "decide", OpKind.UPDATE, [turn], [later]).id
    gone = g.add_variable("memory:m1", VarKind.MEMORY, "").id
    g.add_operation("memory_delete", "store", OpKind.DELETION, [later, unit], [gone])
    query = g.add_variable("query:q1", VarKind.QUERY, "What does Farid enjoy?").id
    context = g.add_variable("retrieved:q1", VarKind.CONTEXT, "").id
    search = g.add_operation("retrieve_memories", "retrieve", OpKind.RETRIEVAL, [query], [context]).id
    return g, {"unit": unit, "decide_1": decide_1, "decide_2": decide_2, "search": search}


def test_a_swap_carries_only_a_unit_in_memory_at_the_search_or_kept_by_a_repair_of_the_same_replay():
    g, ids = _deleted_before_the_search()
    assert not swappable(g, ids["unit"], ids["search"])  # deleted before the search: a retriever can't return it
    assert swappable(g, ids["unit"], ids["search"], revived_by={ids["decide_2"]})  # the deleting decision repaired
    assert not swappable(g, ids["unit"], ids["search"], revived_by={"op:999"})  # an unrelated repair keeps nothing
    fresh = g.add_variable("memory:m2", VarKind.MEMORY, "Farid lives in Denver.").id
    assert swappable(g, fresh, ids["search"])  # never overwritten: in memory when the search ran


def test_reach_widens_just_enough_to_hold_every_wanted_text_it_ranked():
    near = [("memory:m4@1", "d"), ("memory:m5@1", "e"), ("memory:m6@1", "f")]
    assert reach(3, {"a", "b", "c"}, near, {"a"}) == (3, True)  # already a hit: no wider
    assert reach(3, {"a", "b", "c"}, near, {"d", "f"}) == (6, True)  # the deepest wanted one decides
    assert reach(3, {"a", "b", "c"}, near, {"e", "z"}) == (5, False)  # z not ranked: search deeper
