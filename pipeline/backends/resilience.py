"""Bounded, visible retries of one logical LM call, and what a 200 reply must carry to be used.

The project's LMs run with DSPy's `num_retries=0` (its loop sleeps a `Retry-After` uncapped and logs
nothing) and retry here, inside the guarded engine (`pipeline.backends.guarded_engine`), so a retried
call is ONE call for DSPy's callbacks, its cache and the call counter. `RetryLoop` runs the attempts
with tenacity; the decisions are ours (`RetryPolicy`, `classify`):

- transient: 429, 5xx, 408, timeouts, connection errors, a 200 body that is no completion
  (`MalformedReply`, cause `malformed`) or carries no answer (`EmptyReply`, `empty_reply`); retried
  at most `num_retries` times, waiting the server's `Retry-After`, else 1, 2, 4, ... s capped at
  `retry_after_cap_s`; a longer `Retry-After` is never waited (`RetryAfterTooLong`);
- an empty reply cut at `max_tokens` (`EmptyAtMaxTokens`) is not retried: the same limit, the same end;
- fatal: 401/403, 404, billing: the caller's `on_fatal` raises (`EndpointUnusable`);
- `deadline_s` bounds the call: no wait ends after it, and each attempt gets it to cut a reply still
  arriving (`DeadlinePassed`); the `StopToken` is checked before every attempt and wakes every wait;
- `final(exc)` names failures that end the call at once (the preflight's refused local endpoint).

Every retry is logged at WARNING (role, scrubbed endpoint, attempt n/N, cause, wait) and counted in
the run's `RetryLedger`. Provider text goes through the caller's `scrub`, and a client library's advice
("Timeouts(read=...)") becomes our key (`our_hint`: `lm.<role>.timeout_s`). `check_reply` and
`usable_record` say which replies and cache records carry an answer. It knows no HTTP or DSPy engine.
"""

from __future__ import annotations

import builtins
import errno
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, TypeVar

import tenacity
from dspy import lm15
from dspy.lm15 import Response
from memtrace_loop.pipeline.backends.retry_policy import RetryPolicy
from memtrace_loop.pipeline.core.stop import Interrupted, StopToken

logger = logging.getLogger(__name__)

T = TypeVar("T")
_MAX_DETAIL_CHARS = 160


class RetryLedger(Protocol):
    """Where retries are counted (`pipeline.backends.services.RetryLedger`)."""

    def record(self, role: str, cause: str) -> None: ...


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




def _detail(exc: BaseException) -> str:
    status = getattr(exc, "status", None)
    text = (getattr(exc, "message", None) or str(exc) or "").strip()
    line = text.splitlines()[0] if text else ""
    line = line if len(line) <= _MAX_DETAIL_CHARS else line[: _MAX_DETAIL_CHARS - 1] + "…"
    head = f"HTTP {status}" if isinstance(status, int) else type(exc).__name__
    return f"{head}: {line}" if line else head


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
    after = getattr(exc, "retry_after", None)
    after = float(after) if isinstance(after, int | float) and after >= 0 else None
    if isinstance(exc, lm15.RateLimitError) or status == 429:
        return Transient(RetryCause.RATE_LIMITED, detail, after)
    if isinstance(exc, lm15.TimeoutError | builtins.TimeoutError) or status == 408:
        return Transient(RetryCause.TIMEOUT, detail, after)
    if isinstance(exc, lm15.ServerError) or (status is not None and status >= 500):
        return Transient(RetryCause.SERVER_ERROR, detail, after)
    if isinstance(exc, lm15.TransportError):
        timed_out = "timed out" in str(exc).lower() or "timeout" in str(exc).lower()
        return Transient(RetryCause.TIMEOUT if timed_out else RetryCause.CONNECTION, detail)
    if isinstance(exc, EmptyReply):
        return Transient(RetryCause.EMPTY_REPLY, detail)
    if isinstance(exc, MalformedReply) or (type(exc) is lm15.ProviderError and (status is None or 200 <= status < 300)):
        return Transient(RetryCause.MALFORMED, detail)  # lm15 raises a bare ProviderError for a non-JSON 2xx body
    return None


