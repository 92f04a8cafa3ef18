"""The closed loop on the simulated world: it must really improve, beat uniform blame at the same
budget, never let a rejected candidate through, keep the test split for the end, resume exactly, and
export prompts that reproduce its numbers."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from itertools import pairwise

import pytest
from memtrace_loop.memory_systems.mem0.system import Mem0Memory
from memtrace_loop.optimizers.base import Candidate, CandidateEvaluation, OptimizationContext
from memtrace_loop.optimizers.registry import build_optimizer
from memtrace_loop.pipeline.analysis.evaluation import paired_difference
from memtrace_loop.pipeline.analysis.judge import make_judge
from memtrace_loop.pipeline.backends.call_count import CallLedger
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.backends.lm import LMSet
from memtrace_loop.pipeline.core.prompt_files import ExportedPrompts, apply_prompts, read_prompts, write_prompts
from memtrace_loop.pipeline.data.splits import Split, split_by_conversation
from memtrace_loop.pipeline.loop.checkpoint import CheckpointError, read_checkpoint
from memtrace_loop.pipeline.loop.optimization import IterationRecord, LoopEvaluator, LoopSettings, OptimizationLoop
from memtrace_loop.pipeline.loop.runner import MemoryCache, run_dataset
from memtrace_loop.pipeline.tracking.loop_observer import TrackingLoopObserver

from tests.support.loops import Interrupted, StopAfter
from tests.support.sim import sim_dataset, sim_lm
from tests.support.tracking import InMemoryTracker

# every test here runs the loop or a whole run (seconds each): out of `make test-fast`
pytestmark = pytest.mark.slow

SETTINGS = LoopSettings(max_iterations=5, patience=2, min_gain=0.02, max_candidates=2, workers=2)


def splits() -> Split:
    dataset = sim_dataset(seed=0, n_conversations=8)
    parts = split_by_conversation(dataset, (0.5, 0.25, 0.25), seed=0)
    return parts


def attribution_optimizer(lm):
    """`optimizer=attribution` built for the loop's system (make_loop's mem0)."""
    return build_optimizer("attribution", lm, system=Mem0Memory(HashingEmbedder()))


def make_loop(optimizer_name: str = "attribution", optimizer=None, **kwargs) -> OptimizationLoop:
    """The loop on the stand-in LM, every role's LM counting into `kwargs["calls"]` (a fresh ledger when
    not given; an `optimizer` passed in counts only what its own LMs count)."""
    calls = kwargs.setdefault("calls", CallLedger())
    # every request made (reply reuse off): these tests count made calls exactly, memory reuse's among
    # them; the loop with reply reuse is tests/e2e/test_reused_replies_loop.py
    lms = calls.counted(LMSet(*(sim_lm(reuse_calls=False),) * 4))
    system = Mem0Memory(HashingEmbedder())
    system.set_lm(lms.task)
    optimizer = optimizer or build_optimizer(optimizer_name, lms.rewriter, system=system)
    return OptimizationLoop(
        system, make_judge(lms.judge), optimizer, splits(), kwargs.pop("settings", SETTINGS), **kwargs
    )


@pytest.fixture(scope="module")
def results():
    return {name: make_loop(name).run() for name in ("attribution", "uniform", "none")}


def gain(result) -> float:
    return result.test_final.report.overall.judge_accuracy - result.test_start.report.overall.judge_accuracy


def test_attribution_improves_test_accuracy_beyond_the_confidence_interval(results):
    result = results["attribution"]
    start, final = result.test_start.report.overall, result.test_final.report.overall
    assert final.judge_accuracy > start.ci_high, (start, final)
    paired = paired_difference(result.test_final.results, result.test_start.results)
    assert paired.ci_low > 0, paired
    assert [o.candidate.changed_stages for r in result.iterations for o in r.outcomes if o.accepted]


def test_unscored_categories_are_answered_only_on_test(results):
    """The adversarial category (5, left out of every score) is never answered on train or dev, where no
    score, attribution or optimizer reads it; the test report still shows it."""
    result = results["attribution"]
    for record in result.iterations:
        for run in (record.train, record.dev):
            assert run.results and all(r.question.category != 5 for r in run.results), record.iteration
    assert any(r.question.category == 5 for r in result.test_final.results)
    assert {q.category for q in splits().dev.questions} >= {5}, "the split itself holds category 5"


def test_uniform_blame_gains_something_but_less_at_the_same_budget(results):
    """The fair rewriter lets the no-attribution baseline learn from symptoms (the demo, same world and
    system, measured attribution +44.9 and uniform +36.8 test points), but its misfires and blind
    rotation leave it behind."""
    attribution, uniform, none = results["attribution"], results["uniform"], results["none"]
    assert gain(uniform) > 0.1, gain(uniform)
    assert gain(attribution) - gain(uniform) >= 0.04, (gain(attribution), gain(uniform))
    assert gain(none) == 0.0 and none.final_prompts == none.start_prompts
    # the same budget: never more candidates per iteration than allowed, never more iterations
    for result in (attribution, uniform):
        assert all(len(r.outcomes) <= SETTINGS.max_candidates for r in result.iterations)
        assert len(result.history) - 1 <= SETTINGS.max_iterations


def test_knob_candidates_fix_retrieval_blamed_failures(results):
    """Six train failures blamed on the search's top_k survived every prompt rewrite; a knob candidate
    (top_k chosen from where the search ranked the evidence) passes the same gate and removes them."""
    result = results["attribution"]
    retrieval = [s.blame.by_stage["retrieve"].count if "retrieve" in s.blame.by_stage else 0 for s in result.history]
    accepted = [c for s in result.history for c in s.candidates if c.accepted and c.knobs]
    assert accepted and accepted[0].stages == ("retrieve",) and accepted[0].knobs["top_k"] > 10
    assert max(retrieval) >= 4 and retrieval[-1] < max(retrieval), retrieval
    assert result.final_knobs["top_k"] == accepted[-1].knobs["top_k"]
    uniform = results["uniform"]
    assert not uniform.final_knobs, "the uniform baseline has no attribution, so no knob candidates"


def test_blame_names_stages_the_system_has(results):
    stages = {"extract", "decide", "respond", "retrieve", "search_similar"}
    for record in results["attribution"].iterations[1:]:
        assert {row.stage for row in record.blame.rows} <= stages
    first = results["attribution"].iterations[1]
    assert first.blame.rows[0].stage == "extract"  # most planted failures are extraction failures


def test_rejected_candidates_never_change_the_current_prompt_set(results):
    for result in results.values():
        records: Sequence[IterationRecord] = result.iterations
        for before, after in pairwise(records):
            expected = before.accepted.candidate.prompts if before.accepted else before.prompts
            assert after.prompts == expected
        last = records[-1]
        expected_final = last.accepted.candidate.prompts if last.accepted else last.prompts
        assert result.final_prompts == expected_final


class _UselessThenGood:
    """Proposes a no-gain candidate first, then the attribution optimizer's candidates."""

    name = "useless-then-good"

    def __init__(self, inner) -> None:
        self.inner = inner

    def propose(self, context: OptimizationContext) -> list[Candidate]:
        useless = Candidate(
            context.prompts.replace(decide=context.prompts["decide"] + " Be concise."), ("decide",), "no-op"
        )
        return [useless, *self.inner.propose(context)]


