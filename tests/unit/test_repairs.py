"""The repairs' hints: the answer stage is pointed at lines of its own context, never given the gold
answer; a repaired unit supersedes the line it says more than; calendar words alone carry nothing."""

from __future__ import annotations

from memtrace_loop.pipeline.analysis.attribution.repairs import (
    answer_hint,
    construction_hint,
    evidence_lines,
    steer_hint,
    superseded,
)

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
