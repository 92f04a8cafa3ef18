"""The engine every project LM runs on: another DSPy engine behind the run's retries, stop and guard.

`GuardedEngine` (sync) and `AsyncGuardedEngine` (async) are DSPy custom engines (`dspy.LM(...,
engine=GuardedEngine(...), async_engine=AsyncGuardedEngine(...), num_retries=0)`) around an inner
engine doing one attempt per call (`OpenAIEngine`, or the simulated world's `SimEngine`). One
`complete` is one logical LM call, so DSPy's callbacks, its response cache and
`pipeline.backends.call_count` see a retried call once. Per call it:

1. refuses to start when a stop was requested (`StopToken`) or the `FailureGuard` has tripped;
2. runs the attempts under the `RetryPolicy` (`pipeline.backends.resilience.RetryLoop`): retries
   logged at WARNING and counted in the `RetryLedger`, waits capped, the deadline kept (an inner
   engine with `complete_by(request, deadline)` is given it, to cut a reply still arriving);
3. checks each attempt's reply (`pipeline.backends.reply_check.check_reply`): a malformed or empty
   reply is a failed attempt, retried, never returned (so never in DSPy's cache); an empty reply cut
   at `max_tokens` fails the call at once and is counted in the run's `MaxTokensGuard`, which stops
   the run (`MaxTokensTooSmall`) after a few;
4. masks in the reply every configured key (`GuardSettings.secrets`: a model echoing a key puts it in
   no cache, graph or artifact);
5. turns a fatal reply (401/403/404, billing) into `EndpointUnusable(role, endpoint, cause)`, with
   the cause from the inner engine's `explain_fatal` (naming the key VARIABLE, never the key);
6. counts the call in the `FailureGuard` as succeeded or finally failed (which may raise
   `TooManyFailures`);
7. with the run's `ReplyStore` (`GuardSettings.replies`, `pipeline.backends.call_reuse`; None: off),
   answers a request already answered in the run from the store instead of calling again (marked, so
   the call counter counts it as reused, not made; the `FailureGuard` does not see it): steps 2-6 run
   once per distinct request, and concurrent identical requests make one call.

`probe(request)` is the preflight's door: the same attempts and checks, but every final failure that
says the endpoint cannot serve (fatal, unreachable, no usable reply, rate-limited longer than allowed,
deadline) raises `EndpointUnusable`, an empty reply cut at `max_tokens` raises `MaxTokensTooSmall`,
and the guard is not involved. A connection refused by a local endpoint (`local_endpoint`: localhost,
a loopback or unspecified address) fails the probe at its first attempt, with no retry or warning,
naming the fix (start the server there, or check `lm.<role>.api_base`): a local server that refuses
is not running, and waiting ~30 s of back-off would not start it. In the middle of a run (`complete`)
a refused connection is retried like any connection error. `RunStopped` errors are BaseExceptions: DSPy's
error boundary and the tracer's `except Exception` let them through to the entry point.

Both faces share one `GuardSettings` (role, endpoint, policy, stop, guard, ledger). Copies and deep
copies of an engine are the engine itself (the counters, the token and the connection pools are per
run). `dump_state` saves the inner engine and the policy, never the per-run objects.
"""

from __future__ import annotations

import importlib
import ipaddress
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlsplit

from dspy import lm15
from dspy.clients.call_result import response_from_dict, response_to_dict  # lm15's serde, as DSPy uses it
from dspy.lm15 import Request, Response, response_to_events
from memtrace_loop.pipeline.backends.call_reuse import ReplyStore, current_call, mark_reused, request_key
from memtrace_loop.pipeline.backends.failure_guard import FailureGuard
from memtrace_loop.pipeline.backends.reply_check import MaxTokensGuard, check_reply
from memtrace_loop.pipeline.backends.resilience import (
    DeadlinePassed,
    EmptyAtMaxTokens,
    Fatal,
    RetryAfterTooLong,
    RetryCause,
    RetryLoop,
    RetryPolicy,
    Transient,
    classify,
    connection_refused,
)
from memtrace_loop.pipeline.backends.retry_ledger import RetryLedger
from memtrace_loop.pipeline.core.redaction import redact
from memtrace_loop.pipeline.core.stop import EndpointUnusable, MaxTokensTooSmall, RunStopped, StopToken

logger = logging.getLogger(__name__)

__all__ = ["AsyncGuardedEngine", "GuardSettings", "GuardedEngine", "local_endpoint"]

_LOCAL_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")


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


def _redact_tree(value: Any, secrets: tuple[str, ...]) -> Any:
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, dict):
        return {key: _redact_tree(item, secrets) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_redact_tree(item, secrets) for item in value)
    return value


