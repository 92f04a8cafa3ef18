"""Stopping a run whose LM calls mostly fail: `FailureGuard`.

One failing LM call is a failed operation, scored as a wrong answer, and the run goes on. When most
calls fail (a broken endpoint, a model that refuses every request, a rate limit that never ends) the
run's numbers measure the outage, not the memory system: the guard counts, per run, the logical LM
calls that finally failed (after the retries of `pipeline.backends.resilience`) against all logical
calls, and raises `TooManyFailures` (a `RunStopped`, which ends the run) once at least `min_calls`
calls were made and the failed share is above `max_failed_share`. From then on every call raises it
again, so parallel workers stop too. Thread-safe; one guard per run, shared by every LM of the run
(`build_lm_set(..., guard=guard)`). It does not retry and does not know why a call failed beyond the
one-line description it is given (already free of secrets).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from memtrace_loop.pipeline.core.stop import TooManyFailures

__all__ = ["MAX_FAILED_SHARE", "FailureCounts", "FailureGuard"]

MAX_FAILED_SHARE = 0.5  # the default: a run stops once more than half of its LM calls finally failed


@dataclass(frozen=True)
class FailureCounts:
    calls: int = 0
    failed: int = 0

    @property
    def share(self) -> float:
        return self.failed / self.calls if self.calls else 0.0


class FailureGuard:
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

    def __copy__(self) -> FailureGuard:
        return self

    def __deepcopy__(self, memo: dict[int, object]) -> FailureGuard:
        return self

    def check(self) -> None:
        """Raise `TooManyFailures` if the guard has tripped (call before starting a new LM call)."""
        with self._lock:
            tripped = self._tripped
        if tripped is not None:
            raise TooManyFailures(tripped.failed, tripped.total, tripped.bound, self._last_error)

    def record(self, *, failed: bool, error: str = "") -> None:
        """Count one finished logical call; raise `TooManyFailures` when this call trips the guard."""
        with self._lock:
            self._counts = FailureCounts(self._counts.calls + 1, self._counts.failed + int(failed))
            if failed and error:
                self._last_error = error
            counts = self._counts
            if (
                self._tripped is None
                and counts.calls >= self.min_calls
                and counts.failed > self.max_failed_share * counts.calls
            ):
                self._tripped = TooManyFailures(counts.failed, counts.calls, self.max_failed_share, self._last_error)
            tripped = self._tripped
        if tripped is not None:
            raise TooManyFailures(tripped.failed, tripped.total, tripped.bound, self._last_error)

    def counts(self) -> FailureCounts:
        with self._lock:
            return self._counts
