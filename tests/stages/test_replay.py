"""Replay verification on the simulated world: memory rebuilt from graphs, only the repaired stage and
what lies downstream called again, a check on every attribution, and blame that lands where a repair
rescues."""

from __future__ import annotations

import collections
from dataclasses import replace
from functools import cache

import pytest
from memtrace_loop.memory_systems.answering import RESPOND_STAGE
from memtrace_loop.memory_systems.base import ReplayUnsupportedError
from memtrace_loop.memory_systems.registry import SYSTEMS, build_memory_system, spec_of
from memtrace_loop.memory_systems.spec import Replay
from memtrace_loop.pipeline.analysis.attribution.lineage import LineageAttributor
from memtrace_loop.pipeline.analysis.attribution.protocol import TracedRun, attribute_run
from memtrace_loop.pipeline.analysis.attribution.records import Check, ErrorType, Tunable
from memtrace_loop.pipeline.analysis.attribution.repairs import (
    Repair,
    answer_fault,
    answer_repairable,
    plan_repair,
    reader_faults,
    widen_spec,
)
from memtrace_loop.pipeline.analysis.attribution.replay import Replayer, widened, with_stage_defaults
from memtrace_loop.pipeline.analysis.attribution.verification import Verifier, VerifyingAttributor
from memtrace_loop.pipeline.analysis.blame import aggregate_blame
from memtrace_loop.pipeline.analysis.judge import make_judge
from memtrace_loop.pipeline.backends.embeddings import build_embedder
from memtrace_loop.pipeline.core.conventions import NEAR_MISSES, query_name
from memtrace_loop.pipeline.core.tracing import Tracer
from memtrace_loop.pipeline.loop.runner import run_dataset

from tests.support.sim import sim_dataset, sim_lm

pytestmark = pytest.mark.usefixtures("lm_history")  # replays' calls are read from `lm.history`

# input fields only construction stages have: a replay sends one only to re-run a blamed stage with a hint
CONSTRUCTION_FIELDS = ("[[ ## turn ## ]]", "[[ ## new_facts ## ]]", "[[ ## turns ## ]]", "[[ ## new_turn ## ]]")
SEED = 23  # not a seed other attribution tests use


@cache
def traced(system_name: str, **knobs: int):
    lm = sim_lm()
    system = build_memory_system({"name": system_name, **knobs}, build_embedder({}))
    system.set_lm(lm)
    judge = make_judge(lm)
    data = sim_dataset(seed=SEED, n_conversations=3)
    result = run_dataset(system, judge, data, workers=1)
    run = TracedRun(result.results, result.graph_by_conversation, {c.id: c for c in data.conversations}, (5,))
    return lm, system, judge, data, result, run


@cache
def verified_attributions(system_name: str, **knobs: int) -> tuple:
    """Every failure of `traced(system_name, **knobs)` attributed with replay verification (computed once)."""
    _, system, judge, _, _, run = traced(system_name, **knobs)
    return tuple(attribute_run(VerifyingAttributor(LineageAttributor(), Verifier(system, judge)), run))


@pytest.mark.parametrize("system_name", SYSTEMS.names)
def test_memory_rebuilt_from_the_graph_retrieves_what_the_run_retrieved(system_name):
    _, system, _, data, result, _ = traced(system_name)
    if spec_of(system_name).replay == Replay.NONE:  # e.g. a user's system answers in one call: said plainly
        with pytest.raises(ReplayUnsupportedError, match="cannot rebuild its memory"):
            system.restore(next(iter(result.graph_by_conversation.values())))
        return
    state_by_graph = {cid: system.restore(graph) for cid, graph in result.graph_by_conversation.items()}
    for question in data.questions[:25]:
        graph = result.graph_by_conversation[question.conversation_id]
        found = system.retrieve(question, state_by_graph[question.conversation_id], Tracer(graph, buffered=True))
        (answered,) = [op for op in graph.operations()  # the context the run's answer read (per question or shared)
                       if op.stage == RESPOND_STAGE and graph.variable(op.inputs[0]).name == query_name(question.id)]
        assert found.context == graph.variable(answered.inputs[1]).value, question.id


