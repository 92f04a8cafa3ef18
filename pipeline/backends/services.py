"""What every LM of one run shares: `RunServices` (stop token, ledger, local servers, reply store).

`RunLedger` holds the run's counts: LM calls per role (`CallLedger`), retries per role and cause
(`RetryLedger`, logged as `lm_retries/<role>/<cause>`), the finally failed calls (`FailureGuard`) and
the empty replies cut at `max_tokens` (`MaxTokensGuard`). `RunServices` is what an app hands to the
builders (`stop` None: cannot be stopped; `servers` None: a `local` LM cannot be built). Frozen records
of thread-safe objects; they start nothing and log nothing (the entry point owns the servers).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from memtrace_loop.pipeline.backends.call_count import CallLedger, CallTally, ReplyStore
from memtrace_loop.pipeline.backends.failure_guard import FailureGuard, MaxTokensGuard
from memtrace_loop.pipeline.backends.lm import Shared
from memtrace_loop.pipeline.backends.local_server import LocalServers
from memtrace_loop.pipeline.core.stop import StopToken

__all__ = ["RetryLedger", "RetryTally", "RunLedger", "RunServices"]


@dataclass(frozen=True)
class RetryTally:
    """Retries per role and cause (a snapshot). Roles or causes not present count 0."""

    count_by_cause_by_role: Mapping[str, Mapping[str, int]] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        frozen = {role: MappingProxyType(dict(causes)) for role, causes in self.count_by_cause_by_role.items()}
        object.__setattr__(self, "count_by_cause_by_role", MappingProxyType(frozen))

    def role(self, role: str) -> int:
        return sum(self.count_by_cause_by_role.get(role, {}).values())

    def cause(self, role: str, cause: str) -> int:
        return self.count_by_cause_by_role.get(role, {}).get(str(cause), 0)

    @property
    def total(self) -> int:
        return sum(self.role(role) for role in self.count_by_cause_by_role)


class RetryLedger(Shared):
    """Thread-safe retry counts of one run (one per wait the retry loop decides on)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, dict[str, int]] = {}

    def record(self, role: str, cause: str) -> None:
        with self._lock:
            causes = self._counts.setdefault(role, {})
            causes[str(cause)] = causes.get(str(cause), 0) + 1

    def tally(self) -> RetryTally:
        with self._lock:
            return RetryTally({role: dict(causes) for role, causes in self._counts.items()})


@dataclass(frozen=True)
class RunLedger:
    """Calls, retries and failures of one run (each part thread-safe and shared by every LM of the run)."""

    calls: CallLedger = field(default_factory=CallLedger)
    retries: RetryLedger = field(default_factory=RetryLedger)
    guard: FailureGuard = field(default_factory=FailureGuard)
    max_tokens: MaxTokensGuard = field(default_factory=MaxTokensGuard)

    @classmethod
    def with_failure_limit(cls, max_failed_share: float) -> RunLedger:
        return cls(guard=FailureGuard(max_failed_share))

    def call_tally(self) -> CallTally:
        return self.calls.tally()

    def retry_tally(self) -> RetryTally:
        return self.retries.tally()


@dataclass(frozen=True)
class RunServices:
    """The stop token, the ledger, the local servers and the store of replies of one run."""

    stop: StopToken | None = None
    ledger: RunLedger = field(default_factory=RunLedger)
    servers: LocalServers | None = None
    replies: ReplyStore = field(default_factory=ReplyStore)
