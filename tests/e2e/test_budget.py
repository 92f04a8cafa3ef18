"""`loop.budget_calls`: every optimizer stops at the budget, by the exact rule — no step starts once
`spent >= budget`, the step that crosses it is finished, so `spent <= budget + that step's calls` — and
the final test evaluation is outside it. Calls reusing built memories are counted apart (saved)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

import pytest
from memtrace_loop.memory_systems.mem0.system import Mem0Memory
from memtrace_loop.optimizers.base import Candidate, OptimizationContext
from memtrace_loop.optimizers.registry import build_optimizer
from memtrace_loop.pipeline.analysis.judge import make_judge
from memtrace_loop.pipeline.backends.call_count import BUDGET_ROLES, CallLedger
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.backends.lm import LMSet
from memtrace_loop.pipeline.data.splits import split_by_conversation
from memtrace_loop.pipeline.loop.checkpoint import Checkpoint, read_checkpoint
from memtrace_loop.pipeline.loop.optimization import LoopSettings, OptimizationLoop

from tests.support.loops import Interrupted, StopAfter
from tests.support.sim import sim_dataset, sim_lm

pytestmark = pytest.mark.slow

SETTINGS = LoopSettings(max_iterations=10, patience=10, min_gain=0.02, max_candidates=2, workers=2)


@dataclass
class Steps:
    """(kind, budget spent before, after) of every step the loop ran, in order."""

    rows: list[tuple[str, int, int]] = field(default_factory=list)


class _StepLoggingLoop(OptimizationLoop):
    """The real loop, noting the budget spent around each evaluation (a step, or part of iteration 0)."""

    steps: Steps

    def evaluate(self, prompts, split, iteration, dataset=None, knobs=None):
        before = self.budget.spent()
        result = super().evaluate(prompts, split, iteration, dataset, knobs=knobs)
        self.steps.rows.append((f"{split}@{iteration}", before, self.budget.spent()))
        return result


class _StepLoggingOptimizer:
    """The real optimizer, noting the budget spent around its proposal (a step); with `useless_first`,
    a no-gain candidate goes first (rejected by the gate, so the next one would be evaluated)."""

    def __init__(self, inner, steps: Steps, useless_first: bool = False) -> None:
        self.inner, self.steps, self.name, self.useless_first = inner, steps, inner.name, useless_first
        self.budgets: list[object] = []

    def propose(self, context: OptimizationContext):
        self.budgets.append(context.budget)
        before = context.budget.spent() if context.budget else 0
        candidates = list(self.inner.propose(context))
        if self.useless_first:
            useless = context.prompts.replace(decide=context.prompts["decide"] + " Be concise.")
            candidates = [Candidate(useless, ("decide",), "no-op"), *candidates]
        after = context.budget.spent() if context.budget else 0
        self.steps.rows.append((f"propose@{context.iteration}", before, after))
        return candidates


def run(name: str, budget: int, max_iterations: int = 10, useless_first: bool = False, resume: Checkpoint | None = None,
        **kwargs):
    ledger = CallLedger()
    lms = ledger.counted(LMSet(*(sim_lm(reuse_calls=False) for _ in range(4))))  # the budgets below: calls made
    system = Mem0Memory(HashingEmbedder())
    system.set_lm(lms.task)
    dataset = sim_dataset(seed=0, n_conversations=8)
    parts = split_by_conversation(dataset, (0.5, 0.25, 0.25), seed=0)
    steps = Steps()
    optimizer = _StepLoggingOptimizer(build_optimizer(name, lms.rewriter, system=system), steps, useless_first)
    loop = _StepLoggingLoop(
        system, make_judge(lms.judge), optimizer, parts,
        replace(SETTINGS, budget_calls=budget, max_iterations=max_iterations), calls=ledger, **kwargs,
    )
    loop.steps = steps
    return loop.run(resume=resume), steps, ledger, optimizer


def crossing_budget(steps: Steps, kind: str) -> int:
    """A budget that the first step of `kind` in iteration 1 crosses (one call after it started)."""
    before = next(b for k, b, _ in steps.rows if k == kind)
    return before + 1


@pytest.mark.parametrize(("name", "crossing", "useless_first"), [
    # crossed by the first (rejected) candidate's dev evaluation: the next candidate is never evaluated
    ("attribution", "dev@1", True),
    ("attribution", "propose@1", False),
    ("uniform", "propose@1", False),  # crossed by the rewriter's proposal: no candidate is evaluated
    # crossed by the train evaluation after iteration 1's acceptance (an unchanged prompt set's train result is
    # reused, never re-evaluated): nothing after it runs
    ("attribution", "train@2", False),
])
def test_every_optimizer_stops_at_the_budget_by_the_exact_overshoot_rule(name, crossing, useless_first):
    # what each step costs (deterministic: the same calls in the same order)
    _, probe_steps, _, _ = run(name, budget=0, max_iterations=2, useless_first=useless_first)
    budget = crossing_budget(probe_steps, crossing)
    result, steps, ledger, optimizer = run(name, budget, useless_first=useless_first)

    assert result.stop_reason == "budget"
    budget_steps = [row for row in steps.rows if not row[0].startswith("test@")]
    started_after_spent = [row for row in budget_steps[2:] if row[1] >= budget]  # [:2] is iteration 0
    assert started_after_spent == [], started_after_spent
    kind, before, after = budget_steps[-1]
    assert kind == crossing and before < budget <= after  # the last step is the one that crossed it
    assert result.budget_spent == after <= budget + (after - before)
    # the probe ran the very same first steps: the budgeted run stopped exactly after the crossing one
    probe = [row for row in probe_steps.rows if not row[0].startswith("test@")]
    assert budget_steps == probe[: len(budget_steps)]
    # the test evaluation ran after, outside the budget, and its calls are still reported as made
    assert [row[0] for row in steps.rows[-2:]] == [f"test@{result.iterations[-1].iteration}"] * 2
    assert ledger.tally().made(BUDGET_ROLES) > result.budget_spent
    assert result.calls.made() == ledger.tally().made() == result.lm_calls_made
    assert all(b is not None and b.remaining() is not None for b in optimizer.budgets)
    assert result.history[-1].budget_spent == result.budget_spent
    if crossing == "dev@1":
        (outcome,) = result.iterations[1].outcomes  # the second candidate was proposed but not evaluated
        assert not outcome.accepted and outcome.candidate.rationale == "no-op"
        assert len([row for row in probe if row[0] == "dev@1"]) >= 2  # without the budget it was evaluated


def test_gepa_stops_inside_its_own_search_at_the_loop_budget():
    """GEPA searches inside one proposal; the loop's budget (its `CallBudget`) stops that search between
    GEPA's steps, so a budget smaller than what one unbudgeted proposal spends cuts the search short."""
    probe, _, _, _ = run("gepa", budget=0, max_iterations=1)
    start, full = probe.history[0].budget_spent, probe.history[1].budget_spent
    assert full - start > 100, "an unbudgeted GEPA proposal should spend real calls"
    budget = start + (full - start) // 3
    result, _, ledger, optimizer = run("gepa", budget, max_iterations=3)
    assert result.stop_reason == "budget"
    assert budget <= result.history[1].budget_spent < full  # iteration 1's search was cut short
    assert len(result.history) == 2  # and no later iteration started
    assert all(b is not None and b.remaining() is not None for b in optimizer.budgets)
    assert result.calls.made() == ledger.tally().made() == result.lm_calls_made


