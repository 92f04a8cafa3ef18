"""The EverMemOS-style system on the simulated world, end to end (moved from tests/stages/test_evermemos.py: each
test runs whole runs or the closed loop, seconds each): its planted failures, their attribution, the closed loop,
and a run on real LoCoMo.

Ground truth for attribution comes from the world: a question's planted `needs` are Mem0-stage rules;
this system's equivalents are computed here (`evermemos_needs`): the event writer needs `event_dates`
where Mem0's extractor needs `resolve_dates` and `event_third_party` where it needs `third_party`; a
multi-hop question also needs `expand_related` (its second hop is found only by the expanded query);
the answer rules are shared; the update rules have no counterpart (episodes are never overwritten).
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
from memtrace_loop.memory_systems.evermemos.system import EverMemOSKnobs, EverMemOSMemory
from memtrace_loop.memory_systems.registry import build_memory_system
from memtrace_loop.optimizers.feedback import feedback_for_attribution, fold_feedback
from memtrace_loop.optimizers.registry import build_optimizer
from memtrace_loop.pipeline.analysis.attribution.lineage import attribute_failures
from memtrace_loop.pipeline.analysis.judge import make_judge
from memtrace_loop.pipeline.backends.call_count import CallLedger
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.core.records import PromptSet
from memtrace_loop.pipeline.data.locomo import parse_locomo
from memtrace_loop.pipeline.data.splits import split_by_conversation
from memtrace_loop.pipeline.loop.optimization import LoopSettings, OptimizationLoop
from memtrace_loop.pipeline.loop.runner import run_dataset
from memtrace_loop.pipeline.sim.rewriter import rewrite
from memtrace_loop.pipeline.sim.rules import RULES_BY_ID, rules_for_stage, rules_in, rules_pointed_by, with_rules
from memtrace_loop.pipeline.sim.stages import stage_for_outputs
from memtrace_loop.pipeline.sim.world import generate_locomo, planted_questions

from tests.support.paths import LOCOMO
from tests.support.requires import missing_locomo, requires
from tests.support.sim import counted_sim_lms, sim_dataset, sim_lm

pytestmark = pytest.mark.slow  # whole loops and runs: out of `make test-fast`


ANSWER_RULES = ("use_dates", "abstain")
ALL_RULES = ("event_dates", "event_third_party", "expand_related", *ANSWER_RULES)
EQUIVALENT = {"resolve_dates": "event_dates", "third_party": "event_third_party", **{r: r for r in ANSWER_RULES}}
PIPELINE = ("write_events", "expand_queries", "answer")


def evermemos_needs(kind: str, needs: tuple[str, ...]) -> list[str]:
    found = [EQUIVALENT[n] for n in needs if n in EQUIVALENT]
    return [*found, "expand_related"] if kind == "multi_hop" else found


def expected_error(kind: str, needs: tuple[str, ...], present: set[str]) -> str:
    """The planted cause; a failure without one is a retrieval miss."""
    missing = [RULES_BY_ID[r] for r in evermemos_needs(kind, needs) if r not in present]
    if not missing:
        return "RetrievalError"
    return min(missing, key=lambda r: PIPELINE.index(r.stage)).fixes_error_type


def with_stage_rules(system: EverMemOSMemory, rule_ids) -> EverMemOSMemory:
    prompts = {}
    for name, predictor in system.named_predictors():
        stage = stage_for_outputs(predictor.signature.output_fields) or ""
        prompts[name] = with_rules(predictor.signature.instructions,
                                   [r.id for r in rules_for_stage(stage) if r.id in rule_ids])
    return system.with_prompts(PromptSet(prompts))


@pytest.fixture(scope="module")
def sim():
    samples = generate_locomo(seed=0, n_conversations=4)
    lm = sim_lm()
    system = EverMemOSMemory(HashingEmbedder(), EverMemOSKnobs(tokenizer="approx"))
    system.set_lm(lm)
    return samples, parse_locomo(samples, "sim"), lm, system, {}


def sim_run(sim, rule_ids, excluded=(5,)):
    """The run with `rule_ids` in the stages' prompts (each rule set run once per module), its attributions."""
    samples, dataset, lm, base, runs = sim
    key = frozenset(rule_ids)
    if key not in runs:
        runs[key] = run_dataset(with_stage_rules(base, rule_ids), make_judge(lm), dataset, workers=2)
    result = runs[key]
    attributions = attribute_failures(
        result.results, result.graph_by_conversation, {c.id: c for c in dataset.conversations}, excluded
    )
    return result, attributions, planted_questions(samples)


def test_default_prompts_fail_where_planted_and_all_rules_fix_it(sim):
    default, _, planted = sim_run(sim, ())
    fixed, _, _ = sim_run(sim, ALL_RULES)
    low, high = default.report.overall.judge_accuracy, fixed.report.overall.judge_accuracy
    assert high >= 0.9 and high - low >= 0.2, (low, high)
    scored = [r for r in default.results if r.question.category != 5]
    failing = Counter(planted[r.question.id].kind for r in scored if not r.correct)
    assert {"event_date", "third_party", "multi_hop"} <= set(failing)
    without_expansion, _, _ = sim_run(sim, [r for r in ALL_RULES if r != "expand_related"])
    hops = [r.correct for r in without_expansion.results if planted[r.question.id].kind == "multi_hop"]
    assert sum(hops) <= len(hops) // 2  # the second hop is out of reach without the expanded query
    graph = default.graph_by_conversation[sim[1].conversations[0].id]
    assert not any(op.failed for op in graph.operations())
    assert len([v for v in graph.variables() if v.kind == "episode"]) >= 15  # one planted fact, one topic