@pytest.mark.parametrize("system_name", [n for n, spec in SYSTEMS.items() if spec.construction_stages])
def test_replay_spends_only_downstream_calls_and_marks_every_attribution(system_name):
    lm, system, judge, _, _, run = traced(system_name)
    before = len(lm.history)
    checked = attribute_run(VerifyingAttributor(LineageAttributor(), Verifier(system, judge)), run)
    requests = lm.history[before:]
    assert checked and all(a.check != Check.UNCHECKED for a in checked)
    assert sum(a.cost.replay_calls for a in checked) >= len(requests) > 0  # asked >= made (cache hits)
    for request in requests:
        text = " ".join(str(m.get("content", "")) for m in request["messages"])
        if any(field in text for field in CONSTRUCTION_FIELDS):  # a blamed stage called again, with its hint
            assert "Make sure your output keeps this information:" in text, text[:300]


def test_replay_leaves_the_graph_unchanged():
    _, system, judge, _, result, run = traced("mem0")
    sizes = {cid: (g.n_variables, g.n_operations) for cid, g in result.graph_by_conversation.items()}
    attribute_run(VerifyingAttributor(LineageAttributor(), Verifier(system, judge)), run)
    assert sizes == {cid: (g.n_variables, g.n_operations) for cid, g in result.graph_by_conversation.items()}


def test_evermemos_with_top_k_1_verified_blame_lands_on_the_retrieval_knob():
    checked = verified_attributions("evermemos", top_k=1)
    retrieval = [a for a in checked if a.error_type == ErrorType.RETRIEVAL and a.verified]
    assert len(retrieval) >= 5
    assert all(a.stage == "retrieve" and a.tunable == Tunable.KNOBS for a in retrieval)
    assert not any(a.stage in ("check_sufficiency", "expand_queries") for a in checked if a.verified)


def test_long_context_with_a_small_window_verified_blame_lands_on_trimming():
    _, system, judge, _, _, run = traced("long_context", window_tokens=800)
    checked = attribute_run(VerifyingAttributor(LineageAttributor(), Verifier(system, judge)), run)
    verified = collections.Counter(a.stage for a in checked if a.verified)
    assert verified["trim"] >= 0.7 * len(checked)
    assert verified.most_common(1)[0][0] == "trim"


def test_joint_causes_name_the_decisive_set_and_split_the_blame():
    checked = verified_attributions("evermemos", top_k=1)
    joint = [a for a in checked if a.joint]
    assert joint, "no joint cause found where a single repair does not rescue"
    for found in joint:
        assert found.verified is True and len(found.joint) >= 2
        assert [f.seq for f in found.joint] == sorted(f.seq for f in found.joint)
        assert found.op == found.joint[0].op and "together" in found.reason
    table = aggregate_blame(joint[:1])
    assert sum(row.weight for row in table.rows) == pytest.approx(1.0)
    assert len(table.rows) == len({f.stage for f in joint[0].joint})


def test_rag_with_tiny_chunks_verified_blame_lands_on_chunking():
    checked = verified_attributions("rag", max_chunk_tokens=24)
    verified = collections.Counter(a.stage for a in checked if a.verified)
    assert verified.most_common(1)[0][0] == "chunk"
    chunking = [a for a in checked if a.stage == "chunk"]
    assert all(a.tunable == Tunable.KNOBS and a.error_type == ErrorType.EXTRACTION for a in chunking)


def test_a_knob_rebuild_resets_only_the_blamed_stage_and_calls_no_llm_before_answering():
    lm, system, judge, _, result, run = traced("long_context", window_tokens=800)
    replayer = Replayer(system, judge)
    trimmed = next(a for a in attribute_run(LineageAttributor(), run) if a.stage == "trim")
    graph = result.graph_by_conversation[trimmed.case.question.conversation_id]
    before = len(lm.history)
    plan = plan_repair(system, graph, trimmed.suspects[0])
    assert plan is not None and plan.kind == Repair.REBUILD
    outcome = replayer.replay(graph, trimmed, (plan,))
    assert outcome.rescued and outcome.calls == len(lm.history) - before == 2  # respond + judge
    assert with_stage_defaults(system, "trim").knobs.window_tokens == 32768
    assert with_stage_defaults(system, "context") is None


