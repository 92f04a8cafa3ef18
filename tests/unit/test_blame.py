
"""Blame aggregation: verified attributions weigh more, joint causes split their weight."""

from __future__ import annotations

import doctest
from dataclasses import replace

import pytest
from memtrace_loop.pipeline.analysis import blame
from memtrace_loop.pipeline.analysis.attribution.records import Attribution, Check, ErrorType, Fault, Tunable
from memtrace_loop.pipeline.analysis.blame import WEIGHT_BY_CHECK, BlameTable, aggregate_blame
from memtrace_loop.pipeline.core.records import CaseResult, Question, Scores


def case(i: int) -> CaseResult:
    question = Question(f"c:q{i}", "c", "Where?", "Rome", 1, ())
    return CaseResult(question, "Paris", "WRONG", Scores(0.0, 0.0, 0.0))


def blamed(i: int, stage: str, verified: bool | None = None, joint: tuple[Fault, ...] = ()) -> Attribution:
    return Attribution(
        case(i), f"op:{i}", "x", stage, ErrorType.EXTRACTION, "why", 0.9, "lineage", Tunable.PROMPT,
        check=Check.of(verified), joint=joint,
    )


def test_without_verification_ranking_is_the_count():
    table = aggregate_blame([blamed(1, "a"), blamed(2, "b"), blamed(3, "b")])
    assert [r.stage for r in table.rows] == ["b", "a"]
    assert [r.share for r in table.rows] == pytest.approx([2 / 3, 1 / 3])


def test_verified_blame_outweighs_more_numerous_refuted_blame():
    table = aggregate_blame(
        [blamed(1, "a", True), blamed(2, "b", False), blamed(3, "b", False), blamed(4, "b", False)]
    )
    assert WEIGHT_BY_CHECK[Check.VERIFIED] > WEIGHT_BY_CHECK[Check.UNCHECKED] > WEIGHT_BY_CHECK[Check.REFUTED]
    assert [r.stage for r in table.rows] == ["a", "b"]
    assert table.by_stage["a"].verified == 1 and table.by_stage["b"].refuted == 3


def test_joint_cause_splits_its_weight_over_its_stages():
    faults = (
        Fault("op:1", "extract_facts", "extract", ErrorType.EXTRACTION, Tunable.PROMPT, "lost", (), 1),
        Fault("op:9", "retrieve_memories", "retrieve", ErrorType.RETRIEVAL, Tunable.KNOBS, "missed", (), 9),
    )
    table = aggregate_blame([blamed(1, "extract", True, faults)])
    assert table.by_stage["extract"].weight == pytest.approx(0.5)
    assert table.by_stage["retrieve"].weight == pytest.approx(0.5)
    assert table.by_stage["retrieve"].tunable == Tunable.KNOBS
    assert table.by_stage["retrieve"].count_by_error_type == {"RetrievalError": 1}


def test_unverifiable_blame_weighs_as_unchecked_and_is_counted_apart():
    unverifiable = replace(blamed(1, "a", None), check=Check.UNVERIFIABLE)
    table = aggregate_blame([unverifiable, blamed(2, "b", None)])
    assert WEIGHT_BY_CHECK[Check.UNVERIFIABLE] == WEIGHT_BY_CHECK[Check.UNCHECKED]
    assert table.by_stage["a"].weight == pytest.approx(table.by_stage["b"].weight)
    assert table.by_stage["a"].unverifiable == 1 and table.by_stage["a"].verified == 0
    assert unverifiable.verified is None


def test_a_weight_tie_goes_to_the_stage_whose_repair_alone_was_verified_to_rescue() -> None:
    pair = (
        Fault("op:1", "extract_facts", "extract", ErrorType.EXTRACTION, Tunable.PROMPT, "lost", (), 1),
        Fault("op:2", "retrieve_memories", "retrieve", ErrorType.RETRIEVAL, Tunable.KNOBS, "missed", (), 2),
    )
    # extract: 1 alone + half of 2 joint sets (with retrieve) = 2.0 in 3 failures; decide: 2 alone = 2.0 in 2
    items = [blamed(1, "extract", True), blamed(2, "extract", True, pair), blamed(3, "extract", True, pair),
             blamed(4, "decide", True), blamed(5, "decide", True), blamed(6, "a", False)]
    table = aggregate_blame(items)
    assert table.by_stage["extract"].weight == pytest.approx(table.by_stage["decide"].weight) == pytest.approx(2.0)
    assert table.by_stage["extract"].count == 3 > table.by_stage["decide"].count == 2
    assert (table.by_stage["decide"].verified_alone, table.by_stage["extract"].verified_alone) == (2, 1)
    assert [r.stage for r in table.rows][:2] == ["decide", "extract"]  # without the rule: extract, by count
    unchecked = aggregate_blame([replace(a, check=Check.UNCHECKED) for a in items])
    assert unchecked.rows[0].stage == "extract"  # nothing verified: the tie goes by the count


def test_a_table_reads_back_from_its_rows_and_old_rows_read_their_count_as_weight() -> None:
    made = aggregate_blame([blamed(1, "a", True), blamed(2, "b", False)])
    assert BlameTable.from_rows(made.as_rows()).as_rows() == made.as_rows()
    old = BlameTable.from_rows([{"stage": "a", "tunable": "prompt", "count": 3, "share": 1.0, "n_Extraction": 3}])
    assert old.rows[0].weight == 3.0 and old.rows[0].verified_alone == 0 and old.total == 3


def test_the_worked_examples_in_the_module_hold() -> None:
    failures, tried = doctest.testmod(blame)
    assert tried >= 1 and failures == 0
