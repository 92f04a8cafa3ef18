"""The lineage attributor against failures whose causes the simulated world planted.

Ground truth comes from the world, not from the graph: a question needs certain rules (planted), the
prompts state certain rules, and `expected_cause` names the first stage with a missing rule. With
retrieval made perfect (top_k larger than the store) that is the only way to fail; with every rule
stated and a tiny top_k, the only way to fail is retrieval. Accuracy is reported per error type, and
all five types must occur.
"""

from __future__ import annotations

from collections import Counter

import pytest
from memtrace_loop.memory_systems.mem0.system import Mem0Knobs, Mem0Memory
from memtrace_loop.pipeline.analysis.attribution.lineage import ConversationLineage, attribute_failures
from memtrace_loop.pipeline.analysis.attribution.records import ErrorType
from memtrace_loop.pipeline.analysis.blame import aggregate_blame
from memtrace_loop.pipeline.analysis.judge import make_judge
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.core.records import PromptSet
from memtrace_loop.pipeline.data.locomo import parse_locomo
from memtrace_loop.pipeline.loop.runner import run_dataset
from memtrace_loop.pipeline.sim.rules import rules_in, with_rules
from memtrace_loop.pipeline.sim.stages import expected_cause
from memtrace_loop.pipeline.sim.world import generate_locomo, planted_questions

from tests.support.sim import sim_lm

ALL_EXTRACT = ("resolve_dates", "third_party")
ALL_DECIDE = ("newest_wins", "keep_compatible")
ALL_ANSWER = ("use_dates", "abstain")


def with_stage_rules(prompts: PromptSet, extract=(), decide=(), respond=()) -> PromptSet:
    return prompts.replace(
        extract=with_rules(prompts["extract"], extract),
        decide=with_rules(prompts["decide"], decide),
        respond=with_rules(prompts["respond"], respond),
    )


def attributed_run(top_k: int, extract=(), decide=(), respond=(), n_conversations: int = 4):
    samples = generate_locomo(seed=0, n_conversations=n_conversations)
    dataset = parse_locomo(samples, "sim")
    system = Mem0Memory(HashingEmbedder(), Mem0Knobs(top_k=top_k))
    system = system.with_prompts(with_stage_rules(system.prompt_set(), extract, decide, respond))
    lm = sim_lm()
    system.set_lm(lm)
    result = run_dataset(system, make_judge(lm), dataset, workers=2)
    present = set().union(*(rules_in(text) for text in system.prompt_set().instruction_by_stage.values()))
    attributions = attribute_failures(
        result.results, result.graph_by_conversation, {c.id: c for c in dataset.conversations}
    )
    planted = planted_questions(samples)
    expected = {a.question_id: expected_cause(planted[a.question_id].needs, present)[0] for a in attributions}
    return result, attributions, expected


def accuracy_by_type(attributions, expected) -> dict[str, tuple[int, int]]:
    totals: Counter[str] = Counter()
    hits: Counter[str] = Counter()
    for attribution in attributions:
        truth = expected[attribution.question_id] or ErrorType.RETRIEVAL.value
        totals[truth] += 1
        hits[truth] += attribution.error_type.value == truth
    return {kind: (hits[kind], totals[kind]) for kind in totals}


@pytest.fixture(scope="module")
def default_prompts_run():
    return attributed_run(top_k=1000)


def test_planted_construction_and_response_failures_are_attributed_correctly(default_prompts_run):
    _, attributions, expected = default_prompts_run
    by_type = accuracy_by_type(attributions, expected)
    for kind in ("ExtractionError", "UpdateError", "DeletionError", "ResponseError"):
        hits, total = by_type[kind]
        assert total >= 5, f"the world should plant several {kind}s, got {total}"
        assert hits / total >= 0.9, f"{kind}: {hits}/{total} attributed correctly"


def test_response_errors_on_answerable_questions_once_construction_is_fixed():
    _, attributions, _ = attributed_run(top_k=1000, extract=ALL_EXTRACT, decide=ALL_DECIDE)
    answerable = [a for a in attributions if a.case.question.category != 5]
    assert len(answerable) >= 5
    assert all(a.error_type == ErrorType.RESPONSE and a.stage == "respond" for a in answerable)
    assert all("date" in a.reason for a in answerable), "temporal failures should say the date was left out"


def test_retrieval_failures_are_blamed_on_the_search_knobs():
    _, attributions, expected = attributed_run(top_k=2, extract=ALL_EXTRACT, decide=ALL_DECIDE, respond=ALL_ANSWER)
    assert len(attributions) >= 10
    assert all(expected[a.question_id] is None for a in attributions)  # every rule is stated
    retrieval = [a for a in attributions if a.error_type == ErrorType.RETRIEVAL]
    assert len(retrieval) / len(attributions) >= 0.9
    assert all(a.stage == "retrieve" and a.tunable == "knobs" and "k=2" in a.reason for a in retrieval)
    table = aggregate_blame(attributions)
    assert table.rows[0].stage == "retrieve" and table.rows[0].tunable == "knobs"
    assert "retrieve" not in table.prompt_stages()


def test_attributions_name_real_operations_stages_and_variables(default_prompts_run):
    result, attributions, _ = default_prompts_run
    stages_with_prompts = {"extract", "decide", "respond"}
    for attribution in attributions:
        graph = result.graph_by_conversation[attribution.case.question.conversation_id]
        op = graph.operation(attribution.op)
        assert op.name == attribution.op_name and op.stage == attribution.stage
        if attribution.tunable == "prompt":
            assert op.prompt is not None and attribution.stage in stages_with_prompts
        assert attribution.op in attribution.reason
        assert attribution.evidence and not attribution.pseudo_evidence


def test_extraction_reasons_say_what_was_lost(default_prompts_run):
    _, attributions, _ = default_prompts_run
    temporal = [a for a in attributions if a.error_type == ErrorType.EXTRACTION and a.case.question.category == 2]
    assert temporal and all("relative date" in a.reason for a in temporal)
    deleted = [a for a in attributions if a.error_type == ErrorType.DELETION]
    assert deleted and all("delete" in a.reason and a.stage == "decide" for a in deleted)


def test_pseudo_evidence_is_used_when_a_question_has_no_evidence_ids(default_prompts_run):
    result, attributions, _ = default_prompts_run
    attribution = next(a for a in attributions if a.error_type == ErrorType.EXTRACTION)
    case = attribution.case
    stripped = type(case)(
        type(case.question)(
            case.question.id, case.question.conversation_id, case.question.text, case.question.gold,
            case.question.category, (),
        ),
        case.prediction, case.verdict, case.scores, case.error,
    )
    graph = result.graph_by_conversation[case.question.conversation_id]
    again = ConversationLineage(graph).attribute(stripped)
    assert again.pseudo_evidence and again.evidence
    assert again.confidence < attribution.confidence


def test_correct_cases_and_excluded_categories_are_not_attributed(default_prompts_run):
    result, _, _ = default_prompts_run
    none_for_cat5 = attribute_failures(result.results, result.graph_by_conversation, exclude_categories=(5,))
    assert none_for_cat5 and all(a.case.question.category != 5 for a in none_for_cat5)
    assert all(not a.case.correct for a in none_for_cat5)