def test_without_a_budget_the_loop_stops_by_patience_or_iterations_and_counts_saved_calls_apart():
    result, _, _, optimizer = run("attribution", budget=0, max_iterations=2)
    assert result.stop_reason in ("patience", "max_iterations")
    assert all(b.remaining() is None for b in optimizer.budgets)
    tally = result.calls
    assert result.lm_calls_saved > 0  # reused memories saved calls ...
    assert tally.cached() == 0  # ... which are not cache hits (this LM has no response cache) ...
    assert tally.made() == result.lm_calls_made > 0  # ... and not made
    assert tally.made(["rewriter"]) > 0 and tally.made(["judge"]) > 0 and tally.made(["attributor"]) == 0
    assert [r.budget_spent for r in result.iterations] == sorted(r.budget_spent for r in result.iterations)


def test_the_loop_needs_a_ledger_and_a_budget_must_not_be_negative():
    """The ledger is the one count of LM calls (there is no other to fall back on), so it is required."""
    lm = sim_lm()
    system = Mem0Memory(HashingEmbedder())
    system.set_lm(lm)
    dataset = sim_dataset(seed=0, n_conversations=4)
    parts = split_by_conversation(dataset, (0.5, 0.25, 0.25), seed=0)
    splits = parts
    with pytest.raises(TypeError, match="calls"):
        OptimizationLoop(system, make_judge(lm), build_optimizer("none", lm), splits, SETTINGS)
    with pytest.raises(ValueError, match="budget_calls must be >= 0"):
        OptimizationLoop(system, make_judge(lm), build_optimizer("none", lm), splits,
                         replace(SETTINGS, budget_calls=-1), calls=CallLedger())





def test_a_resumed_run_continues_the_budget_its_checkpoint_recorded(tmp_path):
    _, probe_steps, _, _ = run("attribution", budget=0, max_iterations=2)
    budget = crossing_budget(probe_steps, "train@2") if any(k == "train@2" for k, *_ in probe_steps.rows) else 0
    assert budget
    checkpoint = tmp_path / "checkpoint.json"
    with pytest.raises(Interrupted):
        run("attribution", budget, checkpoint=checkpoint, observers=[StopAfter(2)])
    recorded = json.loads(checkpoint.read_text())["budget_spent"]
    assert recorded == budget - 1  # spent by the end of iteration 1, just before train@2 started

    resumed, steps, _, _ = run("attribution", budget, resume=read_checkpoint(checkpoint, None), checkpoint=checkpoint)
    assert resumed.stop_reason == "budget" and [s.iteration for s in resumed.history] == [0, 1, 2]
    kind, before, after = [row for row in steps.rows if not row[0].startswith("test@")][-1]
    assert kind == "train@2" and before == recorded  # the dev re-evaluation at resume was not counted
    assert resumed.budget_spent == after >= budget
