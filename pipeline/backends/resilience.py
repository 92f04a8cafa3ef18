"""Bounded, visible retries of one logical LM call: the policy, what counts as transient, the loop.

DSPy's own retry loop sleeps a server's `Retry-After` uncapped and logs nothing, so the project's LMs
run with DSPy's `num_retries=0` and retry here instead (inside the engine, `pipeline.backends.
guarded_engine`, so a retried call is still ONE call for DSPy's callbacks, its cache and
`pipeline.backends.call_count`). The rules of `RetryPolicy`:

- at most `num_retries` retries after the first attempt;
- transient (`classify` -> `Transient`): HTTP 429, 5xx, 408, timeouts, connection errors, HTTP 200
  replies whose body is not JSON, truncated or empty, or carries no choice or no message
  (`MalformedReply`, cause `malformed`), and replies with no answer in them (`EmptyReply`, cause
  `empty_reply`; `pipeline.backends.reply_check` decides);
- an empty reply that stopped at the token limit (`EmptyAtMaxTokens`, finish_reason "length") is NOT
  transient: the same `max_tokens` gives the same outcome, so the call fails at once;
- the wait before a retry is the server's `Retry-After` when it gives one, else 1, 2, 4, ... s capped
  at `retry_after_cap_s`; a `Retry-After` longer than the cap is never waited: the call fails at once
  with `RetryAfterTooLong` (a rate limit longer than allowed);
- `deadline_s` bounds the whole logical call: no attempt starts and no wait ends after it, and each
  attempt is given the deadline (`run(attempt)` calls `attempt(deadline)`, a `time.monotonic()` value)
  so the engine cuts a reply still arriving at it (`pipeline.backends.http_transport`; an async attempt
  is cancelled at it here); passing it fails the call with `DeadlinePassed`;
- fatal (`classify` -> `Fatal`): 401/403 (authentication), 404 (model or path), billing/quota. The
  caller turns them into `EndpointUnusable`, which ends the run (`pipeline.core.stop`);
- a `StopToken` is checked before every attempt and wakes every wait, so no new request starts after
  a stop was requested (`Interrupted`);
- a caller may name failures that end the call at once (`final`: the preflight's connection refused
  by a local endpoint, `connection_refused`): re-raised at that attempt, with no retry, wait or warning.

Every retry is logged at WARNING (role, scrubbed endpoint, attempt n/N, cause, seconds to wait) before
its wait, and counted in a `RetryLedger` (`pipeline.backends.retry_ledger`). Errors it creates carry no
secret: details taken from a provider's message go through the caller's `scrub` first, and a client
library's advice to its own users ("raise it with Timeouts(read=...)") is replaced by the key our user
sets (`our_hint`: `lm.<role>.timeout_s`).

It does not know DSPy, HTTP or any engine: it runs a callable and reads the lm15 error it raised.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

from dspy import lm15
from memtrace_loop.pipeline.backends.retry_ledger import RetryLedger
from memtrace_loop.pipeline.backends.retry_policy import RetryPolicy
from memtrace_loop.pipeline.core.stop import Interrupted, StopToken

logger = logging.getLogger(__name__)

__all__ = [
    "DeadlinePassed",
    "EmptyAtMaxTokens",
    "EmptyReply",
    "Fatal",
    "MalformedReply",
    "RetryAfterTooLong",
    "RetryCause",
    "RetryLoop",
    "RetryPolicy",
    "Transient",
    "classify",
    "connection_refused",
    "our_hint",
]

T = TypeVar("T")

_MAX_DETAIL_CHARS = 160
_STOP_POLL_S = 0.05  # how often an async wait looks at the stop token


class RetryCause(StrEnum):
    """Why an attempt is retried (the ledger counts retries by these)."""

    RATE_LIMITED = "rate_limited"
    SERVER_ERROR = "server_error"
    TIMEOUT = "timeout"
    CONNECTION = "connection"
    MALFORMED = "malformed"
    EMPTY_REPLY = "empty_reply"


class FatalKind(StrEnum):
    AUTH = "auth"
    NOT_FOUND = "not_found"
    BILLING = "billing"


@dataclass(frozen=True)
class Transient:
    cause: RetryCause
    detail: str  # one short line (HTTP status, exception kind, first line of the message)
    retry_after: float | None = None


@dataclass(frozen=True)
class Fatal:
    kind: FatalKind
    status: int | None
    detail: str


class MalformedReply(lm15.ProviderError):
    """An HTTP 200 reply that is no completion (not a JSON object, no choice, no message): retried."""


class EmptyReply(lm15.ProviderError):
    """An HTTP 200 completion with no answer in it (content null, empty or blank): retried."""


class EmptyAtMaxTokens(lm15.ProviderError):
    """An empty completion that stopped at the token limit (finish_reason "length"): not retried."""

    def __init__(self, message: str, *, status: int | None = 200, max_tokens: int | None = None) -> None:
        super().__init__(message, status=status)
        self.max_tokens = max_tokens


class RetryAfterTooLong(lm15.RateLimitError):
    """The server asked to wait longer than `retry_after_cap_s`; the call fails without waiting."""


class DeadlinePassed(lm15.TimeoutError):
    """The logical call's `deadline_s` passed before it succeeded (attempts and waits included)."""


