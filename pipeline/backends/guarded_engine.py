"""The engine every project LM runs on: a one-attempt engine behind the run's retries, reply checks and guards.

`GuardedEngine` is a DSPy custom engine (`dspy.LM(..., engine=GuardedEngine(inner), async_engine=
AsyncGuardedEngine(...), num_retries=0)`) around an inner engine doing one attempt per call
(`OpenAIEngine`, or the simulated world's `SimEngine`). One `complete` is one logical LM call, so
DSPy's callbacks, its response cache and the call counter see a retried call once. Per call it:

1. refuses to start when a stop was requested (`StopToken`) or the `FailureGuard` has tripped;
2. runs the attempts with tenacity under the `RetryPolicy`; the decisions are `classify`'s:
   - transient: 429, 5xx, 408, timeouts, connection errors, a 200 body that is no completion
     (`MalformedReply`) or carries no answer (`EmptyReply`); retried at most `num_retries` times,
     waiting the server's `Retry-After`, else 1, 2, 4, ... s capped at `retry_after_cap_s`; a longer
     `Retry-After` is never waited (`RetryAfterTooLong`);
   - an empty reply cut at `max_tokens` (`EmptyAtMaxTokens`) is not retried and is counted in the
     run's `MaxTokensGuard`;
   - fatal (401/403, 404, billing): `EndpointUnusable(role, endpoint, cause)`, the cause from the inner
     engine's `explain_fatal` (naming the key VARIABLE, never the key);
   - `deadline_s` bounds the call: no wait ends after it, and an inner engine with `complete_by(request,
     deadline)` cuts a reply still arriving (`DeadlinePassed`); the stop token wakes every wait;
   every retry is logged at WARNING (role, endpoint, attempt n/N, cause, wait) and counted in the
   run's `RetryLedger`; provider text is scrubbed and a client library's advice becomes our key
   (`our_hint`: `lm.<role>.timeout_s`);
3. masks every configured key in the reply (`GuardSettings.secrets`);
4. counts the call in the `FailureGuard` (which may raise `TooManyFailures`);
5. with the run's `ReplyStore` (`GuardSettings.replies`; None: off) answers a request already answered
   in the run from it (marked reused for the counter; the guard does not see it).

`probe(request)` is the preflight's door: the same attempts and checks, but a final failure raises
`EndpointUnusable` (an empty reply cut at `max_tokens`: `MaxTokensTooSmall`), the guard not involved;
a connection refused by a local endpoint (`local_endpoint`) fails it at the first attempt, naming the
fix. `AsyncGuardedEngine` runs the same call on a worker thread for DSPy's `acall`. `RunStopped`
errors are BaseExceptions: DSPy's error boundary and the tracer let them through. Copies of an engine
are the engine itself; `dump_state` saves the inner engine and the policy, never the per-run objects.
`check_reply` says which replies carry an answer.
"""

from __future__ import annotations

import asyncio
import builtins
import errno
import importlib
import ipaddress
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any, Protocol
from urllib.parse import urlsplit

import tenacity
from dspy import lm15
from dspy.clients.call_result import response_from_dict, response_to_dict  # lm15's serde, as DSPy uses it
from dspy.lm15 import Request, Response, response_to_events
from memtrace_loop.pipeline.backends.call_count import ReplyStore, current_call, mark_reused, request_key
from memtrace_loop.pipeline.backends.failure_guard import FailureGuard, MaxTokensGuard
from memtrace_loop.pipeline.backends.lm import RetryPolicy, Shared
from memtrace_loop.pipeline.core.redaction import redact_tree
from memtrace_loop.pipeline.core.stop import EndpointUnusable, Interrupted, MaxTokensTooSmall, RunStopped, StopToken

logger = logging.getLogger(__name__)

__all__ = ["AsyncGuardedEngine", "GuardSettings", "GuardedEngine", "local_endpoint"]

_LOCAL_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")
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
    """Whether `exc` or an error it was raised from is a refused connection (for a name with several
    addresses, asyncio's "Multiple exceptions" all refused)."""
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


