"""The guards that stop a run whose LM calls fail, and the rule that ends a finished one.

One failing LM call is a failed operation, scored as a wrong answer, and the run goes on. When most
calls fail (a broken endpoint, an endless rate limit) the numbers measure the outage: `FailureGuard`
counts the logical calls that finally failed against all, and raises `TooManyFailures` once at least
`min_calls` were made and the failed share is above `max_failed_share`; from then on every call raises
it, so parallel workers stop too. `MaxTokensGuard` raises `MaxTokensTooSmall` at the third empty reply
cut at `max_tokens` of a role. Both are thread-safe, one per run (`pipeline.backends.services.RunLedger`).

Below the bound the run goes to its end, and `failed_calls_outcome` says what ends it (docs/usage.md
"Exit codes"): none failed, a success; some, `FinishedWithFailedCalls` (exit 3, the MLflow run FAILED)
unless `allow_failed_calls=true`. They do not retry and know no more of a failure than its one line.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

from memtrace_loop.pipeline.backends.lm import Shared
from memtrace_loop.pipeline.core.stop import MaxTokensTooSmall, TooManyFailures

if TYPE_CHECKING:  # call_count imports the LMs, which import this module
    from memtrace_loop.pipeline.backends.call_count import CallTally

__all__ = [
    "MAX_FAILED_SHARE", "MAX_TOKENS_STOPS_AFTER", "FailedCalls", "FailureCounts", "FailureGuard",
    "FinishedWithFailedCalls", "MaxTokensGuard", "failed_calls_outcome",
]

MAX_FAILED_SHARE = 0.5  # the default: a run stops once more than half of its LM calls finally failed
MAX_TOKENS_STOPS_AFTER = 3  # empty replies cut at max_tokens in one run before it stops


@dataclass(frozen=True)
class FailureCounts:
    calls: int = 0
    failed: int = 0

    @property
    def share(self) -> float:
        return self.failed / self.calls if self.calls else 0.0


class FailureGuard(Shared):
    """Raises `TooManyFailures` once more than `max_failed_share` of at least `min_calls` calls failed."""

    def __init__(self, max_failed_share: float = MAX_FAILED_SHARE, min_calls: int = 20) -> None:
        if not 0.0 <= max_failed_share <= 1.0:
            raise ValueError(f"max_failed_share must be between 0 and 1, got {max_failed_share}")
        if min_calls < 1:
            raise ValueError(f"min_calls must be at least 1, got {min_calls}")
        self.max_failed_share = float(max_failed_share)
        self.min_calls = int(min_calls)
        self._lock = threading.Lock()
        self._counts = FailureCounts()
        self._tripped: TooManyFailures | None = None
        self._last_error = ""

    def check(self) -> None:
        """Raise `TooManyFailures` if the guard has tripped (call before starting a new LM call)."""
        with self._lock:
            tripped = self._tripped
        if tripped is not None:
            raise TooManyFailures(tripped.failed, tripped.total, tripped.bound, self._last_error)

    def record(self, *, failed: bool, error: str = "") -> None:
        """Count one finished logical call; raise `TooManyFailures` when the guard has tripped."""
        with self._lock:
            counts = self._counts = FailureCounts(self._counts.calls + 1, self._counts.failed + int(failed))
            if failed and error:
                self._last_error = error
            over = counts.calls >= self.min_calls and counts.failed > self.max_failed_share * counts.calls
            if self._tripped is None and over:
                self._tripped = TooManyFailures(counts.failed, counts.calls, self.max_failed_share, self._last_error)
        self.check()

    def counts(self) -> FailureCounts:
        with self._lock:
            return self._counts


class MaxTokensGuard(Shared):
    """Counts empty replies cut at `max_tokens` in one run; the third of a role raises `MaxTokensTooSmall`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count_by_role: dict[str, int] = {}

    def record(self, role: str, max_tokens: int | None) -> None:
        with self._lock:
            count = self._count_by_role[role] = self._count_by_role.get(role, 0) + 1
        if count >= MAX_TOKENS_STOPS_AFTER:
            raise MaxTokensTooSmall(role, max_tokens, count)

    def count(self, role: str) -> int:
        with self._lock:
            return self._count_by_role.get(role, 0)


@dataclass(frozen=True)
class FailedCalls:
    """A run's final LM-call failures: `counts` as the guard saw them (logical calls made, finally
    failed) and the failed calls per role (roles with none left out)."""

    counts: FailureCounts
    by_role: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    max_failed_share: float = MAX_FAILED_SHARE

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_role", MappingProxyType({r: n for r, n in self.by_role.items() if n}))

    @classmethod
    def of(cls, guard: FailureGuard, tally: CallTally) -> FailedCalls:
        """The guard's counts (this process) and the ledger's per-role failures (across resumes, when a
        checkpoint carried them): the larger of each count."""
        counts = guard.counts()
        total = tally.total()
        return cls(FailureCounts(max(counts.calls, total.made), max(counts.failed, total.failed)),
                   {role: calls.failed for role, calls in tally.by_role.items()}, guard.max_failed_share)

    @property
    def failed(self) -> int:
        return max(self.counts.failed, sum(self.by_role.values()))

    def __bool__(self) -> bool:
        return self.failed > 0

    def summary(self) -> str:
        """`3 of 120 LM calls finally failed (2.5%; task 2, judge 1; allowed up to 50%, max_failed_share)`."""
        roles = ", ".join(f"{role} {n}" for role, n in self.by_role.items())
        calls = max(self.counts.calls, self.failed)
        share = 100 * self.failed / calls if calls else 0.0
        return (f"{self.failed} of {calls} LM calls finally failed ({share:.1f}%{'; ' + roles if roles else ''}; "
                f"a run stops above {100 * self.max_failed_share:.0f}%, max_failed_share)")


class FinishedWithFailedCalls(Exception):
    """The run went to its end, but some LM calls finally failed: its numbers are partly those of the
    failures. `str()` is the one line shown to the user; the exit code is 3."""


def failed_calls_outcome(failed: FailedCalls, *, allowed: bool, impact: str = "") -> FinishedWithFailedCalls | None:
    """What ends a finished run (the documented rule): None when no call finally failed or failed calls
    are `allowed`, else the `FinishedWithFailedCalls` to raise, naming the count, `impact` (what the
    failures did to the scores, one clause) and how to accept such runs."""
    if not failed or allowed:
        return None
    clause = f"; {impact}" if impact else ""
    return FinishedWithFailedCalls(
        f"finished with failed LM calls: {failed.summary()}{clause}; results saved and logged, the MLflow run "
        "marked FAILED (allow_failed_calls=true accepts such a run: exit 0)"
    )
