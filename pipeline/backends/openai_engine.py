"""The native engine of an OpenAI-compatible endpoint, built from an `OpenAILMConfig` (one attempt per call).

`OpenAIEngine` / `AsyncOpenAIEngine` are DSPy custom engines around DSPy 3.4's native lm15 engine,
built the way DSPy builds it for `dspy.LM("openai/...", engine="lm15", api_base=..., api_key=...,
timeout=...)` (`dspy.clients.execution._select_engine`): the wire dialect comes from the model
prefix (`openai`, `hosted_vllm`, `ollama_chat`: which token-limit field is sent), the key and base
URL from the config, `timeout_s` bounds every read, write and pool wait of one attempt. The transport
is ours (`pipeline.backends.http_transport`): the api_base's query string is appended to every
request URL (lm15 alone would put the path after it), and `complete_by(request, deadline)` cuts a
sync attempt whose reply is still arriving at the call's deadline. Owning the engine is what lets
`pipeline.backends.guarded_engine` run the retries instead of DSPy.

Each `complete` is ONE attempt: lm15 errors propagate unchanged for the retry loop to classify; a
200 body that lm15 cannot read as a chat completion (a JSON list, `choices` not a list) raises
`MalformedReply` (lm15 itself raises for a body that is not JSON; what a readable reply must carry is
`pipeline.backends.reply_check`'s). The key is read from `os.environ[api_key_env]` when the engine is built and never
leaves it: `scrub` masks it in provider text, `explain_fatal` names the variable, never the value,
and `dump_state` saves the config (api_base without user info or query), never the key. The async
engine keeps one lm15 pool per event loop (lm15's async pools are confined to their loop).

It does not retry, cache, count or log (the guarded engine and DSPy's LM layer do).
"""

from __future__ import annotations

import asyncio
import threading
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from dspy.clients.engines.lm15_engine import AsyncLM15Engine, LM15Engine, timeouts_for
from dspy.lm15 import Request, Response, RouterConfig, response_to_events
from memtrace_loop.pipeline.backends.http_transport import AsyncEndpointTransport, EndpointTransport
from memtrace_loop.pipeline.backends.lm import NO_KEY_PLACEHOLDER, OpenAILMConfig, _read_api_key, lm_model_name
from memtrace_loop.pipeline.backends.resilience import Fatal, FatalKind, MalformedReply
from memtrace_loop.pipeline.core.redaction import redact, url_credentials

__all__ = ["DEFAULT_OPENAI_BASE", "AsyncOpenAIEngine", "OpenAIEngine", "endpoint_url", "openai_endpoint"]

DEFAULT_OPENAI_BASE = "https://api.openai.com/v1"
_MASK = "***"


def endpoint_url(url: str | None) -> str:
    """An endpoint as named in logs and errors: scheme, host, port and path only (no user info, query
    or fragment, where credentials sometimes hide); "" for none."""
    if not url:
        return ""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 address keeps its brackets
        host = f"[{host}]"
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def openai_endpoint(config: OpenAILMConfig) -> str:
    """The endpoint an openai-backend config talks to, safe to log (no user info, no query)."""
    return endpoint_url(config.api_base) or DEFAULT_OPENAI_BASE


T = TypeVar("T")
_READERS = frozenset({"parse_response", "_response_from_chat_body"})  # lm15's chat-body readers


def _split_base(api_base: str | None) -> tuple[str | None, str]:
    """The api_base without its query (and fragment), and the query (no `?`)."""
    if not api_base:
        return None, ""
    parts = urlsplit(api_base)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")), parts.query


def _transport_kwargs(config: OpenAILMConfig) -> dict[str, Any]:
    timeouts = timeouts_for(config.timeout_s)
    if timeouts is None:  # pragma: no cover - timeout_s is required and positive
        return {}
    return {"connect_timeout": timeouts.connect, "read_timeout": timeouts.read,
            "write_timeout": timeouts.write, "pool_timeout": timeouts.pool}


def _router_config(config: OpenAILMConfig, key: str, transport: object) -> RouterConfig:
    model = lm_model_name(config)
    provider = LM15Engine(RouterConfig(env={}), model_type="chat").resolve(model).provider  # offline
    base, _query = _split_base(config.api_base)
    return RouterConfig(api_keys={provider: key}, base_urls={provider: base} if base else None, transport=transport)


def _unreadable(exc: Exception) -> MalformedReply | None:
    """A `MalformedReply` for an error lm15 raised while READING a 200 body (a JSON list, `choices`
    not a list), else None (an error of ours or of the request: not the reply's fault)."""
    if not isinstance(exc, TypeError | ValueError | KeyError | AttributeError):
        return None
    frames = {frame.name for frame in traceback.extract_tb(exc.__traceback__)}
    if not frames & _READERS:
        return None
    return MalformedReply(f"the reply is not a chat completion: {exc}", status=200)


def _read(attempt: Callable[[], T]) -> T:
    try:
        return attempt()
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        malformed = _unreadable(exc)
        if malformed is None:
            raise
        raise malformed from None


