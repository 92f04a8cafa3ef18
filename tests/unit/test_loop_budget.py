"""`LoopBudget`, the one record of the loop's budget: budget calls are task + rewriter + attributor calls
made (and served by DSPy's cache when counted), never the judge's; a resumed run continues its
checkpoint's spent count without the calls of re-establishing dev; an audit's calls stay out of it; once
spent, the budget cuts the loop and stays cut."""

from __future__ import annotations

from typing import Any, cast

import pytest
from memtrace_loop.pipeline.backends.call_count import CallTally, RoleCalls
from memtrace_loop.pipeline.loop.budget import LoopBudget


class Ledger:
    """A call ledger whose tally the test sets (the real one counts the LMs' calls)."""

    def __init__(self) -> None:
        self.by_role: dict[str, RoleCalls] = {}

    def call(self, role: str, made: int = 0, cached: int = 0) -> None:
        before = self.by_role.get(role, RoleCalls())
        self.by_role[role] = RoleCalls(made=before.made + made, cached=before.cached + cached)

    def tally(self) -> CallTally:
        return CallTally(dict(self.by_role))


def budget(limit: int = 0, counts_cached: bool = True) -> tuple[LoopBudget, Ledger]:
    ledger = Ledger()
    ledger.call("task", made=100)  # before the run: not this run's
    return LoopBudget(cast(Any, ledger), limit, counts_cached), ledger


def test_budget_calls_are_the_budget_roles_made_and_cached_calls_since_the_run_began() -> None:
    spent, ledger = budget(limit=10)
    ledger.call("task", made=3, cached=2)
    ledger.call("judge", made=50)  # the measuring instrument
    ledger.call("rewriter", made=1)
    assert spent.spent() == 6 and spent.remaining() == 4 and not spent.exhausted()
    assert spent.tally().made() == 54  # every role's calls are in the tally
    uncached, ledger = budget(limit=10, counts_cached=False)
    ledger.call("task", made=3, cached=2)
    assert uncached.spent() == 3


def test_a_resumed_run_continues_the_checkpoints_count_and_tally() -> None:
    spent, ledger = budget(limit=50)
    spent.begin(CallTally({"task": RoleCalls(made=40)}))
    ledger.call("task", made=7)  # re-establishing dev at resume: outside the budget
    spent.continue_from(20)
    ledger.call("attributor", made=5)
    assert spent.spent() == 25 and spent.tally().made() == 52


def test_an_audit_is_kept_out_of_the_budget_and_a_spent_budget_stays_cut() -> None:
    spent, ledger = budget(limit=5)
    with spent.uncounted():
        ledger.call("task", made=9)
    assert spent.spent() == 0 and spent.tally().made() == 9
    ledger.call("task", made=5)
    assert spent.exhausted() and spent.cut and spent.remaining() == 0
    assert LoopBudget(cast(Any, ledger)).remaining() is None  # 0: no budget
    with pytest.raises(ValueError, match="budget_calls must be >= 0"):
        LoopBudget(cast(Any, ledger), -1)