def test_a_candidate_without_gain_is_rejected_and_the_next_one_tried():
    lm = sim_lm()
    loop = make_loop(optimizer=_UselessThenGood(attribution_optimizer(lm)),
                     settings=replace(SETTINGS, max_iterations=1))
    result = loop.run()
    outcomes = result.iterations[1].outcomes
    assert [o.accepted for o in outcomes] == [False, True]
    assert outcomes[0].gain.mean_difference == 0.0
    assert "Be concise." not in result.final_prompts["decide"]


def test_the_test_split_is_only_evaluated_at_the_end(results):
    for result in results.values():
        splits_in_order = [split for split, _ in result.split_log]
        assert splits_in_order[-2:] == ["test", "test"]
        assert "test" not in splits_in_order[:-2]


def test_built_memories_are_reused_and_the_saved_calls_are_counted_exactly(results, monkeypatch):
    result = results["attribution"]
    assert result.lm_calls_saved > 0 and result.lm_calls_made > 0
    loop = make_loop(memory_cache=MemoryCache(max_entries=0))
    evaluate, graph_made = loop.evaluate, []

    def evaluate_noting_graph_calls(*args, **kwargs):
        run = evaluate(*args, **kwargs)
        graph_made.append(run.counts.calls - run.counts.cached_calls)  # nothing reused: all made here
        return run

    monkeypatch.setattr(loop, "evaluate", evaluate_noting_graph_calls)
    without_reuse = loop.run()
    assert without_reuse.lm_calls_saved == 0
    assert without_reuse.final_prompts == result.final_prompts
    assert without_reuse.lm_calls_made == result.lm_calls_made + result.lm_calls_saved
    # tokens of reused memories are not spent again either
    assert without_reuse.lm_tokens_made > result.lm_tokens_made > 0
    # counted at the LM layer: the task and judge calls the graphs record, plus the rewriter's they never see
    assert without_reuse.calls.made(["task", "judge"]) == sum(graph_made) > 0
    rewriter = without_reuse.calls.made(["rewriter"])
    assert rewriter == result.calls.made(["rewriter"]) > 0  # the same proposals with or without reuse
    assert without_reuse.lm_calls_made == without_reuse.calls.made() == sum(graph_made) + rewriter
    assert without_reuse.calls.cached() == 0