def connection_refused(exc: BaseException) -> bool:
    """Whether `exc` or an error it was raised from is a refused connection (nothing listens there; for
    a name with several addresses, asyncio's "Multiple exceptions" all refused)."""
    link: BaseException | None = exc
    seen: set[int] = set()
    refused = f"[Errno {errno.ECONNREFUSED}]"
    while link is not None and id(link) not in seen:
        text = str(link)
        if isinstance(link, ConnectionRefusedError) or (
            isinstance(link, OSError) and text.startswith("Multiple exceptions") and
            text.count(refused) == text.count("[Errno")
        ):
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
    """`text` with a client library's advice to its own users replaced by our key (`lm.<role>.timeout_s`)."""
    for pattern, replacement in _LIBRARY_HINTS:
        text = pattern.sub(replacement.format(role=role), text)
    return text


def scrubbed(exc: BaseException, scrub: Callable[[str], str]) -> BaseException:
    """`exc` with `scrub` applied to its message and arguments; a chain that would show a secret is cut."""
    if isinstance(getattr(exc, "message", None), str):
        exc.message = scrub(exc.message)  # type: ignore[attr-defined]
    exc.args = tuple(scrub(arg) if isinstance(arg, str) else arg for arg in exc.args)
    link: BaseException | None = exc.__cause__ or exc.__context__
    while link is not None:
        if scrub(str(link)) != str(link):
            exc.__cause__, exc.__suppress_context__ = None, True
            break
        link = link.__cause__ or link.__context__
    return exc


# ------------------------------------------------------------------------------- what a reply carries
def _shape_problem(data: Any) -> str:
    """What is missing in a raw chat.completion body ("" when it has a choice with a message, or no body)."""
    if not isinstance(data, Mapping):
        return ""  # no raw body (the simulated world's engine): judged by its parts only
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        return "the reply is JSON but carries no choice"
    if not isinstance(choices[0], Mapping) or not isinstance(choices[0].get("message"), Mapping):
        return "the reply carries a choice without a message"
    return ""


def check_reply(response: Response, max_tokens: int | None = None) -> Response:
    """`response` if it carries an answer (text, data or a tool call); else `MalformedReply`,
    `EmptyAtMaxTokens` (no text, finish_reason "length") or `EmptyReply`."""
    problem = _shape_problem(response.provider_data)
    if problem:
        raise MalformedReply(problem, status=200)
    for part in response.message.parts:
        kind = type(part).__name__
        text = str(getattr(part, "text", "") or "").strip()
        if kind in ("DataPart", "ToolCallPart") or (kind == "TextPart" and text):
            return response
    if response.finish_reason == "length":
        limit = f"max_tokens={max_tokens}" if max_tokens is not None else "the server's max_tokens"
        raise EmptyAtMaxTokens(f"the reply is empty: it stopped at {limit} (finish_reason \"length\") before any "
                               "answer", status=200, max_tokens=max_tokens)
    raise EmptyReply(f"the reply carries no answer (empty content, finish_reason {response.finish_reason!r})",
                     status=200)


def usable_record(record: Any) -> bool:
    """Whether a DSPy cache record (a native call result's dump) holds an answer; other shapes: True."""
    if not isinstance(record, Mapping) or "outputs" not in record or "_dspy_format" not in record:
        return True
    outputs = record.get("outputs")

    def answers(output: Any) -> bool:
        if isinstance(output, str):
            return bool(output.strip())
        if isinstance(output, Mapping):
            return bool(str(output.get("text") or "").strip() or output.get("tool_calls"))
        return output is not None

    return isinstance(outputs, list) and any(answers(output) for output in outputs)


