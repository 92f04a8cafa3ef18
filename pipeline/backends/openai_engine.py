"""The engine of an OpenAI-compatible endpoint, built from an `OpenAILMConfig`: one attempt per call.

`OpenAIEngine` runs DSPy's native lm15 engine, built as DSPy builds it for `dspy.LM("openai/...",
engine="lm15", ...)`: the wire dialect from the model prefix, key and base URL from the config,
`timeout_s` bounding every read, write and pool wait. Its attempts run on lm15's async client, on one
event loop thread per engine, so `complete_by(request, deadline)` cancels an attempt whose reply is
still arriving at the call's deadline (lm15's timeouts bound each socket wait, not a reply dripped one
byte a second); a reply arriving for longer than `timeout_s` is logged once. The api_base's query
(Azure-style `?api-version=...`) is appended to every request URL.

lm15 errors propagate unchanged for the guarded engine to classify; a 200 body lm15 cannot read as a
chat completion raises `MalformedReply`. The key is read from `os.environ[api_key_env]` when the engine
is built and never leaves it: `scrub` masks it, `explain_fatal` names the variable, `dump_state` saves
the config (api_base without user info or query). It does not retry, cache, count or check replies.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import traceback
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from dspy.clients.engines.lm15_engine import AsyncLM15Engine, LM15Engine, timeouts_for
from dspy.lm15 import Request, Response, RouterConfig
from memtrace_loop.pipeline.backends.guarded_engine import Fatal, FatalKind, MalformedReply
from memtrace_loop.pipeline.backends.lm import NO_KEY_PLACEHOLDER, OpenAILMConfig, Shared, lm_model_name, read_key
from memtrace_loop.pipeline.core.redaction import redact, url_credentials

if TYPE_CHECKING:  # DSPy's vendored lm15 has a py.typed marker inside untyped dspy: mypy must not follow it
    StdlibAsyncTransport: Any
else:
    from dspy._vendor.lm15.transports import StdlibAsyncTransport

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_OPENAI_BASE", "OpenAIEngine", "endpoint_url", "openai_endpoint", "with_query"]

DEFAULT_OPENAI_BASE = "https://api.openai.com/v1"
_READERS = frozenset({"parse_response", "_response_from_chat_body"})  # lm15's chat-body readers


def endpoint_url(url: str | None) -> str:
    """An endpoint as named in logs and errors: scheme, host, port and path only (no user info, query
    or fragment, where credentials sometimes hide); "" for none."""
    if not url:
        return ""
    parts = urlsplit(url)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host  # an IPv6 address keeps its brackets
    host = f"{host}:{parts.port}" if parts.port is not None else host
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def openai_endpoint(config: OpenAILMConfig) -> str:
    """The endpoint an openai-backend config talks to, safe to log (no user info, no query)."""
    return endpoint_url(config.api_base) or DEFAULT_OPENAI_BASE


def with_query(url: str, query: str) -> str:
    """`url` with `query` (no leading `?`) appended to its own query, once."""
    if not query or url.endswith(f"?{query}") or url.endswith(f"&{query}"):
        return url
    return f"{url}{'&' if '?' in url else '?'}{query}"


class _QueryTransport(StdlibAsyncTransport):
    """lm15's async transport with the api_base's query appended to every request URL."""

    def __init__(self, *, query: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._query = query

    def copy(self) -> _QueryTransport:
        clone: _QueryTransport = super().copy()
        clone._query = self._query
        return clone

    def stream(self, request: Any) -> Any:
        request.url = with_query(request.url, self._query)
        return super().stream(request)


def _serve_forever(loop: asyncio.AbstractEventLoop) -> None:
    try:
        loop.run_forever()
    finally:
        loop.close()


def _unreadable(exc: Exception) -> MalformedReply | None:
    """A `MalformedReply` for an error lm15 raised while READING a 200 body, else None (not the reply's fault)."""
    if not isinstance(exc, TypeError | ValueError | KeyError | AttributeError):
        return None
    if not {frame.name for frame in traceback.extract_tb(exc.__traceback__)} & _READERS:
        return None
    return MalformedReply(f"the reply is not a chat completion: {exc}", status=200)


class OpenAIEngine(Shared):
    """One attempt against the endpoint per call (sync; the attempts run on the engine's event loop)."""

    def __init__(self, config: OpenAILMConfig) -> None:
        if config.backend != "openai":
            raise ValueError(f"an OpenAI engine needs backend 'openai', got {config.backend!r}")
        self.config = config
        self._key = read_key(config.api_key_env, f"model {config.model!r}")
        self.endpoint = openai_endpoint(config)
        self.model_name = lm_model_name(config)
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._engine: AsyncLM15Engine | None = None  # made and used on the loop's thread only
        self._pid = os.getpid()
        self._stop: Callable[[], Any] = lambda: None

    def _router(self) -> AsyncLM15Engine:
        config, parts = self.config, urlsplit(self.config.api_base or "")
        timeouts = timeouts_for(config.timeout_s)
        assert timeouts is not None  # timeout_s is required and positive
        transport = _QueryTransport(query=parts.query, connect_timeout=timeouts.connect, read_timeout=timeouts.read,
                                    write_timeout=timeouts.write, pool_timeout=timeouts.pool)
        provider = LM15Engine(RouterConfig(env={}), model_type="chat").resolve(self.model_name).provider  # offline
        base = urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")) if config.api_base else None
        router = RouterConfig(api_keys={provider: self._key}, base_urls={provider: base} if base else None,
                              transport=transport)
        return AsyncLM15Engine(router, model_type="chat")

    async def _attempt(self, request: Request, seconds: float) -> Response:
        if self._engine is None:
            self._engine = self._router()
        task = asyncio.ensure_future(self._engine.complete(request))
        try:
            async with asyncio.timeout(seconds):
                await asyncio.wait({task}, timeout=self.config.timeout_s)
                if not task.done():  # said while it happens, once per reply
                    logger.warning("a reply from %s has been arriving for %.0f s; the call's deadline_s ends it",
                                   self.endpoint, self.config.timeout_s)
                return await task
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            malformed = _unreadable(exc)
            if malformed is None:
                raise
            raise malformed from None
        finally:
            task.cancel()

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._pid != os.getpid():  # none yet, or a forked child (no thread)
                loop = self._loop = asyncio.new_event_loop()
                self._engine, self._pid = None, os.getpid()
                threading.Thread(target=_serve_forever, args=(loop,), name=f"lm {self.endpoint}", daemon=True).start()
                self._stop = weakref.finalize(self, loop.call_soon_threadsafe, loop.stop)  # ends with the engine
            return self._loop

    def complete_by(self, request: Request, deadline: float) -> Response:
        """One attempt, ended by `deadline` (`time.monotonic()`): connecting, waiting and reading."""
        future = asyncio.run_coroutine_threadsafe(self._attempt(request, deadline - time.monotonic()),
                                                  self._running_loop())
        try:
            return future.result()
        except BaseException:
            future.cancel()  # Ctrl-C while waiting: the request is cancelled too
            raise

    def complete(self, request: Request) -> Response:
        return self.complete_by(request, time.monotonic() + self.config.deadline_s)

    def close(self) -> None:
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is not None:
            engine, self._engine = self._engine, None
            if engine is not None:
                asyncio.run_coroutine_threadsafe(engine.aclose(), loop).result(timeout=5)
            self._stop()

    def scrub(self, text: str) -> str:
        """`text` with the key and any credential of the api_base (user info, query) masked."""
        raw_base = self.config.api_base
        if raw_base and raw_base != self.endpoint:
            text = text.replace(raw_base, self.endpoint)
            parts = urlsplit(raw_base)
            for secret in (parts.password, parts.username, parts.query):
                if secret and len(secret) >= 3:
                    text = text.replace(secret, "***")
        key = () if self._key == NO_KEY_PLACEHOLDER else (self._key,)
        return redact(text, (*key, *url_credentials(raw_base or "")))

    def explain_fatal(self, fatal: Fatal, role: str) -> str:
        """The `EndpointUnusable` cause of a fatal reply: what failed and what to check."""
        status = f"HTTP {fatal.status}" if fatal.status is not None else "no status"
        if fatal.kind is FatalKind.AUTH:
            where = (f"check the key in ${self.config.api_key_env}" if self.config.api_key_env else
                     f"the endpoint wants a key: set lm.{role}.api_key_env to the NAME of the variable holding it")
            return f"authentication failed ({status}): {where}"
        if fatal.kind is FatalKind.NOT_FOUND:
            return (f"model {self.config.model!r} or path not found ({status}) at POST "
                    f"{self.endpoint}/chat/completions: check lm.{role}.model and lm.{role}.api_base ({fatal.detail})")
        return f"billing or quota exhausted ({status}): {fatal.detail}"

    def dump_state(self) -> dict[str, Any]:
        state = self.config.model_dump()
        state["api_base"] = endpoint_url(self.config.api_base) or None  # credentials in a URL are not saved
        return state

    @classmethod
    def load_state(cls, state: dict[str, Any]) -> OpenAIEngine:
        return cls(OpenAILMConfig.model_validate(state))

    def __repr__(self) -> str:
        return f"OpenAIEngine({self.model_name!r} at {self.endpoint})"

