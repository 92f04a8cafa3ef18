"""Scoring attributions against rescue labels (experiments.lab.benchmark.rescue_scoring), on hand-made records."""

from __future__ import annotations

import dataclasses
import doctest
from types import MappingProxyType

import pytest
from memtrace_loop.experiments.lab.benchmark import rescue_scoring
from memtrace_loop.experiments.lab.benchmark.rescue import RescueLabel
from memtrace_loop.experiments.lab.benchmark.rescue_scoring import (
    bar_summary,
    compare_rescue,
    oracle_top_alone,
    oracle_top_split,
    oracle_top_stage,
    stage_necessary,
    summarize_rescue,
    top_agreement,
    top_vs_split,
)
from memtrace_loop.pipeline.analysis.attribution.records import (
    Attribution,
    AttributionCost,
    Check,
    ErrorType,
    Fault,
    Tunable,
)
from memtrace_loop.pipeline.analysis.blame import BlameTable, StageBlame
from memtrace_loop.pipeline.core.records import CaseResult, Question, Scores

RETRIEVE_ONLY = RescueLabel("q1", frozenset({"retrieve"}), None, False)
TWO_RESCUERS = RescueLabel("q2", frozenset({"retrieve", "extract"}), None, False)
JOINT = RescueLabel("q3", frozenset(), ("write_events", "respond"), False,
                    (("write_events", "respond"), ("write_events", "expand_queries")))
NOTHING = RescueLabel("q4", frozenset(), None, True)
RESPOND_ONLY = RescueLabel("q5", frozenset({"respond"}), None, False)


def _fault(stage: str) -> Fault:
    return Fault(f"op-{stage}", stage, stage, ErrorType.EXTRACTION, Tunable.PROMPT, "")


def blame(
    qid: str, stage: str, check: Check = Check.UNCHECKED, joint: tuple[str, ...] = (), calls: tuple[int, int] = (0, 0)
) -> Attribution:
    case = CaseResult(Question(qid, "c1", "?", "gold", 1), "wrong", "WRONG", Scores(0.0, 0.0, 0.0))
    tunable = Tunable.KNOBS if stage == "retrieve" else Tunable.PROMPT
    return Attribution(
        case, f"op-{stage}", stage, stage, ErrorType.RETRIEVAL, "", 1.0, "test", tunable, check=check,
        joint=tuple(_fault(s) for s in joint), cost=AttributionCost(lm_calls=calls[0], replay_calls=calls[1]),
    )


def test_a_blamed_stage_among_the_rescuers_rescues_alone_and_only_a_sole_rescuer_is_necessary() -> None:
    alone = compare_rescue(RETRIEVE_ONLY, blame("q1", "retrieve"))
    assert alone.rescues_alone and alone.necessary
    other = compare_rescue(TWO_RESCUERS, blame("q2", "retrieve"))
    assert other.rescues_alone and not other.necessary  # extract alone also rescues: retrieve is not needed
    wrong = compare_rescue(RETRIEVE_ONLY, blame("q1", "respond"))
    assert not wrong.rescues_alone and not wrong.necessary


def test_necessary_means_in_every_minimal_rescuing_set() -> None:
    assert stage_necessary(JOINT, "write_events")
    assert not stage_necessary(JOINT, "respond")  # the other minimal set does without it
    assert not stage_necessary(NOTHING, "respond")


def test_a_joint_set_is_named_and_sufficient_when_it_contains_a_rescuing_set() -> None:
    named = compare_rescue(JOINT, blame("q3", "write_events", joint=("write_events", "respond")))
    assert named.joint_named and named.joint_sufficient and named.rescues_alone is False
    short = compare_rescue(JOINT, blame("q3", "write_events", joint=("write_events", "retrieve")))
    assert short.joint_named and not short.joint_sufficient
    bigger = compare_rescue(JOINT, blame("q3", "respond", joint=("respond", "expand_queries", "write_events")))
    assert bigger.joint_sufficient
    single = compare_rescue(JOINT, blame("q3", "write_events"))
    assert not single.joint_named and not single.joint_sufficient