def local_endpoint(url: str) -> bool:
    """Whether `url`'s host is this machine: localhost (or a name under `.localhost`), a loopback
    address (127.0.0.0/8, ::1) or the unspecified one (0.0.0.0, ::)."""
    host = (urlsplit(url).hostname or "").rstrip(".").lower()
    if host in _LOCAL_NAMES or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_unspecified


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


def _scrubbed(exc: BaseException, scrub: Any) -> BaseException:
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


@dataclass(frozen=True)
class GuardSettings:
    """Who is calling (role, scrubbed endpoint), how long it may try, and the run's shared objects."""

    role: str
    endpoint: str
    policy: RetryPolicy
    stop: StopToken | None = None
    guard: FailureGuard | None = None
    retries: RetryLedger | None = None
    max_tokens: MaxTokensGuard | None = None
    secrets: tuple[str, ...] = ()  # the run's configured key values, masked in every reply
    replies: ReplyStore | None = None  # the run's replies, reused for an identical request (None: never)


def redacted_reply(response: Response, secrets: tuple[str, ...]) -> Response:
    """`response` with every secret masked in its text and raw provider data (itself when none shows)."""
    if not secrets:
        return response
    record = response_to_dict(response, include_provider_data=True)
    if not any(secret in json.dumps(record, ensure_ascii=False) for secret in secrets):
        return response
    return response_from_dict(redact_tree(record, secrets))