@pytest.mark.parametrize(
    ("rule_ids", "types"),
    [
        ((), {"ExtractionError", "ResponseError"}),
        (("event_dates", "event_third_party"), {"RetrievalError", "ResponseError"}),
        (("event_dates", "event_third_party", "abstain"), {"RetrievalError", "ResponseError"}),
    ],
    ids=["default", "events-fixed", "events-and-abstain-fixed"],
)
def test_failures_are_attributed_to_the_planted_error_type(sim, rule_ids, types):
    _, attributions, planted = sim_run(sim, rule_ids, excluded=())  # adversarial questions included
    present = set(rule_ids)
    totals, hits = Counter(), Counter()
    for attribution in attributions:
        case = planted[attribution.question_id]
        truth = expected_error(case.kind, case.needs, present)
        totals[truth] += 1
        hits[truth] += attribution.error_type.value == truth
    assert set(totals) == types
    for kind in types:
        assert totals[kind] >= 5 and hits[kind] / totals[kind] >= 0.9, (kind, hits[kind], totals[kind])
    stages = {a.stage for a in attributions}
    # a retrieval miss after an LLM-steered search lands on the steering prompt (query expansion / sufficiency)
    assert stages <= {"write_events", "respond", "retrieve", "expand_queries", "check_sufficiency"}
    assert all(a.tunable == ("knobs" if a.stage == "retrieve" else "prompt") for a in attributions)
    steered = [a for a in attributions if a.error_type.value == "RetrievalError" and a.tunable == "prompt"]
    assert all("steered by" in a.reason for a in steered)


def test_the_diagnoses_point_the_rewriter_at_the_missing_rules_of_the_blamed_stage(sim):
    _, default, _ = sim_run(sim, ())
    _, fixed_events, _ = sim_run(sim, ("event_dates", "event_third_party"))
    system = sim[3]
    for stage, attributions, wanted in (
        ("write_events", default, {"event_dates", "event_third_party"}),
        ("respond", fixed_events, {"use_dates"}),
    ):
        blocks = [feedback_for_attribution(a) for a in attributions if a.stage == stage]
        stand_in_stage = stage_for_outputs(getattr(system, stage).signature.output_fields)
        rewritten = rewrite(system.prompt_set()[stage], fold_feedback(blocks, 4000), stand_in_stage, 2000)
        assert rules_in(rewritten) == wanted, stage
    retrieval = [a for a in fixed_events if a.error_type.value == "RetrievalError"]
    assert retrieval and all([r.id for r in rules_pointed_by(a.reason, "expand_queries")] == ["expand_related"]
                             for a in retrieval)
    dates = [a for a in fixed_events if a.error_type.value == "ResponseError" and "asks when" in a.reason]
    assert dates and all("use_dates" in {r.id for r in rules_pointed_by(a.reason, "answer")} for a in dates)


def test_the_loop_improves_test_accuracy_and_blames_only_stages_the_system_has():
    dataset = sim_dataset(seed=0, n_conversations=8)
    parts = split_by_conversation(dataset, (0.5, 0.25, 0.25), seed=0)
    calls = CallLedger()
    lms = counted_sim_lms(calls)
    system = EverMemOSMemory(HashingEmbedder(), EverMemOSKnobs(tokenizer="approx"))
    system.set_lm(lms.task)
    settings = LoopSettings(max_iterations=4, patience=2, min_gain=0.02, max_candidates=2, workers=2)
    result = OptimizationLoop(
        system, make_judge(lms.judge), build_optimizer("attribution", lms.rewriter, system=system),
        parts,
        settings, calls=calls,
    ).run()
    start, final = result.test_start.report.overall, result.test_final.report.overall
    assert final.judge_accuracy > start.ci_high, (start, final)
    known = set(system.stage_names()) | set(system.non_llm_stages())
    for record in result.iterations[1:]:
        assert {row.stage for row in record.blame.rows} <= known
    assert result.iterations[1].blame.rows[0].stage == "write_events"
    changed = {stage for stage in known if result.final_prompts.instruction_by_stage.get(stage)
               != result.start_prompts.instruction_by_stage.get(stage)}
    assert {"write_events", "respond"} <= changed
    assert {"event_dates", "event_third_party"} <= rules_in(result.final_prompts["write_events"])


@requires(missing_locomo())
def test_a_real_locomo_conversation_runs_end_to_end():
    samples = json.loads(LOCOMO.read_text(encoding="utf-8"))[:1]
    dataset = parse_locomo(samples, str(LOCOMO))
    lm = sim_lm()
    system = build_memory_system({"name": "evermemos"}, HashingEmbedder())
    system.set_lm(lm)
    result = run_dataset(system, make_judge(lm), dataset, workers=4)
    graph = result.graph_by_conversation[dataset.conversations[0].id]
    graph.check()
    assert len(result.results) == len(dataset.questions) and result.counts.failed_operations == 0
    turns = len(dataset.conversations[0].turns)
    episodes = [v for v in graph.variables() if v.kind == "episode"]
    assert 1 < len(episodes) < turns
    covered = [t for v in episodes for t in v.meta["turns"]]
    assert len(covered) == turns and len(set(covered)) == turns  # every turn in exactly one episode
    attributions = attribute_failures(result.results, result.graph_by_conversation,
                                      {c.id: c for c in dataset.conversations}, (5,))
    assert attributions and {a.stage for a in attributions} <= set(system.stage_names()) | {"retrieve"}