async def _aread(attempt: Callable[[], Awaitable[T]]) -> T:
    try:
        return await attempt()
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        malformed = _unreadable(exc)
        if malformed is None:
            raise
        raise malformed from None


class _Endpoint:
    """What both faces share: the config, the key, scrubbing and the fatal explanations."""

    def __init__(self, config: OpenAILMConfig) -> None:
        if config.backend != "openai":
            raise ValueError(f"an OpenAI engine needs backend 'openai', got {config.backend!r}")
        self.config = config
        self._key = _read_api_key(config)
        self.endpoint = openai_endpoint(config)
        self.model_name = lm_model_name(config)

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return self  # shared pools and key; a deep-copied program keeps using this engine

    def __copy__(self) -> Any:
        return self

    def scrub(self, text: str) -> str:
        """`text` with the key and any credential of the api_base (user info, query) masked."""
        raw_base = self.config.api_base
        if raw_base and raw_base != self.endpoint:
            text = text.replace(raw_base, self.endpoint)
            parts = urlsplit(raw_base)
            for secret in (parts.password, parts.username, parts.query):
                if secret and len(secret) >= 3:
                    text = text.replace(secret, _MASK)
        key = () if self._key == NO_KEY_PLACEHOLDER else (self._key,)
        return redact(text, (*key, *url_credentials(raw_base or "")))

    def explain_fatal(self, fatal: Fatal, role: str) -> str:
        """The `EndpointUnusable` cause of a fatal reply: what failed and what to check."""
        status = f"HTTP {fatal.status}" if fatal.status is not None else "no status"
        if fatal.kind is FatalKind.AUTH:
            where = (
                f"check the key in ${self.config.api_key_env}"
                if self.config.api_key_env
                else f"the endpoint wants a key: set lm.{role}.api_key_env to the NAME of the variable holding it"
            )
            return f"authentication failed ({status}): {where}"
        if fatal.kind is FatalKind.NOT_FOUND:
            return (
                f"model {self.config.model!r} or path not found ({status}) at POST {self.endpoint}/chat/completions: "
                f"check lm.{role}.model and lm.{role}.api_base ({fatal.detail})"
            )
        return f"billing or quota exhausted ({status}): {fatal.detail}"

    def dump_state(self) -> dict[str, Any]:
        state = self.config.model_dump()
        state["api_base"] = endpoint_url(self.config.api_base) or None  # credentials in a URL are not saved
        return state


class OpenAIEngine(_Endpoint):
    """One synchronous attempt against the endpoint (a DSPy custom engine)."""

    def __init__(self, config: OpenAILMConfig) -> None:
        super().__init__(config)
        self._transport = EndpointTransport(query=_split_base(config.api_base)[1], **_transport_kwargs(config))
        self._engine = LM15Engine(_router_config(config, self._key, self._transport), model_type="chat")

    def complete(self, request: Request) -> Response:
        return _read(lambda: self._engine.complete(request))

    def complete_by(self, request: Request, deadline: float) -> Response:
        """`complete`, ended by `deadline` (`time.monotonic()`): connecting, waiting and reading."""
        with self._transport.within(deadline):
            return self.complete(request)

    def stream(self, request: Request) -> Iterator[Any]:
        return iter(response_to_events(self.complete(request)))

    def close(self) -> None:
        self._engine.close()

    @classmethod
    def load_state(cls, state: dict[str, Any]) -> OpenAIEngine:
        return cls(OpenAILMConfig.model_validate(state))

    def __repr__(self) -> str:
        return f"OpenAIEngine({self.model_name!r} at {self.endpoint})"


class AsyncOpenAIEngine(_Endpoint):
    """The async face: one native async engine per running event loop."""

    def __init__(self, config: OpenAILMConfig) -> None:
        super().__init__(config)
        self._lock = threading.Lock()
        self._engine_by_loop: dict[asyncio.AbstractEventLoop, AsyncLM15Engine] = {}

    def _engine(self) -> AsyncLM15Engine:
        loop = asyncio.get_running_loop()
        with self._lock:
            for dead in [known for known in self._engine_by_loop if known.is_closed()]:
                del self._engine_by_loop[dead]
            engine = self._engine_by_loop.get(loop)
            if engine is None:
                transport = AsyncEndpointTransport(
                    query=_split_base(self.config.api_base)[1], **_transport_kwargs(self.config)
                )
                engine = AsyncLM15Engine(_router_config(self.config, self._key, transport), model_type="chat")
                self._engine_by_loop[loop] = engine
            return engine

    async def complete(self, request: Request) -> Response:
        return await _aread(lambda: self._engine().complete(request))

    async def stream(self, request: Request) -> AsyncIterator[Any]:
        for event in response_to_events(await self.complete(request)):
            yield event

    async def aclose(self) -> None:
        with self._lock:
            engine = self._engine_by_loop.pop(asyncio.get_running_loop(), None)
        if engine is not None:
            await engine.aclose()

    @classmethod
    def load_state(cls, state: dict[str, Any]) -> AsyncOpenAIEngine:
        return cls(OpenAILMConfig.model_validate(state))

    def __repr__(self) -> str:
        return f"AsyncOpenAIEngine({self.model_name!r} at {self.endpoint})"