class GuardedEngine(Shared):
    """The synchronous face (a DSPy custom engine); see the module docstring."""

    def __init__(self, inner: Any, settings: GuardSettings) -> None:
        self.inner = inner
        self.settings = settings

    @property
    def model_name(self) -> str:
        return str(getattr(self.inner, "model_name", "guarded"))

    def scrub(self, text: str) -> str:
        scrub = getattr(self.inner, "scrub", None)
        return scrub(text) if callable(scrub) else text

    def _hinted(self, text: str) -> str:
        return our_hint(self.scrub(text), self.settings.role)

    def _unusable(self, cause: str) -> EndpointUnusable:
        return EndpointUnusable(self.settings.role, self.settings.endpoint, cause)

    # ------------------------------------------------------------------------------ the retry loop
    def _run(self, request: Request, final: Any = None) -> Response:
        """The attempts of one logical call; a failure `final(exc)` accepts is re-raised at once (no
        retry, no wait, no warning: the caller explains it)."""
        deadline = time.monotonic() + self.settings.policy.deadline_s

        def wait(state: tenacity.RetryCallState) -> float:
            assert state.outcome is not None  # tenacity waits only after a failed attempt
            failed = state.outcome.exception()
            assert failed is not None
            return self._wait_after(failed, state.attempt_number, deadline, final)

        retrying = tenacity.Retrying(retry=tenacity.retry_if_exception_type(Exception), before=self._check_stop,
                                     wait=wait, sleep=self._sleep, reraise=True)
        return retrying(self._attempt, request, deadline)

    def _attempt(self, request: Request, deadline: float) -> Response:
        complete_by = getattr(self.inner, "complete_by", None)
        response = complete_by(request, deadline) if callable(complete_by) else self.inner.complete(request)
        return redacted_reply(check_reply(response, request.config.max_tokens), self.settings.secrets)

    def _warn(self, attempt: int, verdict: Transient, end: str) -> None:
        s = self.settings
        logger.warning("lm.%s %s: attempt %d/%d failed (%s: %s)%s", s.role, s.endpoint, attempt,
                       s.policy.attempts, verdict.cause, self._hinted(verdict.detail), end)

    def _deadline(self, attempt: int, verdict: Transient) -> DeadlinePassed:
        return DeadlinePassed(f"deadline_s={self.settings.policy.deadline_s:g} passed after {attempt} attempt(s); "
                              f"last error: {verdict.cause}: {self._hinted(verdict.detail)}")

    def _wait_after(self, exc: BaseException, attempt: int, deadline: float, final: Any) -> float:
        """Seconds to wait before the next attempt, or raise: final, fatal, not transient, past the cap,
        out of attempts or past the deadline."""
        s, verdict = self.settings, classify(exc)
        if isinstance(verdict, Fatal):
            fatal = Fatal(verdict.kind, verdict.status, self._hinted(verdict.detail))
            raise self._unusable(self._explain(fatal)) from None
        if verdict is None or (final is not None and final(exc)):
            raise _scrubbed(exc, self._hinted)
        policy = s.policy
        if time.monotonic() >= deadline:  # the engine cut this attempt at the deadline
            self._warn(attempt, verdict, f" at deadline_s={policy.deadline_s:g}; the call fails")
            raise self._deadline(attempt, verdict)
        if verdict.retry_after is not None and verdict.retry_after > policy.retry_after_cap_s:
            logger.warning("lm.%s %s: rate limited for longer than allowed: the server asked to wait %g s "
                           "(retry_after_cap_s=%g); the call fails without waiting",
                           s.role, s.endpoint, verdict.retry_after, policy.retry_after_cap_s)
            raise RetryAfterTooLong(
                f"rate limited for longer than allowed: the server asked to wait {verdict.retry_after:g} s, "
                f"more than retry_after_cap_s={policy.retry_after_cap_s:g}",
                status=429, retry_after=verdict.retry_after,
            ) from None
        if attempt >= policy.attempts:
            self._warn(attempt, verdict, "; no retries left")
            raise _scrubbed(exc, self._hinted)
        wait = verdict.retry_after if verdict.retry_after is not None else policy.backoff(attempt)
        if time.monotonic() + wait >= deadline:
            self._warn(attempt, verdict, f"; waiting {wait:.1f} s would pass deadline_s={policy.deadline_s:g}")
            raise self._deadline(attempt, verdict)
        self._warn(attempt, verdict, f"; retrying in {wait:.1f} s")
        if s.retries is not None:
            s.retries.record(s.role, verdict.cause)
        return wait

    def _explain(self, fatal: Fatal) -> str:
        explain = getattr(self.inner, "explain_fatal", None)
        if callable(explain):
            return str(explain(fatal, self.settings.role))
        status = f"HTTP {fatal.status}" if fatal.status is not None else "no status"
        return f"{fatal.kind} ({status}): {fatal.detail}"

    def _sleep(self, seconds: float) -> None:
        stop = self.settings.stop
        if stop is None:
            time.sleep(seconds)
        elif stop.wait(seconds):
            raise Interrupted(stop.reason or "interrupted")

    def _check_stop(self, _state: Any = None) -> None:
        if self.settings.stop is not None:
            self.settings.stop.check()

    # --------------------------------------------------------------------------- one logical call
    def serve(self, request: Request) -> tuple[Response, bool]:
        """(the reply, reused from the run's store?): one logical call, as the module docstring says."""
        self._before()
        replies = self.settings.replies
        if replies is None:
            return self._complete(request), False
        slot = current_call()
        # the model and endpoint, not the engine's class: every face of a role shares its replies
        key = request_key(self.model_name, self.settings.endpoint, request, None if slot is None else slot.rollout_id)
        return replies.get_or_call(key, lambda: self._complete(request))

    def _before(self) -> None:
        self._check_stop()
        if self.settings.guard is not None:
            self.settings.guard.check()

    def complete(self, request: Request) -> Response:
        response, reused = self.serve(request)
        if reused:
            mark_reused()
        return response

    def _complete(self, request: Request) -> Response:
        self._before()  # again: a call that waited for an identical one which failed checks the stop first
        try:
            response = self._run(request)
        except Exception as exc:
            self._count(exc)
            raise
        self._count(None)
        return response

    def _count(self, failed: Exception | None) -> None:
        """Count a finished call in the guard (which may trip) and an empty reply cut at max_tokens."""
        s = self.settings
        if s.guard is not None and not isinstance(failed, RunStopped):
            error = "" if failed is None else self.scrub(f"{type(failed).__name__}: {failed}".splitlines()[0])
            s.guard.record(failed=failed is not None, error=error[:200])
        if isinstance(failed, EmptyAtMaxTokens) and s.max_tokens is not None:
            s.max_tokens.record(s.role, failed.max_tokens)

    # -------------------------------------------------------------------------------- the preflight
    def _refused_locally(self, exc: BaseException) -> bool:
        """A connection refused by a local endpoint: its server is not running (the probe gives up)."""
        return connection_refused(exc) and local_endpoint(self.settings.endpoint)

    def probe(self, request: Request) -> Response | None:
        """One checked call for the preflight: the response, None when the endpoint refused the check
        request itself (HTTP 400-class: reachable, key accepted; logged), else `EndpointUnusable`."""
        self._check_stop()
        try:
            return self._run(request, final=self._refused_locally)
        except EmptyAtMaxTokens as exc:
            raise MaxTokensTooSmall(self.settings.role, exc.max_tokens, 1) from None
        except lm15.InvalidRequestError as exc:
            if classify(exc) is not None:
                raise self._probe_failure(exc) from None
            logger.warning("lm.%s %s refused the check request (%s); going on", self.settings.role,
                           self.settings.endpoint, self.scrub(str(exc).splitlines()[0])[:200])
            return None
        except Exception as exc:
            raise self._probe_failure(exc) from None

    def _probe_failure(self, exc: Exception) -> EndpointUnusable:
        """The preflight's verdict on a final failure: why the endpoint cannot serve this run."""
        if self._refused_locally(exc):
            role, address = self.settings.role, urlsplit(self.settings.endpoint).netloc
            return self._unusable(f"connection refused at the first attempt: nothing listens at {address}; "
                                  f"start the server there, or check lm.{role}.api_base")
        if isinstance(exc, RetryAfterTooLong | DeadlinePassed):
            return self._unusable(self.scrub(exc.message))
        verdict, attempts = classify(exc), self.settings.policy.attempts
        if isinstance(verdict, Transient):  # retries exhausted
            empty = verdict.cause in (RetryCause.MALFORMED, RetryCause.EMPTY_REPLY)
            what = "no usable reply" if empty else "unreachable"
            return self._unusable(f"{what} after {attempts} attempt(s) ({verdict.cause}: {self.scrub(verdict.detail)})")
        return self._unusable(self.scrub(f"the check request failed: {type(exc).__name__}: {exc}".splitlines()[0]))

    def stream(self, request: Request) -> Iterator[Any]:
        return iter(response_to_events(self.complete(request)))

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if callable(close):
            close()

    def dump_state(self) -> dict[str, Any]:
        dump = getattr(self.inner, "dump_state", None)
        inner = {"class": f"{type(self.inner).__module__}:{type(self.inner).__qualname__}",
                 "state": dump() if callable(dump) else {}}
        s = self.settings
        return {"inner": inner, "role": s.role, "endpoint": s.endpoint, "policy": asdict(s.policy)}

    @classmethod
    def load_state(cls, state: dict[str, Any]) -> GuardedEngine:
        module, _, qualname = str(state["inner"]["class"]).partition(":")
        target: Any = importlib.import_module(module)
        for part in qualname.split("."):
            target = getattr(target, part)
        settings = GuardSettings(str(state.get("role", "lm")), str(state.get("endpoint", "")),
                                 RetryPolicy(**state.get("policy", {})))
        return cls(target.load_state(state["inner"].get("state", {})), settings)

    def __repr__(self) -> str:
        return f"GuardedEngine({self.inner!r}, role={self.settings.role!r})"


class AsyncGuardedEngine(Shared):
    """The async face (`async_engine=`): the sync face's logical call, on a worker thread."""

    def __init__(self, engine: GuardedEngine) -> None:
        self.engine = engine

    async def complete(self, request: Request) -> Response:
        response, reused = await asyncio.to_thread(self.engine.serve, request)
        if reused:
            mark_reused()  # in the caller's context, where the counter opened the call's slot
        return response

    async def stream(self, request: Request) -> AsyncIterator[Any]:
        for event in response_to_events(await self.complete(request)):
            yield event

    def dump_state(self) -> dict[str, Any]:
        return self.engine.dump_state()

    @classmethod
    def load_state(cls, state: dict[str, Any]) -> AsyncGuardedEngine:
        return cls(GuardedEngine.load_state(state))

    def __repr__(self) -> str:
        return f"AsyncGuardedEngine({self.engine!r})"
