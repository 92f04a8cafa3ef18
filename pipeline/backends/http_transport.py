"""The HTTP transports of an OpenAI-compatible endpoint: the api_base's query kept, the call's deadline kept.

DSPy's native client (lm15) builds every request URL as `{api_base}/chat/completions`, so an api_base
with a query (`https://gw/openai/v1?api-version=2024-02-01`, what Azure-style gateways need) became
`...?api-version=2024-02-01/chat/completions`: the gateway answered 404. `pipeline.backends.
openai_engine` gives lm15 the api_base WITHOUT its query and one of these transports, which appends
the query to every request URL (path and query preserved).

lm15's own timeouts bound each socket operation (`timeout_s`), not a whole reply: a 200 dripped one
byte a second never trips a 60 s read timeout. `EndpointTransport` (sync) also keeps the deadline of
the logical call in progress on the calling thread (`within(deadline)`, a `time.monotonic()` value
set by the guarded engine): connecting, sending, waiting for the head and reading the body each get
at most the time left, and a body still arriving at the deadline is cut (`ReadTimeout` saying so), so
an attempt ends within about a second of it. The async engine needs no such help: the retry loop
cancels an async attempt at the deadline (`asyncio.timeout`), which closes its connection.

It overrides four I/O steps of lm15's `StdlibTransport` (`_open`, `_send_request`, `_read_head`,
`_iter_body`; DSPy's vendored lm15 is pinned with DSPy) and changes nothing else: pooling, TLS and
proxies are lm15's. A body still arriving after `timeout_s` is logged once at WARNING while it arrives.
It does not retry or classify errors.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # DSPy's vendored lm15 has a py.typed marker inside untyped dspy: mypy must not follow it
    ReadError: Any
    ReadTimeout: Any
    StdlibAsyncTransport: Any
    StdlibTransport: Any
    TransportRequest = Any
    ResponseHeadParser: Any
else:
    from dspy._vendor.lm15.transports import (
        ReadError,
        ReadTimeout,
        StdlibAsyncTransport,
        StdlibTransport,
        TransportRequest,
    )
    from dspy._vendor.lm15.transports._http11 import ResponseHeadParser

logger = logging.getLogger(__name__)

__all__ = ["AsyncEndpointTransport", "EndpointTransport", "with_query"]

_READ_CHUNK = 64 * 1024


def with_query(url: str, query: str) -> str:
    """`url` with `query` (no leading `?`) appended to its own query, if any (once: a URL already
    ending with it is returned as is)."""
    if not query or url.endswith(f"?{query}") or url.endswith(f"&{query}"):
        return url
    return f"{url}{'&' if '?' in url else '?'}{query}"


def _settings(transport: Any) -> dict[str, Any]:
    """The constructor keywords of a transport like `transport` (lm15's `copy` keeps these too)."""
    names = ("connect_timeout", "read_timeout", "write_timeout", "pool_timeout", "max_connections", "verify",
             "ca_bundle", "user_agent", "proxy", "trust_env", "query")
    return {name: getattr(transport, f"_{name}") for name in names}


class _DeadlineCut(ReadTimeout):
    """The call's deadline passed while this attempt was still connecting, sending or reading."""


class EndpointTransport(StdlibTransport):
    """lm15's sync transport plus the api_base's query and the current call's deadline (see module)."""

    def __init__(self, *, query: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._query = query
        self._calls = threading.local()  # per thread: the deadline of the call it is making

    def copy(self) -> EndpointTransport:
        return type(self)(**_settings(self))

    @contextmanager
    def within(self, deadline: float | None) -> Iterator[None]:
        """Requests made on this thread inside the block end by `deadline` (`time.monotonic()`)."""
        previous = getattr(self._calls, "deadline", None)
        self._calls.deadline = deadline
        try:
            yield
        finally:
            self._calls.deadline = previous

    def _left(self, bound: float, doing: str) -> float:
        """`bound` or the seconds left before the deadline, whichever is shorter; raise when none is left."""
        deadline = getattr(self._calls, "deadline", None)
        if deadline is None:
            return bound
        left = deadline - time.monotonic()
        if left <= 0:
            raise _DeadlineCut(f"the call's deadline passed while {doing}")
        return min(bound, left)

    def stream(self, request: TransportRequest) -> Any:
        request.url = with_query(request.url, self._query)
        return super().stream(request)

    def _open(self, parsed: Any, *, connect_timeout: float, **kwargs: Any) -> Any:
        return super()._open(parsed, connect_timeout=self._left(connect_timeout, "connecting"), **kwargs)

    def _send_request(self, conn: Any, request: Any, parsed: Any, *, write_timeout: float, **kwargs: Any) -> None:
        super()._send_request(conn, request, parsed, write_timeout=self._left(write_timeout, "sending"), **kwargs)

    def _read_head(self, conn: Any, *, read_timeout: float) -> Any:
        parser = ResponseHeadParser()
        while not parser.complete:
            conn.sock.settimeout(self._left(read_timeout, "waiting for the reply's head"))
            try:
                data = conn.sock.recv(_READ_CHUNK)
            except TimeoutError:
                self._left(read_timeout, "waiting for the reply's head")  # raises at the deadline
                raise ReadTimeout(
                    f"read timed out waiting for headers: no bytes for {read_timeout:g}s (the read timeout, timeout_s)"
                ) from None
            except OSError as exc:
                raise ReadError(f"read failed: {exc}") from exc
            if not data:
                raise ReadError("server closed connection before sending response")
            parser.feed(data)
        return parser

    def _iter_body(self, conn: Any, decoder: Any, *, read_timeout: float, **kwargs: Any) -> Iterator[bytes]:
        doing = "the reply was still arriving"
        inner = super()._iter_body(conn, decoder, read_timeout=self._left(read_timeout, doing), **kwargs)
        received, started, warned = 0, time.monotonic(), False
        try:
            while True:
                try:
                    chunk = next(inner)
                except StopIteration:
                    return
                except ReadTimeout:
                    self._left(read_timeout, f"{doing} ({received} bytes read)")  # the deadline: say so
                    raise
                received += len(chunk)
                yield chunk
                if not warned and (slow := time.monotonic() - started) > read_timeout:
                    warned = True  # said while it happens, once per reply
                    logger.warning("a reply from %s:%s has been arriving for %.0f s (%d bytes so far); the call's "
                                   "deadline_s ends it", conn.origin[1], conn.origin[2], slow, received)
                conn.sock.settimeout(self._left(read_timeout, f"{doing} ({received} bytes read)"))
        finally:
            inner.close()


class AsyncEndpointTransport(StdlibAsyncTransport):
    """lm15's async transport plus the api_base's query (the deadline is the retry loop's cancel)."""

    def __init__(self, *, query: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._query = query

    def copy(self) -> AsyncEndpointTransport:
        return type(self)(**_settings(self))

    def stream(self, request: TransportRequest) -> Any:
        request.url = with_query(request.url, self._query)
        return super().stream(request)
