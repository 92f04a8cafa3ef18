"""A real fault-injecting HTTP proxy for tests: put it between a client and an OpenAI-protocol server.

`FaultProxy(upstream_base_url, plan)` runs a stdlib `ThreadingHTTPServer` on 127.0.0.1 (an ephemeral
port) in a background thread (a context manager). Every request (method, path with query, headers,
body) is forwarded to the upstream's host with the same path, unless the fault schedule says otherwise.
`base_url` has the upstream's path (`http://127.0.0.1:PORT/v1` in front of `OpenAIStubServer`), so it
is the value to pass as `api_base` (DSPy's native lm15 client) or `base_url` (the `openai` client).

Faults, per request on `FaultPlan.only_paths` (path suffixes; default chat completions and embeddings):
- `rate_limit` — 429, an OpenAI-style error JSON and `Retry-After: <plan.retry_after>` (default "1");
- `server_error` — 500, 502 or 503 (chosen by the schedule), an OpenAI-style error JSON;
- `timeout` — the connection is held `plan.stall_s` seconds, then dropped unanswered
  (`stall_then="drop"`) or forwarded and answered after the client gave up (`stall_then="answer"`);
- `non_json` — 200, `content-type: application/json`, an HTML or plain-text body (a broken gateway);
- `truncated` — forwarded; the upstream's body is cut in half, Content-Length matching the cut body;
- `empty_body` — 200 with an empty body;
- `garbled_content` — forwarded; a chat.completion whose message content is replaced by garbage
  (on other paths, or when the upstream did not answer a chat.completion, it is forwarded unchanged);
- the shape-less 200s, each forwarded and its chat.completion reshaped (unchanged, like `garbled_content`,
  when the upstream did not answer one): `json_list` (the completion inside a JSON list),
  `no_choices` (the object without `choices`), `no_message` (a choice without `message`),
  `content_null` (`content: null`), `empty_at_length` (`content: ""`, `finish_reason: "length"`, all of
  the request's `max_tokens` billed: what a reasoning model returns when its budget runs out);
- `slow_drip` — forwarded; the answer's head at once, then its body one byte every `plan.drip_s` seconds
  (a reply that never trips a read timeout; ended early by `stop()`/`dead()`).
Which request gets which fault is a pure function of (seed, n), n counting the requests on
`only_paths` while faults are active (`FaultPlan.fault_at(n)`): a rerun with the same order of
requests gets the same faults. A retry is just the next request: it may fault again, as in real life.

Modes beside the plan: `always(status, retry_after, body_text, paths)` answers every request with that
status; `dead()` stops listening and cuts open connections (connection refused); `pause()`/`resume()`
suspend and resume fault injection (everything forwarded, the schedule's counter does not advance);
`clear()` forwards everything from then on (plan, `always` and `dead` gone; listening again).

Every request is recorded on arrival with `time.monotonic()` (`ProxiedRequest`: path, fault, status
answered, 0 if dropped): `requests`, `count(kind)`, `received_after(t)`; thread-safe.
Standalone: `python -m tests.support.fault_proxy --upstream URL|stub --rate-limit 0.1 ...` prints the
base URL on its first stdout line (`--log` adds one JSON line per request).

It is a test double only: no TLS, no streaming passthrough (bodies are read whole), no CONNECT.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import random
import socket
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

from tests.support.openai_server import MALFORMED_CONTENT, RecordedRequest, _error_body


class FaultKind(StrEnum):
    """What the proxy did with one request."""

    FORWARDED = "forwarded"
    RATE_LIMIT = "rate_limit"
    SERVER_ERROR = "server_error"
    TIMEOUT = "timeout"
    NON_JSON = "non_json"
    TRUNCATED = "truncated"
    EMPTY_BODY = "empty_body"
    GARBLED_CONTENT = "garbled_content"
    JSON_LIST = "json_list"
    NO_CHOICES = "no_choices"
    NO_MESSAGE = "no_message"
    CONTENT_NULL = "content_null"
    EMPTY_AT_LENGTH = "empty_at_length"
    SLOW_DRIP = "slow_drip"
    ALWAYS = "always"  # answered by `always(status, ...)`
    DEAD = "dead"  # arrived on an open connection after `dead()`: dropped


# The plan's rate fields, in the fixed order the schedule draws them (new kinds go last, so a seeded
# schedule of the older kinds stays what it was).
RATE_KINDS: tuple[FaultKind, ...] = (
    FaultKind.RATE_LIMIT,
    FaultKind.SERVER_ERROR,
    FaultKind.TIMEOUT,
    FaultKind.NON_JSON,
    FaultKind.TRUNCATED,
    FaultKind.EMPTY_BODY,
    FaultKind.GARBLED_CONTENT,
    FaultKind.JSON_LIST,
    FaultKind.NO_CHOICES,
    FaultKind.NO_MESSAGE,
    FaultKind.CONTENT_NULL,
    FaultKind.EMPTY_AT_LENGTH,
    FaultKind.SLOW_DRIP,
)
# The 200 replies that carry no usable completion: every one must be a failed attempt for the client.
SHAPELESS_KINDS: tuple[FaultKind, ...] = (
    FaultKind.NON_JSON, FaultKind.TRUNCATED, FaultKind.EMPTY_BODY, FaultKind.JSON_LIST, FaultKind.NO_CHOICES,
    FaultKind.NO_MESSAGE, FaultKind.CONTENT_NULL, FaultKind.EMPTY_AT_LENGTH,
)
SERVER_ERROR_STATUSES = (500, 502, 503)
NON_JSON_BODIES = (
    b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1>"
    b"</center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n",
    b"upstream connect error or disconnect/reset before headers. reset reason: connection termination",
)
DEFAULT_PATHS = ("/chat/completions", "/embeddings")
_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "trailers",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
}


@dataclass(frozen=True)
class Fault:
    """The fault scheduled for one request: its kind and, for `server_error`, the status."""

    kind: FaultKind
    status: int = 0
    variant: int = 0  # which NON_JSON_BODIES entry


@dataclass(frozen=True)
class FaultPlan:
    """A seeded fault schedule: each rate is the probability that a faultable request gets that fault."""

    seed: int = 0
    rate_limit: float = 0.0
    server_error: float = 0.0
    timeout: float = 0.0
    non_json: float = 0.0
    truncated: float = 0.0
    empty_body: float = 0.0
    garbled_content: float = 0.0
    json_list: float = 0.0
    no_choices: float = 0.0
    no_message: float = 0.0
    content_null: float = 0.0
    empty_at_length: float = 0.0
    slow_drip: float = 0.0
    drip_s: float = 1.0  # seconds between two bytes of a `slow_drip` body
    retry_after: str | None = "1"  # the 429's Retry-After header value; None omits it
    stall_s: float = 10.0  # how long a `timeout` fault holds the connection
    stall_then: Literal["drop", "answer"] = "drop"
    only_paths: tuple[str, ...] = DEFAULT_PATHS  # path suffixes faults apply to (query string ignored)

    def __post_init__(self) -> None:
        rates = self.rates()
        bad = [name for name, rate in rates.items() if not 0.0 <= rate <= 1.0]
        if bad:
            raise ValueError(f"fault rates must be within [0, 1]: {bad}")
        if sum(rates.values()) > 1.0 + 1e-9:
            raise ValueError(f"fault rates sum to {sum(rates.values()):g} > 1")
        if self.stall_s < 0 or self.drip_s < 0:
            raise ValueError("stall_s and drip_s must be >= 0")
        if self.stall_then not in ("drop", "answer"):
            raise ValueError("stall_then must be 'drop' or 'answer'")

    def rates(self) -> dict[str, float]:
        return {kind.value: float(getattr(self, kind.value)) for kind in RATE_KINDS}

    def applies_to(self, path: str) -> bool:
        bare = path.split("?", 1)[0].rstrip("/")
        return any(bare.endswith(suffix.rstrip("/")) for suffix in self.only_paths)

    def fault_at(self, n: int) -> Fault:
        """The fault for the n-th faultable request (n from 0): a pure function of (seed, n)."""
        rng = random.Random(f"fault-proxy:{self.seed}:{n}")
        draw, pick = rng.random(), rng.randrange(6)
        edge = 0.0
        for kind in RATE_KINDS:
            edge += getattr(self, kind.value)
            if draw < edge:
                if kind is FaultKind.SERVER_ERROR:
                    return Fault(kind, status=SERVER_ERROR_STATUSES[pick % len(SERVER_ERROR_STATUSES)])
                return Fault(kind, variant=pick % len(NON_JSON_BODIES))
        return Fault(FaultKind.FORWARDED)

    def schedule(self, count: int, start: int = 0) -> list[FaultKind]:
        return [self.fault_at(n).kind for n in range(start, start + count)]


@dataclass(frozen=True)
class ProxiedRequest(RecordedRequest):
    """One request as the proxy received it, with what it did (`fault`) and the status it answered."""

    fault: FaultKind = FaultKind.FORWARDED


@dataclass(frozen=True)
class _Always:
    status: int
    retry_after: str | None
    body_text: str | None
    paths: tuple[str, ...] | None

    def applies_to(self, path: str) -> bool:
        bare = path.split("?", 1)[0].rstrip("/")
        return self.paths is None or any(bare.endswith(suffix.rstrip("/")) for suffix in self.paths)


@dataclass(frozen=True)
class _Answer:
    status: int  # 0: drop the connection without answering
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    fault: FaultKind = FaultKind.FORWARDED
    drip_s: float = 0.0  # > 0: the body is sent one byte every drip_s seconds


@dataclass
class _State:
    plan: FaultPlan = field(default_factory=FaultPlan)
    always: _Always | None = None
    paused: bool = False
    dead: bool = False
    counter: int = 0  # faultable requests seen while faults were active


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the stdlib's 5 drops connections when many clients connect at once


class FaultProxy:
    """Fault-injecting HTTP proxy in front of `upstream` (a base URL); a context manager."""

    def __init__(self, upstream: str, plan: FaultPlan | None = None, port: int = 0) -> None:
        parts = urllib.parse.urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"upstream must be an http:// URL, got {upstream!r}")
        self.upstream = upstream.rstrip("/")
        self._upstream_host = parts.hostname
        self._upstream_port = parts.port or 80
        self._prefix = parts.path.rstrip("/")
        self.forward_timeout_s = 30.0
        self._requested_port = port
        self._port = 0
        self._lock = threading.Lock()
        self._state = _State(plan=plan or FaultPlan())
        self._requests: list[ProxiedRequest] = []
        self._seq = 0
        self._connections: set[socket.socket] = set()
        self._wake = threading.Event()  # set by stop()/dead(): ends stalls
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> FaultProxy:
        with self._lock:
            if self._server is not None:
                return self
            self._wake.clear()
            server = _Server(("127.0.0.1", self._port or self._requested_port), _make_handler(self))
            self._port = int(server.server_address[1])
            self._server = server
            self._thread = threading.Thread(
                target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="fault-proxy", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        self._wake.set()
        with self._lock:
            server, thread = self._server, self._thread
            self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        self._cut_connections()
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if not self._port:
            raise RuntimeError("proxy was never started")
        return self._port

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:PORT` + the upstream's path (the same URL after `dead()`: refused)."""
        return f"http://127.0.0.1:{self.port}{self._prefix}"

    # ------------------------------------------------------------------- modes
    @property
    def plan(self) -> FaultPlan:
        with self._lock:
            return self._state.plan

    def set_plan(self, plan: FaultPlan, restart_schedule: bool = True) -> None:
        """Use `plan` from now on (its schedule from n=0 unless `restart_schedule` is False)."""
        with self._lock:
            self._state.plan = plan
            if restart_schedule:
                self._state.counter = 0

    def always(
        self,
        status: int,
        retry_after: str | float | None = None,
        body_text: str | None = None,
        paths: tuple[str, ...] | None = None,
    ) -> None:
        """Answer every request (on `paths` suffixes; None: every path) with `status` and an OpenAI-style
        error JSON whose message is `body_text` (default "injected failure <status>")."""
        header = None if retry_after is None else _seconds_text(retry_after)
        with self._lock:
            self._state.always = _Always(status, header, body_text, paths)

    def dead(self) -> None:
        """Stop listening (new connections are refused) and cut open ones; `clear()` revives."""
        with self._lock:
            self._state.dead = True
            server, thread = self._server, self._thread
            self._server = self._thread = None
        self._wake.set()
        if server is not None:
            server.shutdown()
            server.server_close()
        self._cut_connections()
        if thread is not None:
            thread.join(timeout=5)

    def pause(self) -> None:
        """Suspend fault injection: forward everything; the schedule's counter stays where it is."""
        with self._lock:
            self._state.paused = True

    def resume(self) -> None:
        with self._lock:
            self._state.paused = False

    def clear(self) -> None:
        """Forward everything from now on: no plan, no `always`, listening again (same port) if dead."""
        with self._lock:
            was_dead = self._state.dead
            self._state = _State()
        if was_dead:
            self.start()

    # --------------------------------------------------------------- recording
    @property
    def requests(self) -> list[ProxiedRequest]:
        with self._lock:
            return list(self._requests)

    def count(self, kind: FaultKind | str | None = None) -> int:
        """How many requests were received (with that fault kind, if given)."""
        return sum(1 for request in self.requests if kind is None or request.fault == kind)

    def received_after(self, t: float) -> list[ProxiedRequest]:
        """The requests that arrived after monotonic time `t` (same clock as `time.monotonic()`)."""
        return [request for request in self.requests if request.received_at > t]

    def reset(self) -> None:
        """Forget recorded requests (modes and the schedule's position stay)."""
        with self._lock:
            self._requests.clear()

    # ---------------------------------------------------------------- internals
    def _decide(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[ProxiedRequest, Fault]:
        with self._lock:
            state = self._state
            self._seq += 1
            if state.dead:
                fault = Fault(FaultKind.DEAD)
            elif state.always is not None and state.always.applies_to(path):
                fault = Fault(FaultKind.ALWAYS, status=state.always.status)
            elif not state.paused and state.plan.applies_to(path):
                fault = state.plan.fault_at(state.counter)
                state.counter += 1
            else:
                fault = Fault(FaultKind.FORWARDED)
            request = ProxiedRequest(method, path, headers, body, seq=self._seq, fault=fault.kind)
            self._requests.append(request)
            return request, fault

    def _settle(self, request: ProxiedRequest, answer: _Answer) -> None:
        """Record the status answered (0: dropped) and the fault that really happened."""
        with self._lock:  # by seq: a reset() may have happened while the request was pending
            for index, recorded in enumerate(self._requests):
                if recorded.seq == request.seq:
                    self._requests[index] = replace(recorded, status=answer.status, fault=answer.fault)
                    return

    def _answer(self, request: ProxiedRequest, fault: Fault) -> _Answer:
        with self._lock:
            plan, always = self._state.plan, self._state.always
        kind = fault.kind
        if kind is FaultKind.DEAD:
            return _Answer(0, fault=kind)
        if kind is FaultKind.ALWAYS and always is not None:
            message = always.body_text or f"injected failure {always.status}"
            headers = () if always.retry_after is None else (("Retry-After", always.retry_after),)
            return _json_answer(always.status, _error_body(always.status, message), headers, kind)
        if kind is FaultKind.RATE_LIMIT:
            headers = () if plan.retry_after is None else (("Retry-After", plan.retry_after),)
            return _json_answer(429, _error_body(429, "Rate limit reached (injected)"), headers, kind)
        if kind is FaultKind.SERVER_ERROR:
            return _json_answer(fault.status, _error_body(fault.status, f"injected {fault.status}"), (), kind)
        if kind is FaultKind.NON_JSON:
            return _Answer(200, NON_JSON_BODIES[fault.variant], (("Content-Type", "application/json"),), kind)
        if kind is FaultKind.EMPTY_BODY:
            return _Answer(200, b"", (("Content-Type", "application/json"),), kind)
        if kind is FaultKind.TIMEOUT:
            woken = self._wake.wait(plan.stall_s)
            if woken or plan.stall_then == "drop":
                return _Answer(0, fault=kind)
        answer = self._forward(request)
        if kind is FaultKind.TRUNCATED:
            return replace(answer, body=answer.body[: len(answer.body) // 2], fault=kind)
        if kind is FaultKind.GARBLED_CONTENT:
            garbled = _garble(answer)
            return replace(garbled, fault=kind if garbled is not answer else FaultKind.FORWARDED)
        if kind in _RESHAPES:
            reshaped = _reshape(answer, kind, request)
            return replace(reshaped, fault=kind if reshaped is not answer else FaultKind.FORWARDED)
        if kind is FaultKind.SLOW_DRIP:
            return replace(answer, fault=kind, drip_s=plan.drip_s)
        return replace(answer, fault=kind)

    def _forward(self, request: ProxiedRequest) -> _Answer:
        headers = {key: value for key, value in request.headers.items() if key.lower() not in _HOP_BY_HOP}
        connection = http.client.HTTPConnection(
            self._upstream_host, self._upstream_port, timeout=self.forward_timeout_s
        )
        try:
            connection.request(request.method, request.path, body=request.body or None, headers=headers)
            response = connection.getresponse()
            body = response.read()
            kept = tuple((key, value) for key, value in response.getheaders() if key.lower() not in _HOP_BY_HOP)
            return _Answer(response.status, body, kept)
        except (OSError, http.client.HTTPException) as exc:
            message = f"fault proxy: upstream {self.upstream} unreachable: {type(exc).__name__}: {exc}"
            return _json_answer(502, _error_body(502, message), (), FaultKind.FORWARDED)
        finally:
            connection.close()

    def _track(self, sock: socket.socket, alive: bool) -> None:
        with self._lock:
            if alive:
                self._connections.add(sock)
            else:
                self._connections.discard(sock)

    def _cut_connections(self) -> None:
        with self._lock:
            connections = list(self._connections)
        for sock in connections:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def _json_answer(status: int, payload: Any, headers: tuple[tuple[str, str], ...], fault: FaultKind) -> _Answer:
    return _Answer(status, json.dumps(payload).encode(), (("Content-Type", "application/json"), *headers), fault)


def _garble(answer: _Answer) -> _Answer:
    """The same chat.completion with its message content replaced by garbage; anything else unchanged."""
    try:
        payload = json.loads(answer.body)
        choices = payload["choices"] if payload.get("object") == "chat.completion" else []
    except (ValueError, AttributeError, KeyError, TypeError):
        return answer
    for choice in choices:
        if isinstance(choice, dict) and isinstance(choice.get("message"), dict):
            choice["message"]["content"] = MALFORMED_CONTENT
    return replace(answer, body=json.dumps(payload).encode()) if choices else answer


def _completion(answer: _Answer) -> dict[str, Any] | None:
    try:
        payload = json.loads(answer.body)
    except ValueError:
        return None
    ok = isinstance(payload, dict) and payload.get("object") == "chat.completion" and payload.get("choices")
    return payload if ok else None


def _billed_limit(request: ProxiedRequest) -> int:
    try:
        body = json.loads(request.body)
    except ValueError:
        body = {}
    limit = body.get("max_completion_tokens") or body.get("max_tokens") if isinstance(body, dict) else None
    return int(limit) if isinstance(limit, int) else 1000


def _cut_at_length(payload: dict[str, Any], request: ProxiedRequest) -> Any:
    for choice in payload["choices"]:
        choice["message"]["content"] = ""
        choice["finish_reason"] = "length"
    usage = payload.setdefault("usage", {})
    usage["completion_tokens"] = _billed_limit(request)
    usage["total_tokens"] = usage.get("prompt_tokens", 0) + usage["completion_tokens"]
    return payload


def _null_content(payload: dict[str, Any]) -> Any:
    for choice in payload["choices"]:
        choice["message"]["content"] = None
    return payload


_RESHAPES: dict[FaultKind, Any] = {
    FaultKind.JSON_LIST: lambda payload, _request: [payload],
    FaultKind.NO_CHOICES: lambda payload, _request: {k: v for k, v in payload.items() if k != "choices"},
    FaultKind.NO_MESSAGE: lambda payload, _request: {
        **payload, "choices": [{k: v for k, v in c.items() if k != "message"} for c in payload["choices"]]},
    FaultKind.CONTENT_NULL: lambda payload, _request: _null_content(payload),
    FaultKind.EMPTY_AT_LENGTH: _cut_at_length,
}


def _reshape(answer: _Answer, kind: FaultKind, request: ProxiedRequest) -> _Answer:
    """The forwarded chat.completion reshaped as `kind` says; anything else unchanged (the same object)."""
    payload = _completion(answer)
    if payload is None:
        return answer
    return replace(answer, body=json.dumps(_RESHAPES[kind](payload, request)).encode())


def _seconds_text(seconds: str | float) -> str:
    if isinstance(seconds, str):
        return seconds
    return str(int(seconds)) if float(seconds).is_integer() else f"{seconds:g}"


def _read_body(handler: BaseHTTPRequestHandler) -> bytes:
    if "chunked" in (handler.headers.get("Transfer-Encoding") or "").lower():
        chunks = []
        while (size := int(handler.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)) > 0:
            chunks.append(handler.rfile.read(size))
            handler.rfile.readline()
        while handler.rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers
            pass
        return b"".join(chunks)
    length = int(handler.headers.get("Content-Length") or 0)
    return handler.rfile.read(length) if length else b""


def _make_handler(owner: FaultProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "FaultProxy/1.0"

        def log_message(self, format: str, *args: Any) -> None:  # silence stderr access log
            return

        def setup(self) -> None:
            super().setup()
            owner._track(self.connection, alive=True)

        def finish(self) -> None:
            owner._track(self.connection, alive=False)
            with contextlib.suppress(OSError):
                super().finish()

        def _handle(self) -> None:
            body = _read_body(self)
            request, fault = owner._decide(self.command, self.path, dict(self.headers.items()), body)
            answer = owner._answer(request, fault)
            owner._settle(request, answer)
            if answer.status == 0:  # a stall ended or the proxy is dead: drop the connection unanswered
                self.close_connection = True
                with contextlib.suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)
                return
            try:
                self.send_response(answer.status)
                for key, value in answer.headers:
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(answer.body)))
                self.end_headers()
                self.wfile.flush()
                if answer.drip_s > 0:
                    self._drip(answer.body, answer.drip_s)
                    return
                self.wfile.write(answer.body)
                self.wfile.flush()
            except OSError:  # the client gave up (timeout) or the proxy cut it
                self.close_connection = True

        def _drip(self, body: bytes, every_s: float) -> None:
            for index in range(len(body)):
                if owner._wake.wait(every_s):  # stop()/dead(): cut the connection
                    self.close_connection = True
                    return
                self.wfile.write(body[index : index + 1])
                self.wfile.flush()

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _handle

    return Handler


# ------------------------------------------------------------------------- standalone process
def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.support.fault_proxy", description=__doc__.split("\n")[0])
    parser.add_argument("--upstream", default="stub", help="upstream base URL, or 'stub' for a local OpenAIStubServer")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    for kind in RATE_KINDS:
        parser.add_argument(f"--{kind.value.replace('_', '-')}", type=float, default=0.0, metavar="RATE")
    parser.add_argument("--retry-after", default="1", help="the 429's Retry-After value ('none' omits it)")
    parser.add_argument("--stall-s", type=float, default=10.0)
    parser.add_argument("--stall-then", choices=("drop", "answer"), default="drop")
    parser.add_argument("--drip-s", type=float, default=1.0, help="seconds between two bytes of a slow_drip body")
    parser.add_argument("--only-paths", nargs="+", default=list(DEFAULT_PATHS))
    parser.add_argument("--always", type=int, default=None, metavar="STATUS", help="answer every request so")
    parser.add_argument("--always-text", default=None, help="the error message of --always")
    parser.add_argument("--log", action="store_true", help="print one JSON line per request on stdout")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    names = {item.name for item in fields(FaultPlan)}
    plan = FaultPlan(
        seed=args.seed,
        retry_after=None if args.retry_after.lower() == "none" else args.retry_after,
        stall_s=args.stall_s,
        stall_then=args.stall_then,
        drip_s=args.drip_s,
        only_paths=tuple(args.only_paths),
        **{kind.value: getattr(args, kind.value) for kind in RATE_KINDS if kind.value in names},
    )
    with contextlib.ExitStack() as stack:
        upstream = args.upstream
        if upstream == "stub":
            from tests.support.openai_server import OpenAIStubServer

            upstream = stack.enter_context(OpenAIStubServer()).base_url
        proxy = stack.enter_context(FaultProxy(upstream, plan, port=args.port))
        if args.always is not None:
            proxy.always(args.always, body_text=args.always_text)
        print(proxy.base_url, flush=True)
        seen = 0
        try:
            while True:
                time.sleep(0.1)
                if args.log:
                    arrived = proxy.requests
                    for request in arrived[seen:]:  # on arrival: the status may not be known yet
                        line = {"seq": request.seq, "method": request.method, "path": request.path}
                        print(json.dumps({**line, "fault": str(request.fault)}), flush=True)
                    seen = len(arrived)
        except KeyboardInterrupt:
            return 0


if __name__ == "__main__":
    sys.exit(main())
