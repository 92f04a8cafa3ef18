"""The per-run services every LM of one run shares: `RunLedger` and `RunServices`.

`RunLedger` is the one per-run ledger: the LM calls made and served from the cache per role
(`CallLedger`), the retries per role and cause (`RetryLedger`), the finally failed calls that stop a
run which mostly fails (`FailureGuard`) and the empty replies cut at `max_tokens` that stop a run
whose limit is too small (`MaxTokensGuard`). `RunServices` is what an app hands to the builders instead of
five loose arguments: the run's `StopToken` (None: cannot be stopped), its ledger and its local model
servers (`LocalServers`, None: a `local` LM cannot be built) and its store of LM replies (`ReplyStore`:
a request already answered in the run is answered from it by every LM whose `reuse_calls` is on). Both
are frozen records of long-lived, thread-safe objects; they start nothing and log nothing (the entry
point owns the servers' lifetime).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memtrace_loop.pipeline.backends.call_count import CallLedger, CallTally
from memtrace_loop.pipeline.backends.call_reuse import ReplyStore
from memtrace_loop.pipeline.backends.failure_guard import FailureGuard
from memtrace_loop.pipeline.backends.local_server import LocalServers
from memtrace_loop.pipeline.backends.reply_check import MaxTokensGuard
from memtrace_loop.pipeline.backends.retry_ledger import RetryLedger, RetryTally
from memtrace_loop.pipeline.core.stop import StopToken

__all__ = ["RunLedger", "RunServices"]


@dataclass(frozen=True)
class RunLedger:
    """Calls, retries and failures of one run (each part thread-safe and shared by every LM of the run)."""

    calls: CallLedger = field(default_factory=CallLedger)
    retries: RetryLedger = field(default_factory=RetryLedger)
    guard: FailureGuard = field(default_factory=FailureGuard)
    max_tokens: MaxTokensGuard = field(default_factory=MaxTokensGuard)

    @classmethod
    def with_failure_limit(cls, max_failed_share: float) -> RunLedger:
        """A fresh ledger whose guard stops the run once more than `max_failed_share` of its calls failed."""
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
