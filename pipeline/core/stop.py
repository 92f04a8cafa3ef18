"""Stopping a run on purpose: the exceptions that end a run and the token that asks it to stop.

`RunStopped` derives from `BaseException`, so the `except Exception` that keeps one failing stage from
crashing a run lets it through: `Interrupted`, `EndpointUnusable`, `TooManyFailures`, `MaxTokensTooSmall`.
`StopToken` is the thread-safe flag an entry point sets from its signal handler. No global state.
"""

from __future__ import annotations

import threading


class RunStopped(BaseException):
    """The run must end now; `str()` is the one-line cause shown to the user."""


class Interrupted(RunStopped):
    """A stop was requested (Ctrl-C, SIGTERM)."""


class EndpointUnusable(RunStopped):
    """An endpoint cannot serve this run (wrong key, unknown model, unreachable, rate-limited too long);
    `endpoint` is scrubbed of credentials."""

    def __init__(self, role: str, endpoint: str, cause: str) -> None:
        self.role = role
        self.endpoint = endpoint
        self.cause = cause
        super().__init__(f"lm.{role} endpoint {endpoint}: {cause}")


class TooManyFailures(RunStopped):
    """More than the allowed share of LM calls failed (after retries)."""

    def __init__(self, failed: int, total: int, bound: float, last_error: str = "") -> None:
        self.failed = failed
        self.total = total
        self.bound = bound
        detail = f"; last error: {last_error}" if last_error else ""
        super().__init__(
            f"{failed} of {total} LM calls failed ({100 * failed / max(total, 1):.0f}%), more than the allowed "
            f"{100 * bound:.0f}% (max_failed_share){detail}"
        )


class MaxTokensTooSmall(RunStopped):
    """`count` replies of `role` came back empty, cut at `max_tokens` (finish_reason "length")."""

    def __init__(self, role: str, max_tokens: int | None, count: int) -> None:
        self.role = role
        self.max_tokens = max_tokens
        self.count = count
        limit = (f"lm.{role}.max_tokens={max_tokens}" if max_tokens is not None
                 else f"the server's default limit (lm.{role}.max_tokens is unset)")
        bigger = 4 * max_tokens if max_tokens is not None else 4096
        replies = "reply" if count == 1 else "replies"
        super().__init__(
            f"lm.{role}: {count} {replies} came back empty, cut at {limit} (finish_reason \"length\", e.g. a "
            f"reasoning model that spent the budget thinking); raise it, e.g. lm.{role}.max_tokens={bigger}"
        )


class StopToken:
    """A one-way, thread-safe stop flag with the reason it was set."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._reason = ""

    def request(self, reason: str = "interrupted") -> None:
        if not self._event.is_set():
            self._reason = reason
            self._event.set()

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    @property
    def reason(self) -> str:
        return self._reason

    def check(self) -> None:
        """Raise `Interrupted` if a stop was requested (call before starting any new piece of work)."""
        if self._event.is_set():
            raise Interrupted(self._reason or "interrupted")

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`, waking early when a stop is requested; True if it was."""
        return self._event.wait(max(0.0, seconds))
