"""The optimization loop on the simulated world with the run's replies reused (`lm.<role>.reuse_calls`)
and without: the same iterations, prompts and scores (the stand-in is deterministic, so a reused reply is
the reply a call would have got), fewer calls made. Every call of the run without reuse is made or reused
in the run with it, none is lost or added."""

from __future__ import annotations

from dataclasses import replace

import pytest
from memtrace_loop.memory_systems.mem0.system import Mem0Memory
from memtrace_loop.optimizers.registry import build_optimizer
from memtrace_loop.pipeline.analysis.judge import make_judge
from memtrace_loop.pipeline.backends.call_count import BUDGET_ROLES, CallLedger
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.backends.lm import LMConfig, LMSet
from memtrace_loop.pipeline.backends.registry import build_lm
from memtrace_loop.pipeline.data.splits import split_by_conversation
from memtrace_loop.pipeline.loop.optimization import LoopResult, LoopSettings, OptimizationLoop
from memtrace_loop.pipeline.loop.summaries import IterationSummary

from tests.support.sim import sim_dataset

pytestmark = pytest.mark.slow

SETTINGS = LoopSettings(max_iterations=2, patience=2, min_gain=0.02, max_candidates=2, workers=2)


def run_loop(reuse: bool) -> LoopResult:
    calls = CallLedger()
    lm = build_lm(LMConfig(backend="sim", model="stand-in", cache=False, reuse_calls=reuse))
    lms = calls.counted(LMSet(lm, lm, lm, lm))  # one run: the four roles share its store of replies
    system = Mem0Memory(HashingEmbedder())
    system.set_lm(lms.task)
    parts = split_by_conversation(sim_dataset(seed=0, n_conversations=6), (0.5, 0.25, 0.25), seed=0)
    optimizer = build_optimizer("attribution", lms.rewriter, system=system)
    loop = OptimizationLoop(system, make_judge(lms.judge), optimizer, parts,
                            SETTINGS, calls=calls)
    return loop.run()


def uncosted(summary: IterationSummary) -> IterationSummary:
    """An iteration's digest without what it cost in calls (what reuse changes)."""
    candidates = tuple(replace(c, screen_calls=0, full_calls=0) for c in summary.candidates)
    return replace(summary, budget_spent=0, candidates=candidates)


def scores(result: LoopResult) -> list[tuple[str, float]]:
    return [(r.question.id, r.scores.judge) for r in (*result.test_start.results, *result.test_final.results,
                                                      *result.dev_final.results)]


def test_reusing_replies_changes_the_calls_made_and_nothing_else() -> None:
    on, off = run_loop(reuse=True), run_loop(reuse=False)
    assert on.final_prompts == off.final_prompts and on.final_prompts != on.start_prompts
    assert scores(on) == scores(off)
    # every iteration alike (blame, every candidate, its gain and the gate's decision), but the calls spent
    assert [uncosted(h) for h in on.history] == [uncosted(h) for h in off.history]
    assert on.stop_reason == off.stop_reason
    for role in ("task", "judge"):
        with_reuse, without = on.calls.role(role), off.calls.role(role)
        assert without.reused == 0 and with_reuse.reused > 0, role
        assert with_reuse.made + with_reuse.reused == without.made, role  # each call made or reused
        assert with_reuse.cached == without.cached == 0
    assert on.budget_spent < off.budget_spent  # the budget counts made calls, never reused ones
    saved = off.calls.made(BUDGET_ROLES) - on.calls.made(BUDGET_ROLES)
    assert saved == on.calls.reused(BUDGET_ROLES) > 0