def test_an_answer_blame_whose_context_lacks_the_evidence_is_never_verified_on_the_answer_stage():
    _, system, judge, _, result, run = traced("rag", top_k=1)
    verifier = Verifier(system, judge)
    misses = []
    for found in (a for a in attribute_run(LineageAttributor(), run) if a.error_type == ErrorType.RETRIEVAL):
        graph = result.graph_by_conversation[found.case.question.conversation_id]
        answer = answer_fault(graph, found)
        if answer is not None and not answer_repairable(graph, found, answer):  # no evidence line in the context
            misses.append((found, graph, answer))
    assert len(misses) >= 3
    for found, graph, answer in misses[:6]:
        blamed = replace(found, op=answer.op, op_name=answer.op_name, stage=answer.stage,
                         error_type=ErrorType.RESPONSE, suspects=())
        checked = verifier.verify(graph, blamed)
        # no gold answer stands in for a repair: the answer stage cannot be verified, another stage may
        assert checked.check in (Check.UNVERIFIABLE, Check.VERIFIED)
        if checked.check == Check.VERIFIED:  # by another stage's repair, alone or with the answer's
            causes = [c.stage for c in checked.causes()]
            assert causes != ["respond"] and checked.stage != "respond", checked.reason


def test_a_run_checks_at_most_max_checked_failures_spread_over_the_blamed_stages():
    lm, system, judge, _, _, run = traced("evermemos", top_k=1)
    plain = attribute_run(LineageAttributor(), run)
    before = len(lm.history)
    checked = attribute_run(VerifyingAttributor(LineageAttributor(), Verifier(system, judge)), run, max_checked=4)
    assert len(plain) > 4 and len(checked) == len(plain)
    tried = [a for a in checked if a.check != Check.UNCHECKED]
    assert len(tried) == 4
    blamed = {a.stage for a in plain}  # before any replay moved a blame
    sampled_stages = {p.stage for p, a in zip(plain, checked, strict=True) if a.check != Check.UNCHECKED}
    assert len(sampled_stages) == min(len(blamed), 4)
    assert all(a.cost.replay_calls == 0 for a in checked if a.check == Check.UNCHECKED)
    assert 0 < len(lm.history) - before <= sum(a.cost.replay_calls for a in tried)


def test_the_search_that_finds_how_deep_to_widen_is_the_replays_own_when_made_at_that_depth():
    """A widening replay searches to see how deep the repaired units rank (`Replayer._reaching`). When
    that search was made at the depth it settles on, it is the replay's search (not made again: with
    EverMemOS's query expansion, one LM call less); when a deeper cut is needed, the replay searches anew."""
    _, system, _, data, result, _ = traced("evermemos")
    question = data.questions[0]
    graph = result.graph_by_conversation[question.conversation_id]
    state, k = system.restore(graph), 3
    widened_system, probe = Replayer._reaching(system, question, state, Tracer(graph, buffered=True), set(), k)
    fresh = (widened(system, k) or system).retrieve(question, state, Tracer(graph, buffered=True))
    assert probe is not None and probe.context == fresh.context  # what it holds already: the search at k
    tracer = Tracer(graph, buffered=True)
    (widened(system, k) or system).retrieve(question, state, tracer)
    near = tracer.pending_operation(widen_spec(system).name)["meta"][NEAR_MISSES]
    deeper = {tracer.value_of(near[-1])}  # ranked below the cut: the replay needs a deeper search
    widened_system, probe = Replayer._reaching(system, question, state, Tracer(graph, buffered=True), deeper, k)
    assert probe is None and widened_system is not system


def test_a_chunking_stage_off_its_defaults_is_a_suspect_replay_tries_once_and_only_then():
    for knobs, expected in (({"max_chunk_tokens": 24}, ["chunk"]), ({}, [])):
        _, system, _, _, result, run = traced("rag", **knobs)
        blamed = next(a for a in attribute_run(LineageAttributor(), run) if a.evidence)
        graph = result.graph_by_conversation[blamed.case.question.conversation_id]
        faults = reader_faults(system, graph, blamed)
        assert [f.stage for f in faults] == expected  # one per stage, though each evidence turn has its chunk
        assert all(f.tunable == Tunable.KNOBS and f.error_type == ErrorType.EXTRACTION for f in faults)
        plans = [plan_repair(system, graph, f) for f in faults]
        assert all(p is not None and p.kind == Repair.REBUILD for p in plans)


def test_a_retrieval_blame_the_widened_search_does_not_rescue_moves_to_the_chunking_that_does():
    checked = verified_attributions("rag", max_chunk_tokens=24)
    moved = [a for a in checked if a.stage == "chunk" and a.verified and "retrieve" in a.reason]
    assert moved, [(a.stage, a.check.value, a.reason[:80]) for a in checked]
    assert not [a for a in checked if a.stage == "retrieve" and a.verified is False]  # none left refuted