def _first_line(text: str) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= _MAX_DETAIL_CHARS else line[: _MAX_DETAIL_CHARS - 1] + "…"


def _detail(exc: BaseException) -> str:
    status = getattr(exc, "status", None)
    message = _first_line(getattr(exc, "message", None) or str(exc))
    head = f"HTTP {status}" if isinstance(status, int) else type(exc).__name__
    return f"{head}: {message}" if message else head


def classify(exc: BaseException) -> Transient | Fatal | None:
    """What a failed attempt means: transient (retry), fatal (the endpoint is unusable) or None (a
    failure of this call only: an invalid request, a context too long, a bug)."""
    status = getattr(exc, "status", None)
    status = status if isinstance(status, int) else None
    detail = _detail(exc)
    if isinstance(exc, lm15.BillingError):
        return Fatal(FatalKind.BILLING, status, detail)
    if isinstance(exc, lm15.AuthError) or status in (401, 403):
        return Fatal(FatalKind.AUTH, status, detail)
    if status == 404:
        return Fatal(FatalKind.NOT_FOUND, status, detail)
    retry_after = getattr(exc, "retry_after", None)
    retry_after = float(retry_after) if isinstance(retry_after, (int, float)) and retry_after >= 0 else None
    if isinstance(exc, lm15.RateLimitError) or status == 429:
        return Transient(RetryCause.RATE_LIMITED, detail, retry_after)
    if isinstance(exc, lm15.TimeoutError | builtins.TimeoutError) or status == 408:
        return Transient(RetryCause.TIMEOUT, detail, retry_after)
    if isinstance(exc, lm15.ServerError) or (status is not None and status >= 500):
        return Transient(RetryCause.SERVER_ERROR, detail, retry_after)
    if isinstance(exc, lm15.TransportError):
        timed_out = "timed out" in str(exc).lower() or "timeout" in str(exc).lower()
        return Transient(RetryCause.TIMEOUT if timed_out else RetryCause.CONNECTION, detail)
    if isinstance(exc, EmptyReply):
        return Transient(RetryCause.EMPTY_REPLY, detail)
    if isinstance(exc, MalformedReply) or (
        type(exc) is lm15.ProviderError and (status is None or 200 <= status < 300)
    ):  # lm15 raises a bare ProviderError for a 2xx body that is not JSON (truncated, empty, HTML)
        return Transient(RetryCause.MALFORMED, detail)
    return None


def connection_refused(exc: BaseException) -> bool:
    """Whether `exc` or an error it was raised from is a refused connection (nothing listens there)."""
    link: BaseException | None = exc
    seen: set[int] = set()
    while link is not None and id(link) not in seen:
        if isinstance(link, ConnectionRefusedError):
            return True
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    return False