@pytest.mark.parametrize(
    ("label", "attribution", "right"),
    [
        (RETRIEVE_ONLY, blame("q1", "retrieve", Check.VERIFIED), True),
        (RETRIEVE_ONLY, blame("q1", "respond", Check.VERIFIED), False),  # verified but does not rescue
        (JOINT, blame("q3", "write_events", Check.VERIFIED, ("write_events", "respond")), True),
        (JOINT, blame("q3", "write_events", Check.VERIFIED), False),  # no single repair rescues q3
        (RETRIEVE_ONLY, blame("q1", "retrieve", Check.REFUTED), False),  # right, but not verified
    ],
)
def test_verified_is_right_only_when_the_verified_repair_rescues(
    label: RescueLabel, attribution: Attribution, right: bool
) -> None:
    assert compare_rescue(label, attribution).verified_right is right


def test_no_attribution_is_wrong_everywhere() -> None:
    score = compare_rescue(RETRIEVE_ONLY, None)
    assert not (score.rescues_alone or score.necessary or score.joint_named or score.verified_right)
    assert score.check is None


def test_oracle_top_stage_counts_single_rescuers_and_joint_stages() -> None:
    assert oracle_top_stage([RETRIEVE_ONLY, TWO_RESCUERS, JOINT]) == "retrieve"
    assert oracle_top_stage([JOINT, dataclasses.replace(JOINT, question_id="q5")]) == "respond"  # tie: by name
    assert oracle_top_stage([NOTHING]) is None


def test_the_split_oracle_weighs_each_failure_once_as_the_blame_table_does() -> None:
    """A failure two stages each rescue alone gives each half; a joint case splits over its sets, then
    over each set's members: JOINT gives write_events 1/2 and respond, expand_queries 1/4 each."""
    assert oracle_top_split([RETRIEVE_ONLY, TWO_RESCUERS, JOINT]) == "retrieve"  # 1.5 against 0.5
    extract = dataclasses.replace(TWO_RESCUERS, rescuers=frozenset({"extract"}))
    # in full: respond and write_events 3 each (three joint cases) beat extract 2; split: extract 2 beats
    # write_events 1.5
    labels = [*(dataclasses.replace(JOINT, question_id=f"j{i}") for i in range(3)), extract, extract]
    assert (oracle_top_stage(labels), oracle_top_split(labels)) == ("respond", "extract")
    assert oracle_top_split([NOTHING]) is None


def test_summary_shares_use_their_own_denominators() -> None:
    labels = {label.question_id: label for label in (RETRIEVE_ONLY, TWO_RESCUERS, JOINT, NOTHING)}
    attributions = {
        "q1": blame("q1", "retrieve", Check.VERIFIED, calls=(2, 1)),
        "q2": blame("q2", "respond", Check.VERIFIED, calls=(2, 3)),
        "q3": blame("q3", "write_events", Check.REFUTED, ("write_events", "retrieve")),
        "q4": blame("q4", "respond", Check.UNVERIFIABLE),
    }
    score = summarize_rescue("rag", "top_k=1", "lineage+verify", labels, attributions)
    assert score.n == 4
    assert score.rescues_alone == pytest.approx(1 / 4)
    assert score.necessary == pytest.approx(2 / 3)  # q1 and q3 (write_events) of the three rescuable cases
    assert (score.joint_cases, score.joint_named) == (1, 1.0)
    assert (score.named_sets, score.joint_sufficient) == (1, 0.0)
    assert (score.verified, score.verified_precision) == (2, 0.5)
    assert score.unverifiable == pytest.approx(1 / 4)
    assert (score.lm_calls_per_case, score.replay_calls_per_case) == (1.0, 1.0)
    assert score.oracle_top == score.oracle_top_split == "retrieve"
    # respond: 1.0 (verified) + 0.5 (unverifiable) outweighs retrieve: 1.0 + 0.2 / 2 (half a refuted set)
    assert score.top_blamed == "respond" != score.oracle_top
    row = score.as_row()
    assert row["verified_precision_%"] == 50.0 and row["calls_per_case"] == 2.0


def test_a_missing_attribution_counts_and_empty_denominators_are_none() -> None:
    score = summarize_rescue("rag", "w", "llm", {"q1": RETRIEVE_ONLY}, {})
    assert score.n == 1 and score.rescues_alone == 0.0
    assert score.joint_named is None and score.verified_precision is None and score.joint_sufficient is None
    assert score.top_blamed is None