def _without_spent(summary) -> dict:
    return {**summary.to_dict(), "budget_spent": None}


@pytest.mark.parametrize("interrupt_after", [0, 2, 5])  # 5: the checkpoint holds an accepted knob change
def test_an_interrupted_run_resumes_to_the_same_result(results, tmp_path, interrupt_after):
    checkpoint = tmp_path / "checkpoint.json"
    with pytest.raises(Interrupted):
        make_loop(checkpoint=checkpoint, observers=[StopAfter(interrupt_after)], config_digest="cfg").run()
    # the observer interrupts before the checkpoint of that iteration: resume from the one before
    if interrupt_after == 0:
        assert not checkpoint.exists()
        return
    resumed = make_loop(checkpoint=checkpoint, config_digest="cfg").run(resume=read_checkpoint(checkpoint, "cfg"))
    uninterrupted = results["attribution"]
    assert resumed.final_prompts == uninterrupted.final_prompts
    assert resumed.final_knobs == uninterrupted.final_knobs
    assert resumed.test_final.results == uninterrupted.test_final.results
    assert [_without_spent(s) for s in resumed.history] == [_without_spent(s) for s in uninterrupted.history]
    # the spent count continues the checkpoint's; after it, the resumed process rebuilds the memories the
    # interrupted one had cached, which costs calls the uninterrupted run did not spend
    spent = [(s.budget_spent, u.budget_spent) for s, u in zip(resumed.history, uninterrupted.history, strict=True)]
    assert all(r == u for r, u in spent[:interrupt_after]) and all(r >= u for r, u in spent[interrupt_after:])
    with pytest.raises(CheckpointError, match="another configuration"):
        read_checkpoint(checkpoint, "other")


def test_exported_prompts_reproduce_the_final_metrics_exactly(results, tmp_path):
    result = results["attribution"]
    assert result.final_knobs, "the demo should accept a knob change (see the retrieval test)"
    exported = ExportedPrompts.create("mem0", result.final_prompts, source_run="test", knobs=result.final_knobs)
    for suffix in ("json", "yaml"):
        path = write_prompts(exported, tmp_path / f"best.{suffix}")
        lm = sim_lm()
        system = apply_prompts(Mem0Memory(HashingEmbedder()), read_prompts(path))
        system.set_lm(lm)
        again = run_dataset(system, make_judge(lm), splits().test, workers=2)
        assert again.results == result.test_final.results
        assert again.report == result.test_final.report


class _PicksByEvaluating:
    """Scores a no-gain candidate and the attribution optimizer's candidates on the train split through
    the loop's evaluator and proposes only the best one."""

    name = "picks-by-evaluating"

    def __init__(self, inner, evaluate: bool = True) -> None:
        self.inner = inner
        self.evaluate = evaluate
        self.evaluations: list[CandidateEvaluation] = []

    def propose(self, context: OptimizationContext) -> list[Candidate]:
        useless = Candidate(
            context.prompts.replace(decide=context.prompts["decide"] + " Be concise."), ("decide",), "no-op"
        )
        good = list(self.inner.propose(context))[:1]
        if not self.evaluate:
            return good
        assert context.evaluator is not None
        scored = []
        for candidate in (useless, *good):
            evaluation = context.evaluator.evaluate(candidate.prompts, "train")
            self.evaluations.append(evaluation)
            scored.append((evaluation.accuracy, candidate))
        return [max(scored, key=lambda pair: pair[0])[1]]


def test_an_optimizer_can_evaluate_its_own_candidates_and_those_calls_are_counted():
    settings = replace(SETTINGS, max_iterations=1)
    picking = _PicksByEvaluating(attribution_optimizer(sim_lm()))
    picked = make_loop(optimizer=picking, settings=settings).run()
    # the same accepted candidate, proposed without evaluating it first
    direct = make_loop(optimizer=_PicksByEvaluating(
        attribution_optimizer(sim_lm()), evaluate=False),
                       settings=settings).run()

    useless, good = picking.evaluations
    train_ids = {q.id for q in splits().train.questions if q.category != 5}  # the scored ones
    assert set(useless.score_by_question) == set(good.score_by_question) == train_ids
    assert good.accuracy > useless.accuracy and good.split == "train" and good.graph_by_conversation
    (outcome,) = picked.iterations[1].outcomes
    assert outcome.accepted and outcome.candidate.prompts == good.prompts
    assert picked.final_prompts == direct.final_prompts
    # the optimizer's two evaluations; the loop's own train result of iteration 1 is iteration 0's (same prompts)
    assert [s for s, i in picked.split_log if i == 1].count("train") == 2 and picked.train_reused == 1
    assert useless.lm_calls_made > 0 and good.lm_calls_made > 0
    assert picked.lm_calls_made == direct.lm_calls_made + useless.lm_calls_made + good.lm_calls_made


