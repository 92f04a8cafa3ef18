"""A real, local OpenAI-compatible HTTP server for tests.

`OpenAIStubServer` runs a stdlib `ThreadingHTTPServer` on 127.0.0.1 (an ephemeral port) in a background
thread and answers, without streaming:

- `POST /v1/chat/completions` — a proper `chat.completion` object whose message content comes from a
  `responder(messages) -> str` (default: the simulated world's `pipeline.sim.stand_in.respond`);
- `POST /v1/embeddings` — a `list` of `embedding` objects from an `Embedder` (default: `HashingEmbedder`);
- `GET /v1/models` — one model.

Paths are also accepted without the `/v1` prefix. Every request is recorded (method, path, headers,
raw body, parsed JSON) so tests can count attempts and check headers. Faults are injected per request:
`inject(status, times, retry_after, endpoint, message)` makes the next N requests fail with an OpenAI-style
error JSON (its message can be given, e.g. a provider echoing the key) and a `Retry-After` header;
`inject_malformed(times)` makes the next N chat completions return HTTP 200 with unparseable content;
`inject_body(body, times)` makes the next N requests answer HTTP 200 with exactly `body` (not JSON,
truncated, empty); `inject_delay(seconds, times)` stalls the next N requests (for timeout tests).

It is a test double only: no auth check beyond recording, no streaming, no tools.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Responder = Callable[[list[dict[str, Any]]], str]

MALFORMED_CONTENT = "~~ garbled output ~~ <<no fields here>> %%% }{ ]][[ 42"
DEFAULT_MODEL = "stub-model"


@dataclass(frozen=True)
class RecordedRequest:
    """One HTTP request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    status: int = 0  # the HTTP status answered; 0 while pending or when the connection was dropped
    seq: int = 0  # arrival order over the server's life (unique; survives reset())
    received_at: float = field(default_factory=time.monotonic)

    @property
    def json(self) -> Any:
        return json.loads(self.body) if self.body else None

    def header(self, name: str) -> str | None:
        lowered = name.lower()
        return next((value for key, value in self.headers.items() if key.lower() == lowered), None)


class _RawBody(bytes):
    """A response body sent as is (not JSON-encoded)."""


@dataclass
class _Fault:
    kind: str  # "status" | "malformed" | "delay" | "raw"
    remaining: int
    status: int = 0
    retry_after: float | None = None
    seconds: float = 0.0
    endpoint: str | None = None  # only requests whose path ends with this; None: any endpoint
    body: bytes = b""  # the body of a "raw" fault
    message: str | None = None  # the error body's message (default: "injected failure <status>")

    def applies_to(self, path: str) -> bool:
        return self.endpoint is None or path.rstrip("/").endswith(self.endpoint.rstrip("/"))


def _default_responder(messages: list[dict[str, Any]]) -> str:
    """The simulated world's answer; a plain chat request that is no DSPy stage at all (no output
    fields, e.g. a connectivity check) gets a short plain answer, as a real model would give."""
    from memtrace_loop.pipeline.sim.protocol import parse_request
    from memtrace_loop.pipeline.sim.reflection import parse_reflection
    from memtrace_loop.pipeline.sim.stand_in import respond

    if parse_reflection(messages) is None and not parse_request(messages).output_names:
        return "pong"
    return respond(messages)


def _default_embedder() -> Any:
    from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder

    return HashingEmbedder()


