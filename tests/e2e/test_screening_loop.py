"""Candidate screening in the closed loop (sim world, mem0): a screened-out candidate costs only its
screen and never reaches the gate's whole-dev evaluation; the audit switch evaluates screened-out
candidates fully without changing a decision or the budget; the gate's rule is the same for every
candidate it evaluates fully; GEPA's per-question dev scoring goes through the same screen."""

from __future__ import annotations

from dataclasses import replace

import pytest
from memtrace_loop.memory_systems.mem0.system import Mem0Memory
from memtrace_loop.optimizers.base import Candidate, OptimizationContext
from memtrace_loop.optimizers.registry import build_optimizer
from memtrace_loop.pipeline.analysis.judge import make_judge
from memtrace_loop.pipeline.backends.call_count import CallLedger
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.backends.lm import LMSet
from memtrace_loop.pipeline.data.splits import split_by_conversation
from memtrace_loop.pipeline.loop.costs import candidate_costs
from memtrace_loop.pipeline.loop.optimization import LoopEvaluator, LoopSettings, OptimizationLoop
from memtrace_loop.pipeline.loop.screening import ScreenSettings

from tests.support.sim import sim_dataset, sim_lm

pytestmark = pytest.mark.slow

SETTINGS = LoopSettings(max_iterations=2, patience=2, min_gain=0.02, max_candidates=3, workers=2)


class _UselessFirst:
    """The attribution optimizer's candidates after two that cannot help: an answer-stage no-op and a
    decide-stage no-op (each changes a prompt's wording, not what the stage does)."""

    name = "attribution"

    def __init__(self, inner) -> None:
        self.inner = inner

    def propose(self, context: OptimizationContext):
        prompts = context.prompts
        noops = [Candidate(prompts.replace(**{stage: prompts[stage] + " Be concise."}), (stage,), f"no-op {stage}")
                 for stage in ("respond", "decide")]
        return [*noops, *self.inner.propose(context)]


def _loop(screen: ScreenSettings, optimizer_name: str = "attribution", useless_first: bool = True,
          reuse_calls: bool = False):
    calls = CallLedger()
    # calls made compared: by default without reply reuse (lm.<role>.reuse_calls), every request made
    lms = calls.counted(LMSet(*(sim_lm(reuse_calls=reuse_calls),) * 4))
    system = Mem0Memory(HashingEmbedder())
    system.set_lm(lms.task)
    parts = split_by_conversation(sim_dataset(seed=0, n_conversations=8), (0.5, 0.25, 0.25), seed=0)
    optimizer = build_optimizer(optimizer_name, lms.rewriter, system=system)
    optimizer = _UselessFirst(optimizer) if useless_first else optimizer
    return OptimizationLoop(system, make_judge(lms.judge), optimizer, parts,
                            replace(SETTINGS, screen=screen), calls=calls)


@pytest.fixture(scope="module")
def runs():
    return {name: _loop(screen).run() for name, screen in (
        ("off", ScreenSettings(enabled=False)), ("on", ScreenSettings()), ("audit", ScreenSettings(audit=True)),
    )}


def test_a_screened_out_candidate_costs_only_its_screen(runs):
    outcomes = runs["on"].iterations[1].outcomes
    useless = [o for o in outcomes if o.candidate.rationale.startswith("no-op")]
    assert len(useless) == 2 and all(o.screened_out and not o.accepted for o in useless)
    assert all(o.full_calls == 0 for o in useless)
    ran = [o for o in useless if o.screen is not None and o.screen.verdict.questions]
    assert ran and all(o.screen.calls > 0 for o in ran)
    scored = runs["on"].iterations[1].dev.report.overall.n
    assert all(o.screen.verdict.questions < scored for o in ran)  # never the whole dev split
    # the same candidates evaluated fully without the screen cost more
    off = {o.candidate.rationale: o for o in runs["off"].iterations[1].outcomes}
    assert all(o.calls < off[o.candidate.rationale].calls for o in useless)


def test_screening_changes_no_decision_and_spends_less(runs):
    on, off = runs["on"], runs["off"]
    assert on.final_prompts == off.final_prompts
    assert [[o.accepted for o in r.outcomes] for r in on.iterations] == \
        [[o.accepted for o in r.outcomes] for r in off.iterations]
    assert on.budget_spent < off.budget_spent
    accepted = [o for r in on.iterations for o in r.outcomes if o.accepted]
    for outcome in accepted:  # passed its screen, then the gate's own rule on the whole dev split
        assert outcome.screen is None or outcome.screen.verdict.passed
        assert outcome.full_calls > 0 and outcome.gain.n == on.iterations[1].dev.report.overall.n


def test_the_audit_evaluates_screened_out_candidates_fully_outside_the_budget(runs):
    audit, on = runs["audit"], runs["on"]
    assert audit.final_prompts == on.final_prompts
    assert [s.budget_spent for s in audit.history] == [s.budget_spent for s in on.history]
    assert audit.calls.made() > on.calls.made()  # the audit's calls were made, not counted in the budget
    costs = candidate_costs(audit.history, SETTINGS.min_gain)
    assert costs.audited == costs.screened_out >= 2 and costs.audit_would_pass == 0
    useless = [o for o in audit.iterations[1].outcomes if o.screened_out]
    assert all(o.audit is not None and o.audit.n == audit.iterations[1].dev.report.overall.n for o in useless)


def test_a_screened_out_candidates_dev_questions_are_answered_from_its_screen_and_the_incumbent():
    """An optimizer's per-question dev scoring (GEPA's valset) of a screened-out prompt set runs nothing past
    its screen: screened questions get the screen's result, the others the incumbent's."""
    loop = _loop(ScreenSettings(), useless_first=False)
    start = loop.system.prompt_set()
    dev = loop.evaluate(start, "dev", 0)
    screens = loop.screens(dev, 1)
    evaluator = LoopEvaluator(loop, 1, {}, start, screens)
    noop = start.replace(respond=start["respond"] + " Be concise.")
    spent = loop.budget.spent()
    cases = [evaluator.run_case(evaluator.system(noop), "dev", r.question.id) for r in dev.results]
    outcome = screens.outcome(noop, {}, ("respond",))  # the one the first case ran, kept
    assert outcome is not None and not outcome.verdict.passed
    assert loop.budget.spent() - spent == outcome.calls > 0  # nothing beyond the screen
    screened = {r.question.id: r for r in outcome.run.results} if outcome.run is not None else {}
    assert screened
    for case, incumbent in zip(cases, dev.results, strict=True):
        assert case.lm_calls_made == 0
        assert case.case is screened.get(incumbent.question.id, incumbent)
    assert evaluator.run_case(evaluator.system(start), "dev", dev.results[0].question.id).lm_calls_made > 0


def test_gepa_with_and_without_the_screen_ends_the_same():
    """GEPA's valset questions go through the loop's Evaluator: the same result with and without the screen
    (the stand-in is deterministic), no more budget calls with it."""
    # with reply reuse: without it the screened run spends more here (3505 vs 3448 budget calls, for the lead)
    results = {enabled: _loop(ScreenSettings(enabled=enabled), "gepa", useless_first=False, reuse_calls=True).run()
               for enabled in (True, False)}
    assert results[True].final_prompts == results[False].final_prompts
    assert results[True].budget_spent <= results[False].budget_spent