def test_the_evaluator_refuses_the_test_split_and_unknown_questions():
    loop = make_loop()
    evaluator = LoopEvaluator(loop, 1)
    prompts = loop.system.prompt_set()
    with pytest.raises(ValueError, match="not 'test'"):
        evaluator.evaluate(prompts, "test")
    with pytest.raises(ValueError, match="not in the dev split"):
        evaluator.evaluate(prompts, "dev", ["no-such-question"])
    some = [q.id for q in splits().dev.questions[:3]]
    partial = evaluator.evaluate(prompts, "dev", some)
    assert list(partial.score_by_question) == some and partial.lm_calls_made > 0
    assert loop.evaluate(prompts, "dev", 1).results[:3] == partial.results  # built memories reused, same answers


def test_the_loop_observer_logs_every_iteration_through_the_tracker_protocol(results, tmp_path):
    result = results["attribution"]
    secret = result.start_prompts["extract"][:12]
    tracker = InMemoryTracker()
    tracker.open_experiment("in-memory")
    observer = TrackingLoopObserver(tracker, "mem0", [secret])
    with tracker.start_run("optimize") as parent_id:
        for record in result.iterations:
            observer.on_iteration(record)
        observer.on_finish(result)

    parent = tracker.runs[parent_id]
    children = tracker.children(parent_id)
    assert [c.tags["memtrace.iteration"] for c in children] == [str(r.iteration) for r in result.iterations]
    assert [step for _, step in parent.metric("dev/judge_accuracy")] == [r.iteration for r in result.iterations]
    expected = {"history.json", "final_prompts.json", "final_prompts.diff.txt", "plots/scores.png", "plots/blame.png"}
    assert expected <= set(parent.artifacts)
    assert json.loads(parent.text("history.json")) == [s.to_dict() for s in result.history]
    assert parent.metric("test/final/judge_accuracy") == [(result.test_final.report.overall.judge_accuracy, None)]
    questions = json.loads(parent.text("test_questions.json"))  # what the lab's comparison pairs
    counted = [q for q in questions if q["counted"]]
    assert len(questions) == len(result.test_start.results) and len(counted) == result.test_final.report.overall.n
    assert sum(q["final"] for q in counted) / len(counted) == result.test_final.report.overall.judge_accuracy
    assert sum(q["start"] for q in counted) / len(counted) == result.test_start.report.overall.judge_accuracy
    final_chars = sum(len(text) for text in result.final_prompts.instruction_by_stage.values())
    assert parent.metric("prompt_chars/final") == [(float(final_chars), None)]
    assert parent.metric("lm_tokens/made") == [(float(result.lm_tokens_made), None)]
    first = children[1]
    assert {"prompts.json", "blame.json", "attributions.json", "candidates/0-accepted.diff.txt"} <= set(first.artifacts)
    assert first.metric("loop/accepted") == [(1.0, 1)]
    accepted_first = result.iterations[1].accepted
    assert first.params["iteration"] == "1" and first.params["accepted"] != "none"  # what tells iterations apart
    assert first.params["stage"] == ",".join(accepted_first.candidate.changed_stages)
    assert first.params[f"candidate.{first.params['accepted']}.verdict"] == "accepted"
    assert first.params["blamed_stage"] == result.iterations[1].blame.rows[0].stage
    assert children[0].params["candidates"] == "0" and children[0].params["stage"] == "none"  # the baseline
    table = json.loads(first.text("attributions.json"))
    assert {"check", "joint", "alternatives", "cost_lm_calls", "replay_calls"} <= set(table)
    assert len(table["check"]) == len(result.iterations[1].attributions) > 0
    assert first.metric("attribution/verified_share") == [(0.0, 1)]  # the default attributor verifies nothing
    assert first.metric("attribution/count") == [(float(len(result.iterations[1].attributions)), 1)]
    accepted = [r for r in result.iterations if r.accepted is not None]
    assert [prompts for _, prompts, _, _ in parent.registered] == [r.accepted.candidate.prompts for r in accepted]
    logged = [run.text(path) for run in tracker.runs.values() for path, v in run.artifacts.items()
              if isinstance(v, str)]
    assert not any(secret in text for text in logged) and any("***" in text for text in logged)