_LIBRARY_HINTS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"this is lm15's read timeout, not a server failure\s*[—-]+\s*raise it with Timeouts\(read=\.\.\.\)"
                r"(?: if the model needs longer)?"),
     "the client's read timeout: raise lm.{role}.timeout_s if the model needs longer"),
    (re.compile(r"raise max_connections, or Timeouts\(pool=\.\.\.\) to wait longer"),
     "lm.{role}.timeout_s bounds this wait"),
    (re.compile(r"Timeouts\((?:read|write|connect|pool)=[^)]*\)"), "lm.{role}.timeout_s"),
)


def our_hint(text: str, role: str) -> str:
    """`text` with a client library's advice to its own users ("raise it with Timeouts(read=...)")
    replaced by the config key our user sets (`lm.<role>.timeout_s`)."""
    for pattern, replacement in _LIBRARY_HINTS:
        text = pattern.sub(replacement.format(role=role), text)
    return text


def scrubbed(exc: BaseException, scrub: Callable[[str], str]) -> BaseException:
    """`exc` (an error of one attempt, about to leave the loop) with `scrub` applied to its message
    and arguments; an error chain that would show a secret when printed is cut."""
    if isinstance(getattr(exc, "message", None), str):
        exc.message = scrub(exc.message)  # type: ignore[attr-defined]
    exc.args = tuple(scrub(arg) if isinstance(arg, str) else arg for arg in exc.args)
    link: BaseException | None = exc.__cause__ or exc.__context__
    while link is not None:
        if scrub(str(link)) != str(link):
            exc.__cause__ = None
            exc.__suppress_context__ = True
            break
        link = link.__cause__ or link.__context__
    return exc