def _content_text(content: Any) -> str:
    """Message content as text: a string, or the text parts of a content-part list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def _rough_tokens(text: str) -> int:
    return max(1, len(text.split())) if text else 0


class OpenAIStubServer:
    """Local OpenAI-protocol server with fault injection; a context manager.

    `base_url` is `http://127.0.0.1:PORT/v1`, the value to pass as `api_base`/`base_url`.
    """

    def __init__(
        self,
        responder: Responder | None = None,
        embedder: Any | None = None,
        model: str = DEFAULT_MODEL,
    ) -> None:
        self.responder: Responder = responder or _default_responder
        self._embedder = embedder
        self.model = model
        self.latency_s = 0.0  # every request waits this long before it is answered (a slow endpoint)
        self._lock = threading.Lock()
        self._faults: list[_Fault] = []
        self._requests: list[RecordedRequest] = []
        self._seq = 0
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> OpenAIStubServer:
        if self._server is not None:
            return self
        self._stopping.clear()
        server = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="openai-stub", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._stopping.set()  # wakes handlers stalled by inject_delay
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    def __enter__(self) -> OpenAIStubServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("server is not running")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def embedder(self) -> Any:
        if self._embedder is None:
            self._embedder = _default_embedder()
        return self._embedder

    # ------------------------------------------------------------ fault control
    def inject(
        self, status: int = 429, times: int = 1, retry_after: float | None = 0, endpoint: str | None = None,
        message: str | None = None,
    ) -> None:
        """The next `times` requests fail with `status` and an OpenAI-style error body.

        `retry_after` is sent as the `Retry-After` header (seconds); None omits the header. `endpoint`
        (e.g. "/chat/completions" or "/embeddings") restricts the fault to that endpoint; by default
        it hits whatever request comes next. Faults are queued: each request takes the first
        pending fault that applies to it. `message` replaces the error body's message (e.g. a provider
        echoing the key: "Incorrect API key provided: sk-...").
        """
        with self._lock:
            self._faults.append(
                _Fault("status", times, status=status, retry_after=retry_after, endpoint=endpoint, message=message)
            )

    def inject_malformed(self, times: int = 1) -> None:
        """The next `times` chat completions answer 200 with content no DSPy adapter can parse."""
        with self._lock:
            self._faults.append(_Fault("malformed", times, endpoint="/chat/completions"))

    def inject_body(self, body: bytes, times: int = 1, endpoint: str | None = "/chat/completions") -> None:
        """The next `times` requests (chat completions by default) answer HTTP 200 with exactly `body`."""
        with self._lock:
            self._faults.append(_Fault("raw", times, body=bytes(body), endpoint=endpoint))

    def inject_delay(self, seconds: float, times: int = 1, endpoint: str | None = None) -> None:
        """The next `times` requests wait `seconds` before answering (interrupted by `stop()`)."""
        with self._lock:
            self._faults.append(_Fault("delay", times, seconds=seconds, endpoint=endpoint))

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def _take_fault(self, path: str, delay_ok: bool = True) -> _Fault | None:
        """The first pending fault for `path` (a request is delayed at most once: after its delay it
        takes only the other kinds of fault, so `inject_delay(s, times=N)` delays N requests)."""
        with self._lock:
            for fault in self._faults:
                if not fault.applies_to(path) or (fault.kind == "delay" and not delay_ok):
                    continue
                fault.remaining -= 1
                if fault.remaining <= 0:
                    self._faults.remove(fault)
                return fault
        return None

    # --------------------------------------------------------------- recording
    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def requests_to(self, suffix: str) -> list[RecordedRequest]:
        return [request for request in self.requests if request.path.rstrip("/").endswith(suffix)]

    def reset(self) -> None:
        """Forget recorded requests and pending faults."""
        with self._lock:
            self._requests.clear()
            self._faults.clear()

    def _record(self, request: RecordedRequest) -> RecordedRequest:
        """Record a request on arrival (so stalled attempts count too)."""
        with self._lock:
            self._seq += 1
            request = replace(request, seq=self._seq)
            self._requests.append(request)
            return request

    def _set_status(self, request: RecordedRequest, status: int) -> None:
        with self._lock:  # by identity: a reset() may have happened while the request was pending
            for index, recorded in enumerate(self._requests):
                if recorded.seq == request.seq:
                    self._requests[index] = replace(recorded, status=status)
                    return

    # ---------------------------------------------------------------- payloads
    def chat_payload(self, body: dict[str, Any], malformed: bool = False) -> dict[str, Any]:
        messages = [
            {"role": str(message.get("role", "user")), "content": _content_text(message.get("content"))}
            for message in body.get("messages", [])
        ]
        content = MALFORMED_CONTENT if malformed else self.responder(messages)
        prompt_tokens = sum(_rough_tokens(message["content"]) for message in messages)
        completion_tokens = _rough_tokens(content)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", self.model),
            "system_fingerprint": "fp_stub",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content, "refusal": None},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    def embeddings_payload(self, body: dict[str, Any]) -> dict[str, Any]:
        raw = body.get("input", [])
        texts = [raw] if isinstance(raw, str) else list(raw)
        if not all(isinstance(text, str) for text in texts):
            raise ValueError("the stub embeds strings only (no token-id inputs)")
        vectors = self.embedder.embed(texts) if texts else []
        tokens = sum(_rough_tokens(text) for text in texts)
        return {
            "object": "list",
            "data": [
                {"object": "embedding", "index": index, "embedding": [float(x) for x in vector]}
                for index, vector in enumerate(vectors)
            ],
            "model": body.get("model", self.model),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    def models_payload(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": self.model, "object": "model", "created": 0, "owned_by": "memtrace-tests"}],
        }


_ERROR_TYPES = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("rate_limit_error", "rate_limit_exceeded"),
    500: ("server_error", None),
    502: ("server_error", None),
    503: ("server_error", None),
}


def _error_body(status: int, message: str) -> dict[str, Any]:
    kind, code = _ERROR_TYPES.get(
        status, ("server_error" if status >= 500 else "invalid_request_error", None)
    )
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


Response = tuple[int, Any, dict[str, str]]


def _injected_response(owner: OpenAIStubServer, path: str) -> Response | bool:
    """The queued faults for `path` applied in order: a response that replaces the stub's (status 0
    when stop() interrupted a delay), else whether the stub's answer is to be malformed."""
    delayed = False
    while (fault := owner._take_fault(path, delay_ok=not delayed)) is not None:
        if fault.kind == "delay":
            if owner._stopping.wait(fault.seconds):
                return 0, None, {}
            delayed = True
            continue
        if fault.kind == "malformed":
            return True
        if fault.kind == "raw":
            return 200, _RawBody(fault.body), {}
        headers = {} if fault.retry_after is None else {"Retry-After": _seconds_text(fault.retry_after)}
        message = fault.message or f"injected failure {fault.status}"
        return fault.status, _error_body(fault.status, message), headers
    return False


