"""The loop's budget in LM calls: `LoopBudget`, the one record of what a run has spent and may spend.

It keeps every counter of LM calls across resumes: the ledger's tally when the run began, the calls per
role and the budget calls spent before a resume, the calls kept out of the budget (an audit, re-establishing
dev at resume), and whether the budget cut the loop. Budget calls are task + rewriter + attributor calls
made (`BUDGET_ROLES`; the judge is the measuring instrument), plus those DSPy's cache served when
`counts_cached`; `limit` 0 is no budget. It is the `CallBudget` an optimizer reads, from any thread. It
neither counts calls (the `CallLedger` does) nor decides when a step starts (the loop asks `exhausted()`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from memtrace_loop.pipeline.backends.call_count import BUDGET_ROLES, CallLedger, CallTally

__all__ = ["LoopBudget"]


class LoopBudget:
    def __init__(self, calls: CallLedger, limit: int = 0, counts_cached: bool = True) -> None:
        if limit < 0:
            raise ValueError(f"budget_calls must be >= 0 (0: no budget), got {limit}")
        self.calls = calls
        self.limit = limit
        self.counts_cached = counts_cached
        self.begin()

    def begin(self, before: CallTally | None = None) -> None:
        """Count from now: a run starts (`before`: the calls per role its checkpoint recorded)."""
        self._tally_base = self.calls.tally()
        self._calls_before = before or CallTally()
        self._spent_base, self._spent_offset, self.cut = self._count(), 0, False

    def continue_from(self, spent: int) -> None:
        """A resumed run goes on from the `spent` its checkpoint recorded; calls until now are not counted."""
        self._spent_base, self._spent_offset = self._count(), spent

    def _count(self) -> int:
        total = self.calls.tally().total(BUDGET_ROLES)
        return total.made + (total.cached if self.counts_cached else 0)

    def spent(self) -> int:
        """Budget calls spent since the run started, across resumes."""
        return self._spent_offset + self._count() - self._spent_base

    def remaining(self) -> int | None:
        """Budget calls left (None: no budget)."""
        return max(0, self.limit - self.spent()) if self.limit else None

    def tally(self) -> CallTally:
        """LM calls per role since the run started, across resumes."""
        return self._calls_before + (self.calls.tally() - self._tally_base)

    def exhausted(self) -> bool:
        """True (and remembered in `cut`, the reason to stop) once the budget is set and spent."""
        if self.limit and self.spent() >= self.limit:
            self.cut = True
        return self.cut

    @contextmanager
    def uncounted(self) -> Iterator[None]:
        """The calls made inside are kept out of the budget (a screened-out candidate's audit)."""
        start = self.spent()
        try:
            yield
        finally:
            self._spent_offset -= self.spent() - start