def redacted_reply(response: Response, secrets: tuple[str, ...]) -> Response:
    """`response` with every secret masked in its text and raw provider data (itself when none shows)."""
    if not secrets:
        return response
    record = response_to_dict(response, include_provider_data=True)
    text = json.dumps(record, ensure_ascii=False)
    if not any(secret in text for secret in secrets):
        return response
    return response_from_dict(_redact_tree(record, secrets))


def _class_path(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}:{cls.__qualname__}"


def _dump_inner(inner: Any) -> dict[str, Any]:
    dump = getattr(inner, "dump_state", None)
    return {"class": _class_path(inner), "state": dump() if callable(dump) else {}}


def _load_inner(record: dict[str, Any]) -> Any:
    module, _, qualname = str(record["class"]).partition(":")
    target: Any = importlib.import_module(module)
    for part in qualname.split("."):
        target = getattr(target, part)
    return target.load_state(record.get("state", {}))


class _Guarded:
    """What both faces share: the settings, the loop, fatal and final-failure handling."""

    def __init__(self, inner: Any, settings: GuardSettings) -> None:
        self.inner = inner
        self.settings = settings

    def __copy__(self) -> Any:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return self

    @property
    def model_name(self) -> str:
        return str(getattr(self.inner, "model_name", "guarded"))

    def scrub(self, text: str) -> str:
        scrub = getattr(self.inner, "scrub", None)
        return scrub(text) if callable(scrub) else text

    def _unusable(self, cause: str) -> EndpointUnusable:
        return EndpointUnusable(self.settings.role, self.settings.endpoint, cause)

    def _raise_fatal(self, fatal: Fatal) -> None:
        explain = getattr(self.inner, "explain_fatal", None)
        status = f"HTTP {fatal.status}" if fatal.status is not None else "no status"
        cause = explain(fatal, self.settings.role) if callable(explain) else f"{fatal.kind} ({status}): {fatal.detail}"
        raise self._unusable(cause) from None

    def _loop(self, final: Callable[[BaseException], bool] | None = None) -> RetryLoop:
        s = self.settings
        return RetryLoop(
            s.policy, role=s.role, endpoint=s.endpoint, on_fatal=self._raise_fatal, stop=s.stop,
            ledger=s.retries, scrub=self.scrub, final=final,
        )

    def _refused_locally(self, exc: BaseException) -> bool:
        """A connection refused by a local endpoint: its server is not running (the probe gives up)."""
        return connection_refused(exc) and local_endpoint(self.settings.endpoint)

    def _reuse_key(self, request: Request) -> str:
        slot = current_call()
        # the model and endpoint, not the engine's class: the sync and async faces share their replies
        return request_key(self.model_name, self.settings.endpoint, request, None if slot is None else slot.rollout_id)

    def _before(self) -> None:
        if self.settings.stop is not None:
            self.settings.stop.check()
        if self.settings.guard is not None:
            self.settings.guard.check()

    def _checked(self, response: Response, request: Request) -> Response:
        return redacted_reply(check_reply(response, request.config.max_tokens), self.settings.secrets)

    def _attempt(self, request: Request, deadline: float) -> Response:
        complete_by = getattr(self.inner, "complete_by", None)
        response = complete_by(request, deadline) if callable(complete_by) else self.inner.complete(request)
        return self._checked(response, request)

    async def _aattempt(self, request: Request, deadline: float) -> Response:
        response = await self.inner.complete(request)  # the loop cancels it at the deadline
        return self._checked(response, request)

    def _cut_at_max_tokens(self, exc: BaseException) -> None:
        """Count an empty reply cut at max_tokens (the run's `MaxTokensGuard` may stop the run)."""
        if isinstance(exc, EmptyAtMaxTokens) and self.settings.max_tokens is not None:
            self.settings.max_tokens.record(self.settings.role, exc.max_tokens)

    def _counted(self, failed: BaseException | None) -> None:
        guard = self.settings.guard
        if guard is not None and not isinstance(failed, RunStopped):
            error = "" if failed is None else self.scrub(f"{type(failed).__name__}: {failed}".splitlines()[0])[:200]
            guard.record(failed=failed is not None, error=error)
        if failed is not None:
            self._cut_at_max_tokens(failed)

    def _probe_failure(self, exc: Exception) -> EndpointUnusable:
        """The preflight's verdict on a final failure: why the endpoint cannot serve this run."""
        if self._refused_locally(exc):
            role, address = self.settings.role, urlsplit(self.settings.endpoint).netloc
            return self._unusable(
                f"connection refused at the first attempt: nothing listens at {address}; "
                f"start the server there, or check lm.{role}.api_base"
            )
        if isinstance(exc, RetryAfterTooLong | DeadlinePassed):
            return self._unusable(self.scrub(exc.message))
        verdict = classify(exc)
        attempts = self.settings.policy.attempts
        if isinstance(verdict, Transient) and verdict.cause in (RetryCause.MALFORMED, RetryCause.EMPTY_REPLY):
            return self._unusable(
                f"no usable reply after {attempts} attempt(s) ({verdict.cause}: {self.scrub(verdict.detail)})"
            )
        if isinstance(verdict, Transient):  # retries exhausted
            return self._unusable(
                f"unreachable after {attempts} attempt(s) ({verdict.cause}: {self.scrub(verdict.detail)})"
            )
        return self._unusable(self.scrub(f"the check request failed: {type(exc).__name__}: {exc}".splitlines()[0]))

    def dump_state(self) -> dict[str, Any]:
        return {
            "inner": _dump_inner(self.inner),
            "role": self.settings.role,
            "endpoint": self.settings.endpoint,
            "policy": asdict(self.settings.policy),
        }

    @classmethod
    def _settings_from(cls, state: dict[str, Any]) -> GuardSettings:
        return GuardSettings(str(state.get("role", "lm")), str(state.get("endpoint", "")),
                             RetryPolicy(**state.get("policy", {})))


