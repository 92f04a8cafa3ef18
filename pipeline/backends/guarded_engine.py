"""The engine every project LM runs on: a one-attempt DSPy engine behind the run's retries, checks and guards.

`GuardedEngine` is a DSPy custom engine (`dspy.LM(..., engine=GuardedEngine(inner), async_engine=
AsyncGuardedEngine(...), num_retries=0)`) around an inner engine doing one attempt per call
(`OpenAIEngine`, or the simulated world's `SimEngine`). One `complete` is one logical LM call, so
DSPy's callbacks, its response cache and the call counter see a retried call once. Per call it:

1. refuses to start when a stop was requested (`StopToken`) or the `FailureGuard` has tripped;
2. runs the attempts under the `RetryPolicy` (`pipeline.backends.resilience.RetryLoop`), giving an
   inner engine with `complete_by(request, deadline)` the call's deadline;
3. checks each reply (`check_reply`): a malformed or empty one is a failed attempt, retried, never
   returned (so never cached); one cut empty at `max_tokens` fails the call and is counted in the
   run's `MaxTokensGuard`;
4. masks every configured key in the reply (`GuardSettings.secrets`);
5. turns a fatal reply (401/403/404, billing) into `EndpointUnusable(role, endpoint, cause)`, the
   cause from the inner engine's `explain_fatal` (naming the key VARIABLE, never the key);
6. counts the call in the `FailureGuard` (which may raise `TooManyFailures`);
7. with the run's `ReplyStore` (`GuardSettings.replies`; None: off) answers a request already answered
   in the run from it (marked reused for the counter; the guard does not see it).

`probe(request)` is the preflight's door: the same attempts and checks, but a final failure saying the
endpoint cannot serve raises `EndpointUnusable` (an empty reply cut at `max_tokens`: `MaxTokensTooSmall`)
and the guard is not involved; a connection refused by a local endpoint (`local_endpoint`) fails it at
the first attempt, naming the fix (a running call still retries it). `AsyncGuardedEngine` is the async
face DSPy's `acall` needs: the same call on a worker thread. `RunStopped` errors are BaseExceptions:
DSPy's error boundary and the tracer let them through. Copies of an engine are the engine itself;
`dump_state` saves the inner engine and the policy, never the per-run objects.
"""

from __future__ import annotations

import asyncio
import importlib
import ipaddress
import json
import logging
from collections.abc import AsyncIterator, Iterator
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlsplit

from dspy import lm15
from dspy.clients.call_result import response_from_dict, response_to_dict  # lm15's serde, as DSPy uses it
from dspy.lm15 import Request, Response, response_to_events
from memtrace_loop.pipeline.backends.call_count import ReplyStore, current_call, mark_reused, request_key
from memtrace_loop.pipeline.backends.failure_guard import FailureGuard, MaxTokensGuard
from memtrace_loop.pipeline.backends.resilience import (
    DeadlinePassed,
    EmptyAtMaxTokens,
    Fatal,
    RetryAfterTooLong,
    RetryCause,
    RetryLoop,
    RetryPolicy,
    Transient,
    check_reply,
    classify,
    connection_refused,
)
from memtrace_loop.pipeline.backends.services import RetryLedger
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


class GuardedEngine:
    """The synchronous face (a DSPy custom engine); see the module docstring."""

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

    def _run(self, request: Request, final: Any = None) -> Response:
        s = self.settings
        loop = RetryLoop(s.policy, role=s.role, endpoint=s.endpoint, on_fatal=self._raise_fatal, stop=s.stop,
                         ledger=s.retries, scrub=self.scrub, final=final)
        return loop.run(lambda deadline: self._attempt(request, deadline))

    def _attempt(self, request: Request, deadline: float) -> Response:
        complete_by = getattr(self.inner, "complete_by", None)
        response = complete_by(request, deadline) if callable(complete_by) else self.inner.complete(request)
        return redacted_reply(check_reply(response, request.config.max_tokens), self.settings.secrets)

    def _refused_locally(self, exc: BaseException) -> bool:
        """A connection refused by a local endpoint: its server is not running (the probe gives up)."""
        return connection_refused(exc) and local_endpoint(self.settings.endpoint)

    def _before(self) -> None:
        if self.settings.stop is not None:
            self.settings.stop.check()
        if self.settings.guard is not None:
            self.settings.guard.check()

    def serve(self, request: Request) -> tuple[Response, bool]:
        """(the reply, reused from the run's store?): one logical call, steps 1-7 of the module docstring."""
        self._before()
        replies = self.settings.replies
        if replies is None:
            return self._complete(request), False
        slot = current_call()
        # the model and endpoint, not the engine's class: every face of a role shares its replies
        key = request_key(self.model_name, self.settings.endpoint, request, None if slot is None else slot.rollout_id)
        return replies.get_or_call(key, lambda: self._complete(request))

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
        if self.settings.guard is not None and not isinstance(failed, RunStopped):
            error = "" if failed is None else self.scrub(f"{type(failed).__name__}: {failed}".splitlines()[0])
            self.settings.guard.record(failed=failed is not None, error=error[:200])
        if isinstance(failed, EmptyAtMaxTokens) and self.settings.max_tokens is not None:
            self.settings.max_tokens.record(self.settings.role, failed.max_tokens)

    def probe(self, request: Request) -> Response | None:
        """One checked call for the preflight: the response, None when the endpoint refused the check
        request itself (HTTP 400-class: reachable, key accepted; logged), else `EndpointUnusable`."""
        if self.settings.stop is not None:
            self.settings.stop.check()
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


class AsyncGuardedEngine:
    """The async face (`async_engine=`): the sync face's logical call, on a worker thread."""

    def __init__(self, engine: GuardedEngine) -> None:
        self.engine = engine

    def __copy__(self) -> Any:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return self

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