def _stub_response(owner: OpenAIStubServer, endpoint: str, body: bytes, malformed: bool) -> Response:
    try:
        parsed = json.loads(body) if body else {}
    except json.JSONDecodeError as exc:
        return 400, _error_body(400, f"body is not JSON: {exc}"), {}
    try:
        if endpoint == "/chat/completions":
            if parsed.get("stream"):
                return 400, _error_body(400, "streaming is not supported by the stub"), {}
            return 200, owner.chat_payload(parsed, malformed=malformed), {}
        if endpoint == "/embeddings":
            return 200, owner.embeddings_payload(parsed), {}
        return 200, owner.models_payload(), {}
    except Exception as exc:  # a broken responder is a 500 the client sees, not a hang
        return 500, _error_body(500, f"stub responder failed: {type(exc).__name__}: {exc}"), {}


def _make_handler(owner: OpenAIStubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "OpenAIStub/1.0"

        def log_message(self, format: str, *args: Any) -> None:  # silence stderr access log
            return

        def _send_json(self, status: int, payload: Any, extra_headers: dict[str, str] | None = None) -> None:
            data = bytes(payload) if isinstance(payload, _RawBody) else json.dumps(payload).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("x-request-id", f"req_{uuid.uuid4().hex[:16]}")
            for key, value in (extra_headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            path = self.path.split("?", 1)[0].rstrip("/")
            endpoint = path.removeprefix("/v1")
            recorded = owner._record(
                RecordedRequest(self.command, self.path, dict(self.headers.items()), body)
            )
            status, payload, headers = self._respond(path, endpoint, body)
            owner._set_status(recorded, status)
            if status == 0:  # stop() interrupted a stalled request: drop the connection
                self.close_connection = True
                return
            try:
                self._send_json(status, payload, headers)
            except (BrokenPipeError, ConnectionResetError):  # client gave up (timeout test)
                self.close_connection = True

        def _respond(self, path: str, endpoint: str, body: bytes) -> tuple[int, Any, dict[str, str]]:
            known = {("POST", "/chat/completions"), ("POST", "/embeddings"), ("GET", "/models")}
            if (self.command, endpoint) not in known:
                return 404, _error_body(404, f"unknown endpoint {self.command} {self.path}"), {}
            if owner.latency_s and owner._stopping.wait(owner.latency_s):
                return 0, None, {}
            injected = _injected_response(owner, path)
            if isinstance(injected, tuple):
                return injected
            return _stub_response(owner, endpoint, body, malformed=injected)

        def do_POST(self) -> None:
            self._handle()

        def do_GET(self) -> None:
            self._handle()

    return Handler


def _seconds_text(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else f"{seconds:g}"


def running_server(
    responder: Responder | None = None, embedder: Any | None = None, model: str = DEFAULT_MODEL
) -> Iterator[OpenAIStubServer]:
    """Generator for a pytest fixture: `yield from running_server(...)`."""
    server = OpenAIStubServer(responder=responder, embedder=embedder, model=model).start()
    try:
        yield server
    finally:
        server.stop()