class GuardedEngine(_Guarded):
    """Synchronous face (a DSPy custom engine)."""

    def complete(self, request: Request) -> Response:
        self._before()
        replies = self.settings.replies
        if replies is None:
            return self._complete(request)
        response, reused = replies.get_or_call(self._reuse_key(request), lambda: self._complete(request))
        if reused:
            mark_reused()
        return response

    def _complete(self, request: Request) -> Response:
        self._before()  # again: a call that waited for an identical one which failed checks the stop first
        try:
            response = self._loop().run(lambda deadline: self._attempt(request, deadline))
        except Exception as exc:
            self._counted(exc)
            raise
        self._counted(None)
        return response

    def probe(self, request: Request) -> Response | None:
        """One checked call for the preflight: the response, None when the endpoint refused the check
        request itself (HTTP 400-class: reachable, key accepted; logged), else `EndpointUnusable`."""
        if self.settings.stop is not None:
            self.settings.stop.check()
        try:
            return self._loop(final=self._refused_locally).run(lambda deadline: self._attempt(request, deadline))
        except EmptyAtMaxTokens as exc:
            raise MaxTokensTooSmall(self.settings.role, exc.max_tokens, 1) from None
        except lm15.InvalidRequestError as exc:
            if classify(exc) is not None:
                raise self._probe_failure(exc) from None
            logger.warning(
                "lm.%s %s refused the check request (%s); going on",
                self.settings.role, self.settings.endpoint, self.scrub(str(exc).splitlines()[0])[:200],
            )
            return None
        except Exception as exc:
            raise self._probe_failure(exc) from None

    def stream(self, request: Request) -> Iterator[Any]:
        return iter(response_to_events(self.complete(request)))

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if callable(close):
            close()

    @classmethod
    def load_state(cls, state: dict[str, Any]) -> GuardedEngine:
        return cls(_load_inner(state["inner"]), cls._settings_from(state))

    def __repr__(self) -> str:
        return f"GuardedEngine({self.inner!r}, role={self.settings.role!r})"


class AsyncGuardedEngine(_Guarded):
    """Asynchronous face (`async_engine=`); shares the sync face's settings."""

    async def complete(self, request: Request) -> Response:
        self._before()
        replies = self.settings.replies
        if replies is None:
            return await self._complete(request)
        response, reused = await replies.aget_or_call(self._reuse_key(request), lambda: self._complete(request))
        if reused:
            mark_reused()
        return response

    async def _complete(self, request: Request) -> Response:
        def attempt(deadline: float) -> Awaitable[Response]:
            return self._aattempt(request, deadline)

        try:
            response = await self._loop().arun(attempt)
        except Exception as exc:
            self._counted(exc)
            raise
        self._counted(None)
        return response

    async def stream(self, request: Request) -> AsyncIterator[Any]:
        for event in response_to_events(await self.complete(request)):
            yield event

    async def aclose(self) -> None:
        aclose = getattr(self.inner, "aclose", None)
        if callable(aclose):
            await aclose()

    @classmethod
    def load_state(cls, state: dict[str, Any]) -> AsyncGuardedEngine:
        return cls(_load_inner(state["inner"]), cls._settings_from(state))

    def __repr__(self) -> str:
        return f"AsyncGuardedEngine({self.inner!r}, role={self.settings.role!r})"