# ------------------------------------------------------------------------------------------ the loop
class RetryLoop:
    """Runs the attempts of one logical call under a `RetryPolicy` for one role and endpoint.

    `on_fatal(fatal)` must raise; `scrub` masks secrets in provider text; a failure `final` accepts is
    re-raised at once (no retry, no wait, no warning: the caller explains it)."""

    def __init__(
        self, policy: RetryPolicy, *, role: str, endpoint: str, on_fatal: Callable[[Fatal], None],
        stop: StopToken | None = None, ledger: RetryLedger | None = None,
        scrub: Callable[[str], str] = lambda text: text, final: Callable[[BaseException], bool] | None = None,
    ) -> None:
        self.policy, self.role, self.endpoint, self.on_fatal = policy, role, endpoint, on_fatal
        self.stop, self.ledger, self.final = stop, ledger, final
        self.scrub: Callable[[str], str] = lambda text: our_hint(scrub(text), role)

    def _warn(self, attempt: int, verdict: Transient, end: str) -> None:
        logger.warning("lm.%s %s: attempt %d/%d failed (%s: %s)%s", self.role, self.endpoint, attempt,
                       self.policy.attempts, verdict.cause, self.scrub(verdict.detail), end)

    def _deadline(self, attempt: int, verdict: Transient) -> DeadlinePassed:
        return DeadlinePassed(f"deadline_s={self.policy.deadline_s:g} passed after {attempt} attempt(s); "
                              f"last error: {verdict.cause}: {self.scrub(verdict.detail)}")

    def _wait_after(self, exc: BaseException, attempt: int, deadline: float) -> float:
        """Seconds to wait before the next attempt, or raise: final, fatal, not transient, past the cap,
        out of attempts or past the deadline."""
        verdict = classify(exc)
        if isinstance(verdict, Fatal):
            self.on_fatal(Fatal(verdict.kind, verdict.status, self.scrub(verdict.detail)))
            raise AssertionError("on_fatal must raise")  # pragma: no cover
        if verdict is None or (self.final is not None and self.final(exc)):
            raise scrubbed(exc, self.scrub)
        policy = self.policy
        if time.monotonic() >= deadline:  # the engine cut this attempt at the deadline
            self._warn(attempt, verdict, f" at deadline_s={policy.deadline_s:g}; the call fails")
            raise self._deadline(attempt, verdict)
        if verdict.retry_after is not None and verdict.retry_after > policy.retry_after_cap_s:
            logger.warning("lm.%s %s: rate limited for longer than allowed: the server asked to wait %g s "
                           "(retry_after_cap_s=%g); the call fails without waiting",
                           self.role, self.endpoint, verdict.retry_after, policy.retry_after_cap_s)
            raise RetryAfterTooLong(
                f"rate limited for longer than allowed: the server asked to wait {verdict.retry_after:g} s, "
                f"more than retry_after_cap_s={policy.retry_after_cap_s:g}",
                status=429, retry_after=verdict.retry_after,
            ) from None
        if attempt >= policy.attempts:
            self._warn(attempt, verdict, "; no retries left")
            raise scrubbed(exc, self.scrub)
        wait = verdict.retry_after if verdict.retry_after is not None else policy.backoff(attempt)
        if time.monotonic() + wait >= deadline:
            self._warn(attempt, verdict, f"; waiting {wait:.1f} s would pass deadline_s={policy.deadline_s:g}")
            raise self._deadline(attempt, verdict)
        self._warn(attempt, verdict, f"; retrying in {wait:.1f} s")
        if self.ledger is not None:
            self.ledger.record(self.role, verdict.cause)
        return wait

    def _sleep(self, seconds: float) -> None:
        if self.stop is None:
            time.sleep(seconds)
        elif self.stop.wait(seconds):
            raise Interrupted(self.stop.reason or "interrupted")

    def _check_stop(self, _state: tenacity.RetryCallState) -> None:
        if self.stop is not None:
            self.stop.check()

    def run(self, attempt: Callable[[float], T]) -> T:
        """`attempt(deadline)` until it succeeds or the policy says stop; `deadline` is the call's
        `time.monotonic()` deadline, for the engine to cut a reply still arriving at it."""
        deadline = time.monotonic() + self.policy.deadline_s

        def wait(state: tenacity.RetryCallState) -> float:
            failed = state.outcome.exception() if state.outcome is not None else None
            assert failed is not None  # tenacity waits only after a failed attempt
            return self._wait_after(failed, state.attempt_number, deadline)

        retrying = tenacity.Retrying(retry=tenacity.retry_if_exception_type(Exception), before=self._check_stop,
                                     wait=wait, sleep=self._sleep, reraise=True)
        return retrying(attempt, deadline)