class RetryLoop:
    """Runs the attempts of one logical call under a `RetryPolicy` for one role and endpoint.

    `on_fatal(fatal)` must raise (the engine raises `EndpointUnusable`); `scrub` masks secrets in any
    text taken from a provider's message before it is logged or put in an error; a transient failure
    `final` accepts is re-raised at once (no retry, no wait, no warning: the caller explains it)."""

    def __init__(
        self,
        policy: RetryPolicy,
        *,
        role: str,
        endpoint: str,
        on_fatal: Callable[[Fatal], None],
        stop: StopToken | None = None,
        ledger: RetryLedger | None = None,
        scrub: Callable[[str], str] = lambda text: text,
        clock: Callable[[], float] = time.monotonic,
        final: Callable[[BaseException], bool] | None = None,
    ) -> None:
        self.policy = policy
        self.role = role
        self.endpoint = endpoint
        self.on_fatal = on_fatal
        self.stop = stop
        self.ledger = ledger
        self.scrub: Callable[[str], str] = lambda text: our_hint(scrub(text), role)
        self.clock = clock
        self.final = final

    # ------------------------------------------------------------------ the decision
    def _check_stop(self) -> None:
        if self.stop is not None:
            self.stop.check()

    def _wait_after(self, exc: Exception, attempt: int, deadline: float) -> float:
        """Seconds to wait before the next attempt, or raise: the failure is final (re-raised, or a
        `RetryAfterTooLong` / `DeadlinePassed` naming the bound), fatal (`on_fatal`) or not transient."""
        verdict = classify(exc)
        if isinstance(verdict, Fatal):
            self.on_fatal(Fatal(verdict.kind, verdict.status, self.scrub(verdict.detail)))
            raise AssertionError("on_fatal must raise")  # pragma: no cover
        if verdict is None or (self.final is not None and self.final(exc)):
            raise scrubbed(exc, self.scrub)
        detail = self.scrub(verdict.detail)
        policy = self.policy
        if self.clock() >= deadline:  # the engine cut this attempt at the deadline
            logger.warning(
                "lm.%s %s: attempt %d/%d failed (%s: %s) at deadline_s=%g; the call fails",
                self.role, self.endpoint, attempt, policy.attempts, verdict.cause, detail, policy.deadline_s,
            )
            raise self._deadline_error(attempt, f"{verdict.cause}: {detail}")
        if verdict.retry_after is not None and verdict.retry_after > policy.retry_after_cap_s:
            logger.warning(
                "lm.%s %s: rate limited for longer than allowed: the server asked to wait %g s "
                "(retry_after_cap_s=%g); the call fails without waiting",
                self.role, self.endpoint, verdict.retry_after, policy.retry_after_cap_s,
            )
            raise RetryAfterTooLong(
                f"rate limited for longer than allowed: the server asked to wait {verdict.retry_after:g} s, "
                f"more than retry_after_cap_s={policy.retry_after_cap_s:g}",
                status=429, retry_after=verdict.retry_after,
            ) from None
        if attempt >= policy.attempts:
            logger.warning(
                "lm.%s %s: attempt %d/%d failed (%s: %s); no retries left",
                self.role, self.endpoint, attempt, policy.attempts, verdict.cause, detail,
            )
            raise scrubbed(exc, self.scrub)
        wait = verdict.retry_after if verdict.retry_after is not None else policy.backoff(attempt)
        if self.clock() + wait >= deadline:
            logger.warning(
                "lm.%s %s: attempt %d/%d failed (%s: %s); waiting %.1f s would pass deadline_s=%g",
                self.role, self.endpoint, attempt, policy.attempts, verdict.cause, detail, wait, policy.deadline_s,
            )
            raise self._deadline_error(attempt, f"{verdict.cause}: {detail}")
        logger.warning(
            "lm.%s %s: attempt %d/%d failed (%s: %s); retrying in %.1f s",
            self.role, self.endpoint, attempt, policy.attempts, verdict.cause, detail, wait,
        )
        if self.ledger is not None:
            self.ledger.record(self.role, verdict.cause)
        return wait

    def _deadline_error(self, attempts: int, last: str) -> DeadlinePassed:
        return DeadlinePassed(
            f"deadline_s={self.policy.deadline_s:g} passed after {attempts} attempt(s); last error: {last}"
        )

    def _before_attempt(self, attempt: int, deadline: float, last: str) -> None:
        self._check_stop()
        if attempt > 1 and self.clock() >= deadline:
            raise self._deadline_error(attempt - 1, last)

    # ------------------------------------------------------------------ sync and async loops
    def run(self, attempt: Callable[[float], T]) -> T:
        """`attempt(deadline)` until it succeeds or the policy says stop; `deadline` is the call's
        `time.monotonic()` deadline, for the engine to cut a reply still arriving at it."""
        deadline = self.clock() + self.policy.deadline_s
        last = ""
        for number in range(1, self.policy.attempts + 1):
            self._before_attempt(number, deadline, last)
            try:
                return attempt(deadline)
            except Exception as exc:
                wait = self._wait_after(exc, number, deadline)
                last = self.scrub(_detail(exc))
            if self.stop is not None:
                if self.stop.wait(wait):
                    raise Interrupted(self.stop.reason or "interrupted")
            else:
                time.sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover

    async def arun(self, attempt: Callable[[float], Awaitable[T]]) -> T:
        """The async `run`: each attempt is also cancelled at the deadline (`asyncio.timeout`)."""
        deadline = self.clock() + self.policy.deadline_s
        last = ""
        for number in range(1, self.policy.attempts + 1):
            self._before_attempt(number, deadline, last)
            try:
                async with asyncio.timeout(max(0.0, deadline - self.clock())):
                    return await attempt(deadline)
            except Exception as exc:
                wait = self._wait_after(exc, number, deadline)
                last = self.scrub(_detail(exc))
            end = self.clock() + wait
            while (left := end - self.clock()) > 0:
                self._check_stop()
                await asyncio.sleep(min(left, _STOP_POLL_S) if self.stop is not None else left)
        raise AssertionError("unreachable")  # pragma: no cover
