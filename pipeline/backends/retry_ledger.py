"""Counting LM retries per role and cause for a run: `RetryLedger` (thread-safe) and its snapshot.

The retry loop (`pipeline.backends.resilience.RetryLoop`) records one entry per retry it decides to
make (a wait that follows a failed attempt), by role and cause (`rate_limited`, `server_error`,
`timeout`, `connection`, `malformed`). An entry point creates one ledger per run, passes it to
`build_lm_set(..., retries=ledger)` and logs the tally to MLflow as `lm_retries/<role>` and
`lm_retries/<role>/<cause>` (`pipeline.tracking.run_logging.retry_metrics`). It does not retry, log or
decide anything.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = ["RetryLedger", "RetryTally"]


@dataclass(frozen=True)
class RetryTally:
    """Retries per role and cause (a snapshot). Roles or causes not present count 0."""

    count_by_cause_by_role: Mapping[str, Mapping[str, int]] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        frozen = {role: MappingProxyType(dict(causes)) for role, causes in self.count_by_cause_by_role.items()}
        object.__setattr__(self, "count_by_cause_by_role", MappingProxyType(frozen))

    def role(self, role: str) -> int:
        """All retries of `role`."""
        return sum(self.count_by_cause_by_role.get(role, {}).values())

    def cause(self, role: str, cause: str) -> int:
        return self.count_by_cause_by_role.get(role, {}).get(str(cause), 0)

    @property
    def total(self) -> int:
        return sum(self.role(role) for role in self.count_by_cause_by_role)


class RetryLedger:
    """Thread-safe retry counts of one run (shared by every LM built with it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count_by_cause_by_role: dict[str, dict[str, int]] = {}

    def __copy__(self) -> RetryLedger:
        return self

    def __deepcopy__(self, memo: dict[int, object]) -> RetryLedger:
        return self  # a deep-copied program (GEPA does that) keeps counting into the same ledger

    def record(self, role: str, cause: str) -> None:
        with self._lock:
            causes = self._count_by_cause_by_role.setdefault(role, {})
            causes[str(cause)] = causes.get(str(cause), 0) + 1

    def tally(self) -> RetryTally:
        with self._lock:
            return RetryTally({role: dict(causes) for role, causes in self._count_by_cause_by_role.items()})