def _table(**weights: float) -> BlameTable:
    rows = tuple(
        StageBlame(stage, Tunable.PROMPT, 1, 0.0, MappingProxyType({}), (), weight)
        for stage, weight in sorted(weights.items(), key=lambda item: -item[1])
    )
    return BlameTable(rows, len(rows))


@pytest.mark.parametrize(
    ("table", "labels", "expected"),
    [
        # the same top stage
        (_table(retrieve=2.0, respond=1.0), [RETRIEVE_ONLY, RETRIEVE_ONLY], "agrees"),
        # the oracle is tied (retrieve 1, respond 1) and broke it to respond (by name): the table's retrieve is tied top
        (_table(retrieve=2.0, respond=1.0), [RETRIEVE_ONLY, RESPOND_ONLY], "tie"),
        # the table is tied (extract, retrieve) and broke it to extract: the oracle's top retrieve is tied top there
        (_table(extract=1.0, retrieve=1.0), [RETRIEVE_ONLY, RETRIEVE_ONLY], "tie"),
        # no tie on either side bridges them
        (_table(respond=2.0, retrieve=1.0), [RETRIEVE_ONLY, RETRIEVE_ONLY], "differs"),
        (BlameTable(), [RETRIEVE_ONLY], None),
        (_table(retrieve=1.0), [NOTHING], None),
    ],
)
def test_top_vs_split_reads_a_tie_on_either_side_as_a_tie_break_not_a_miss(
    table: BlameTable, labels: list[RescueLabel], expected: str | None
) -> None:
    assert top_vs_split(table, labels) == expected


def test_the_oracle_breaks_a_split_tie_as_the_blame_table_does_by_rescues_alone() -> None:
    # extract: 1 + half of 2 joint sets = 2 split, 1 alone; respond: 1 + 1 split, 2 alone... tied at 2
    joint = RescueLabel("j", frozenset(), ("extract", "decide"), False, (("extract", "decide"),))
    extract, respond = (RescueLabel(s, frozenset({s}), None, False) for s in ("extract", "respond"))
    labels = [joint, joint, extract, respond, respond]
    assert rescue_scoring.oracle_split_weights(labels) == {"extract": 2.0, "decide": 1.0, "respond": 2.0}
    assert oracle_top_split(labels) == "respond"  # 2 alone against 1, though extract takes part in 3 failures
    assert oracle_top_stage(labels) == "extract" and oracle_top_alone(labels) == "respond"
    assert oracle_top_alone([joint, NOTHING]) is None


def test_top_agreement_counts_worlds_per_reading_and_setting() -> None:
    def score(world: str, setting: str, top: str | None, full: str) -> rescue_scoring.RescueScore:
        made = summarize_rescue("rag", world, setting, {"q1": RETRIEVE_ONLY}, {})
        return dataclasses.replace(made, top_blamed=top, oracle_top=full)

    scores = [score("a", "lineage", "retrieve", "retrieve"), score("b", "lineage", "retrieve", "respond"),
              score("c", "lineage", None, "retrieve"), score("a", "llm", "respond", "retrieve")]
    assert top_agreement(scores) == [
        {"setting": "lineage", "worlds": 2, "full": 1, "split": 2, "alone": 2},  # world c: nothing blamed
        {"setting": "llm", "worlds": 1, "full": 0, "split": 0, "alone": 0},
    ]


def test_bar_summary_pools_each_share_by_its_own_denominator() -> None:
    right, wrong = blame("q1", "retrieve", Check.VERIFIED), blame("q1", "respond", Check.VERIFIED)
    one = summarize_rescue("rag", "a", "lineage+verify", {"q1": RETRIEVE_ONLY}, {"q1": right})
    two = summarize_rescue("rag", "b", "lineage+verify", {"q1": RETRIEVE_ONLY, "q6": RETRIEVE_ONLY},
                           {"q1": wrong, "q6": None})
    (row,) = bar_summary([one, two])
    assert row["failures"] == 3 and row["rescues_alone_%"] == 33.3  # 1 of 3 failures
    assert row["verified_precision_%"] == 50.0  # 1 of the 2 verified blames is right
    assert row["joint_named_%"] is None and row["top=split"] == "1/2"  # world b: respond, the oracle retrieve


def test_the_worked_examples_in_the_module_hold() -> None:
    failures, tried = doctest.testmod(rescue_scoring)
    assert tried >= 11 and failures == 0
