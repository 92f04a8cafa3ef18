"""The fault-injecting proxy (tests/support/fault_proxy.py): each fault happens at the wire, reproducibly.

Everything talks HTTP on 127.0.0.1: a client (urllib, the `openai` client, DSPy's native lm15 client)
-> `FaultProxy` -> `OpenAIStubServer`. No test asserts wall-clock time.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import dspy
import numpy as np
import pytest
from dspy.utils.exceptions import (
    AdapterParseError,
    LMProviderError,
    LMRateLimitError,
    LMServerError,
    LMTransportError,
    is_retryable_lm_error,
)
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder, OpenAIEmbedder

from tests.support import forbid_network, isolate_llm_env
from tests.support.answering import ANSWER, answering_responder, ask
from tests.support.fault_proxy import NON_JSON_BODIES, FaultKind, FaultPlan, FaultProxy, ProxiedRequest
from tests.support.openai_server import MALFORMED_CONTENT, OpenAIStubServer, running_server
from tests.support.paths import REPO

KEY_ENV = "MEMTRACE_TEST_PROXY_KEY"
KEY = "sk-proxy-test-4c1d7e"
CHAT = {"model": "stub-model", "messages": [{"role": "user", "content": "hello"}]}
EMBED = {"model": "embed-stub", "input": ["Alice adopted a dog", "Bob ran a marathon"]}


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate_llm_env(monkeypatch, tmp_path)
    forbid_network(monkeypatch)
    monkeypatch.setenv(KEY_ENV, KEY)


@pytest.fixture
def server() -> Iterator[OpenAIStubServer]:
    yield from running_server(responder=answering_responder, embedder=HashingEmbedder(dim=16))


@pytest.fixture
def proxy(server: OpenAIStubServer) -> Iterator[FaultProxy]:
    with FaultProxy(server.base_url) as running:
        yield running


class Reply:
    """What a raw HTTP client got: a status, headers and body, or the connection error instead."""

    def __init__(
        self, status: int = 0, headers: dict[str, str] | None = None, body: bytes = b"", error: Exception | None = None
    ) -> None:
        self.status, self.headers, self.body, self.error = status, headers or {}, body, error

    def header(self, name: str) -> str | None:
        return next((value for key, value in self.headers.items() if key.lower() == name.lower()), None)

    @property
    def json(self) -> dict:
        return json.loads(self.body)


def call(
    url: str,
    payload: dict | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 5,
    method: str | None = None,
) -> Reply:
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(
        url, data=data, headers={"Content-Type": "application/json", **(headers or {})}, method=method
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return Reply(response.status, dict(response.headers.items()), response.read())
    except urllib.error.HTTPError as error:
        return Reply(error.code, dict(error.headers.items()), error.read())
    except OSError as error:  # refused, dropped, timed out (URLError is an OSError)
        return Reply(error=error)


def chat(proxy: FaultProxy, **kwargs: object) -> Reply:
    return call(f"{proxy.base_url}/chat/completions", CHAT, **kwargs)  # type: ignore[arg-type]


def embed(proxy: FaultProxy) -> Reply:
    return call(f"{proxy.base_url}/embeddings", EMBED)


def kinds(requests: list[ProxiedRequest]) -> list[FaultKind]:
    return [request.fault for request in requests]


# ------------------------------------------------------------------------------------ forwarding
def test_base_url_mirrors_the_upstream_path(server: OpenAIStubServer, proxy: FaultProxy) -> None:
    assert proxy.base_url == f"http://127.0.0.1:{proxy.port}/v1"
    assert proxy.port not in (0, server.port)


def test_forwarding_preserves_method_path_headers_and_body(server: OpenAIStubServer, proxy: FaultProxy) -> None:
    body = json.dumps(CHAT).encode()
    request = urllib.request.Request(
        f"{proxy.base_url}/chat/completions?trace=1",
        data=body,
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}", "X-Probe": "v1"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        reply = json.loads(response.read())
        assert response.status == 200 and response.headers["Content-Type"] == "application/json"
        assert response.headers["x-request-id"].startswith("req_")  # upstream headers are relayed
    assert reply["object"] == "chat.completion" and reply["choices"][0]["message"]["content"].startswith("[[ ##")
    (upstream,) = server.requests
    assert (upstream.method, upstream.path, upstream.body) == ("POST", "/v1/chat/completions?trace=1", body)
    assert upstream.header("authorization") == f"Bearer {KEY}" and upstream.header("x-probe") == "v1"
    (seen,) = proxy.requests
    assert (seen.method, seen.path, seen.body, seen.fault, seen.status) == (
        "POST",
        "/v1/chat/completions?trace=1",
        body,
        FaultKind.FORWARDED,
        200,
    )
    assert seen.json == CHAT and seen.header("x-probe") == "v1"

    models = call(f"{proxy.base_url}/models")
    assert models.status == 200 and models.json["data"][0]["id"] == "stub-model"
    missing = call(f"{proxy.base_url}/nowhere", {})
    assert missing.status == 404 and "unknown endpoint" in missing.json["error"]["message"]
    assert [request.method for request in server.requests] == ["POST", "GET", "POST"]


def test_an_unreachable_upstream_is_a_502_from_the_proxy(server: OpenAIStubServer) -> None:
    with FaultProxy(server.base_url) as proxy:
        server.stop()
        reply = chat(proxy)
    assert reply.status == 502 and "unreachable" in reply.json["error"]["message"]


# ---------------------------------------------------------------------------- each fault kind
def test_rate_limit_is_a_429_with_retry_after(server: OpenAIStubServer, proxy: FaultProxy) -> None:
    proxy.set_plan(FaultPlan(rate_limit=1.0))
    reply = chat(proxy)
    assert reply.status == 429 and reply.header("Retry-After") == "1"
    assert reply.json["error"]["type"] == "rate_limit_error" and reply.json["error"]["code"] == "rate_limit_exceeded"
    proxy.set_plan(FaultPlan(rate_limit=1.0, retry_after="3600"))
    assert chat(proxy).header("Retry-After") == "3600"
    proxy.set_plan(FaultPlan(rate_limit=1.0, retry_after=None))
    assert chat(proxy).header("Retry-After") is None
    assert server.requests == []  # the proxy answered: nothing reached the server
    assert kinds(proxy.requests) == [FaultKind.RATE_LIMIT] * 3 and proxy.count(FaultKind.RATE_LIMIT) == 3


def test_server_errors_are_500_502_503(server: OpenAIStubServer, proxy: FaultProxy) -> None:
    proxy.set_plan(FaultPlan(server_error=1.0, seed=3))
    replies = [chat(proxy) for _ in range(30)]
    assert {reply.status for reply in replies} == {500, 502, 503}
    assert all(reply.json["error"]["type"] == "server_error" for reply in replies)
    assert [request.status for request in proxy.requests] == [reply.status for reply in replies]
    assert server.requests == []


def test_timeout_drops_the_connection_unanswered(server: OpenAIStubServer, proxy: FaultProxy) -> None:
    proxy.set_plan(FaultPlan(timeout=1.0, stall_s=0))
    reply = chat(proxy)
    assert reply.error is not None and reply.status == 0  # e.g. RemoteDisconnected
    (seen,) = proxy.requests
    assert (seen.fault, seen.status) == (FaultKind.TIMEOUT, 0)
    assert server.requests == []


def test_timeout_outlasts_the_client_and_stop_ends_the_stall(server: OpenAIStubServer) -> None:
    proxy = FaultProxy(server.base_url, FaultPlan(timeout=1.0, stall_s=600)).start()
    reply = chat(proxy, timeout=0.2)
    assert isinstance(reply.error, TimeoutError)
    proxy.stop()  # wakes the stalled handler: it drops the connection instead of waiting 600 s
    (seen,) = proxy.requests
    assert seen.fault == FaultKind.TIMEOUT
    assert server.requests == []


def test_timeout_can_answer_after_the_client_gave_up(server: OpenAIStubServer, proxy: FaultProxy) -> None:
    proxy.set_plan(FaultPlan(timeout=1.0, stall_s=0.5, stall_then="answer"))
    reply = chat(proxy, timeout=0.1)
    assert isinstance(reply.error, TimeoutError)
    deadline = time.monotonic() + 10  # a bound on waiting for the late answer, not a timing assertion
    while proxy.requests[0].status == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert (proxy.requests[0].fault, proxy.requests[0].status) == (FaultKind.TIMEOUT, 200)
    assert len(server.requests) == 1  # the server did the work; the client never saw it


def test_non_json_is_a_200_html_or_text_body_labelled_json(proxy: FaultProxy) -> None:
    proxy.set_plan(FaultPlan(non_json=1.0))
    replies = [chat(proxy) for _ in range(12)]
    assert {reply.status for reply in replies} == {200}
    assert {reply.header("Content-Type") for reply in replies} == {"application/json"}
    assert {reply.body for reply in replies} == set(NON_JSON_BODIES)  # both variants, chosen by the schedule
    for reply in replies:
        with pytest.raises(json.JSONDecodeError):
            json.loads(reply.body)


def test_truncated_is_the_real_body_cut_in_half(server: OpenAIStubServer, proxy: FaultProxy) -> None:
    full = embed(proxy)  # embeddings of fixed texts: the same bytes every time
    assert full.status == 200 and len(full.json["data"]) == 2
    proxy.set_plan(FaultPlan(truncated=1.0))
    cut = embed(proxy)
    assert cut.status == 200 and cut.body == full.body[: len(full.body) // 2]
    assert cut.header("Content-Length") == str(len(cut.body))
    with pytest.raises(json.JSONDecodeError):
        json.loads(cut.body)
    assert len(server.requests) == 2  # a truncated answer was served upstream
    assert kinds(proxy.requests) == [FaultKind.FORWARDED, FaultKind.TRUNCATED]


def test_empty_body_is_a_200_with_nothing(server: OpenAIStubServer, proxy: FaultProxy) -> None:
    proxy.set_plan(FaultPlan(empty_body=1.0))
    reply = chat(proxy)
    assert (reply.status, reply.body, reply.header("Content-Length")) == (200, b"", "0")
    assert reply.header("Content-Type") == "application/json"
    assert server.requests == []


def test_garbled_content_is_a_valid_completion_with_garbage(server: OpenAIStubServer, proxy: FaultProxy) -> None:
    proxy.set_plan(FaultPlan(garbled_content=1.0))
    reply = chat(proxy)
    assert reply.status == 200 and reply.json["object"] == "chat.completion"
    assert reply.json["choices"][0]["message"]["content"] == MALFORMED_CONTENT
    assert reply.json["usage"]["total_tokens"] > 0
    # embeddings have no message content: forwarded unchanged and recorded as forwarded
    assert len(embed(proxy).json["data"]) == 2
    assert kinds(proxy.requests) == [FaultKind.GARBLED_CONTENT, FaultKind.FORWARDED]
    assert len(server.requests) == 2


def test_faults_apply_only_to_only_paths(proxy: FaultProxy) -> None:
    proxy.set_plan(FaultPlan(rate_limit=1.0))
    assert call(f"{proxy.base_url}/models").status == 200  # not in the default paths
    assert embed(proxy).status == 429
    proxy.set_plan(FaultPlan(rate_limit=1.0, only_paths=("/embeddings",)))
    assert chat(proxy).status == 200 and embed(proxy).status == 429
    assert kinds(proxy.requests) == [
        FaultKind.FORWARDED,
        FaultKind.RATE_LIMIT,
        FaultKind.FORWARDED,
        FaultKind.RATE_LIMIT,
    ]


def test_plan_rejects_bad_rates() -> None:
    with pytest.raises(ValueError, match="within"):
        FaultPlan(rate_limit=1.5)
    with pytest.raises(ValueError, match="sum"):
        FaultPlan(rate_limit=0.6, server_error=0.6)


# ------------------------------------------------------------------------------------- schedule
PLAN = FaultPlan(
    seed=11,
    rate_limit=0.2,
    server_error=0.1,
    timeout=0.05,
    non_json=0.05,
    truncated=0.05,
    empty_body=0.05,
    garbled_content=0.05,
    stall_s=0,
)
EXPECTED_STATUS = {
    FaultKind.FORWARDED: {200},
    FaultKind.RATE_LIMIT: {429},
    FaultKind.SERVER_ERROR: {500, 502, 503},
    FaultKind.TIMEOUT: {0},
    FaultKind.NON_JSON: {200},
    FaultKind.TRUNCATED: {200},
    FaultKind.EMPTY_BODY: {200},
    FaultKind.GARBLED_CONTENT: {200},
}


def test_the_schedule_is_a_pure_function_of_seed_and_counter() -> None:
    assert PLAN.schedule(200) == PLAN.schedule(200)
    assert [PLAN.fault_at(n) for n in range(50)] == [FaultPlan(**vars(PLAN)).fault_at(n) for n in range(50)]
    assert PLAN.schedule(200) != FaultPlan(**{**vars(PLAN), "seed": 12}).schedule(200)
    assert PLAN.schedule(10, start=5) == PLAN.schedule(15)[5:]


def test_a_rerun_with_the_same_seed_faults_the_same_requests(server: OpenAIStubServer) -> None:
    runs = []
    for _ in range(2):
        with FaultProxy(server.base_url, PLAN) as proxy:
            replies = [chat(proxy) for _ in range(40)]
            runs.append([(request.fault, request.status) for request in proxy.requests])
            assert [status for _, status in runs[-1]] == [reply.status for reply in replies]
    assert runs[0] == runs[1]
    assert [fault for fault, _ in runs[0]] == PLAN.schedule(40)
    assert len({fault for fault, _ in runs[0]}) >= 4


def test_rates_are_honoured_over_400_requests_at_the_wire(proxy: FaultProxy) -> None:
    proxy.set_plan(PLAN)
    replies = [chat(proxy) if n % 2 else embed(proxy) for n in range(400)]
    by_kind = collections.Counter(kinds(proxy.requests))
    assert abs(by_kind[FaultKind.RATE_LIMIT] / 400 - 0.2) <= 0.06
    assert abs(by_kind[FaultKind.SERVER_ERROR] / 400 - 0.1) <= 0.06
    # garbled draws on /embeddings are forwarded; every other kind happens on both paths
    assert abs((400 - by_kind[FaultKind.FORWARDED]) / 400 - 0.55) <= 0.06
    assert all(by_kind[kind] > 0 for kind in EXPECTED_STATUS)
    for request, reply in zip(proxy.requests, replies, strict=True):
        assert request.status in EXPECTED_STATUS[request.fault]
        assert reply.status == request.status


def test_concurrent_requests_are_all_counted(server: OpenAIStubServer, proxy: FaultProxy) -> None:
    proxy.set_plan(FaultPlan(seed=5, rate_limit=0.3, server_error=0.2))
    threads = [threading.Thread(target=chat, args=(proxy,)) for _ in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(request.seq for request in proxy.requests) == list(range(1, 41))
    # arrival order under threads varies; which faults the 40 counters drew does not
    assert collections.Counter(kinds(proxy.requests)) == collections.Counter(proxy.plan.schedule(40))
    assert len(server.requests) == proxy.count(FaultKind.FORWARDED)


# ------------------------------------------------------------------------------------------ modes
def test_always_answers_every_request_with_the_status(server: OpenAIStubServer, proxy: FaultProxy) -> None:
    fake_key = "sk-XYZfakefake0123456789"
    proxy.always(401, body_text=f"Incorrect API key provided: {fake_key}. You can find your API key at ...")
    for reply in (chat(proxy), embed(proxy), call(f"{proxy.base_url}/models")):
        assert reply.status == 401 and fake_key in reply.json["error"]["message"]
        assert reply.json["error"]["code"] == "invalid_api_key" and reply.header("Retry-After") is None
    proxy.always(429, retry_after=3600)
    assert (chat(proxy).status, chat(proxy).header("Retry-After")) == (429, "3600")
    assert server.requests == []
    assert proxy.count(FaultKind.ALWAYS) == 5
    proxy.clear()
    assert chat(proxy).status == 200 and len(server.requests) == 1


def test_dead_refuses_connections_and_clear_revives(server: OpenAIStubServer, proxy: FaultProxy) -> None:
    assert chat(proxy).status == 200
    url = proxy.base_url
    proxy.dead()
    reply = chat(proxy)
    assert isinstance(reply.error, urllib.error.URLError)
    assert isinstance(reply.error.reason, ConnectionRefusedError)
    assert proxy.base_url == url and len(proxy.requests) == 1  # refused: never received
    proxy.clear()
    assert proxy.base_url == url and chat(proxy).status == 200


def test_pause_forwards_without_advancing_the_schedule(proxy: FaultProxy) -> None:
    plan = FaultPlan(seed=2, rate_limit=0.5)
    proxy.set_plan(plan)
    statuses = [chat(proxy).status for _ in range(5)]
    proxy.pause()
    assert [chat(proxy).status for _ in range(5)] == [200] * 5
    proxy.resume()
    statuses += [chat(proxy).status for _ in range(5)]
    expected = [429 if kind == FaultKind.RATE_LIMIT else 200 for kind in plan.schedule(10)]
    assert statuses == expected and 429 in expected


# --------------------------------------------------------------------------------------- counting
def test_count_and_received_after(proxy: FaultProxy) -> None:
    proxy.set_plan(FaultPlan(rate_limit=1.0, only_paths=("/embeddings",)))
    for _ in range(3):
        chat(proxy)
    mark = time.monotonic()
    embed(proxy)
    chat(proxy)
    later = proxy.received_after(mark)
    assert [request.seq for request in later] == [4, 5]
    assert [request.fault for request in later] == [FaultKind.RATE_LIMIT, FaultKind.FORWARDED]
    assert all(request.received_at > mark for request in later)
    assert proxy.received_after(time.monotonic()) == []
    assert (proxy.count(), proxy.count(FaultKind.FORWARDED), proxy.count("rate_limit")) == (5, 4, 1)
    proxy.reset()
    assert proxy.requests == [] and proxy.count() == 0


# --------------------------------------------------------------------------------------- clients
def native_lm(proxy: FaultProxy, num_retries: int) -> dspy.LM:
    return dspy.LM(
        "openai/stub-model",
        api_base=proxy.base_url,
        api_key=KEY,
        num_retries=num_retries,
        cache=False,
        timeout=5,
    )


@pytest.mark.slow  # seconds each (measured): out of `make test-fast`
def test_dspy_native_client_retries_through_transient_faults(proxy: FaultProxy) -> None:
    proxy.set_plan(FaultPlan(seed=1, rate_limit=0.4, server_error=0.1, timeout=0.1, stall_s=0, retry_after="0"))
    lm = native_lm(proxy, num_retries=8)
    assert all(ask(lm).answer == ANSWER for _ in range(5))
    assert proxy.count(FaultKind.FORWARDED) == 5 and proxy.count() > 5
    assert proxy.requests[0].header("authorization") == f"Bearer {KEY}"


# What DSPy 3.4.1's native lm15 client does with a malformed HTTP 200 (measured here, num_retries=3):
#   non_json, truncated, empty_body -> LMProviderError (exactly that class, status 200, message
#     "the reply (HTTP 200, application/json, N bytes) is not JSON: ..."), NOT retryable
#     (`is_retryable_lm_error` is False): one request on the wire, no retry, no adapter fallback.
#   garbled_content -> AdapterParseError (ChatAdapter fails, the JSONAdapter fallback sends a second
#     request, fails too); not an LM error, not retried by DSPy's retry loop.
#   For contrast: 429 -> LMRateLimitError, 5xx -> LMServerError, a dropped connection or a read
#   timeout -> LMTransportError, connection refused -> LMTransportError; all retryable.
MALFORMED_200 = {
    FaultKind.NON_JSON: (LMProviderError, 1),
    FaultKind.TRUNCATED: (LMProviderError, 1),
    FaultKind.EMPTY_BODY: (LMProviderError, 1),
    FaultKind.GARBLED_CONTENT: (AdapterParseError, 2),
}


def test_what_dspy_native_client_raises_for_each_malformed_200(proxy: FaultProxy) -> None:
    lm = native_lm(proxy, num_retries=3)
    for kind, (error_type, requests_sent) in MALFORMED_200.items():
        proxy.reset()
        proxy.set_plan(FaultPlan(**{kind.value: 1.0}))
        with pytest.raises(error_type) as caught:
            ask(lm)
        assert type(caught.value) is error_type, kind
        assert proxy.count() == requests_sent == proxy.count(kind), kind
        if error_type is LMProviderError:
            assert caught.value.status == 200 and "is not JSON" in str(caught.value)
            assert not is_retryable_lm_error(caught.value)
    for plan, error_type in (
        (FaultPlan(rate_limit=1.0, retry_after="0"), LMRateLimitError),
        (FaultPlan(server_error=1.0), LMServerError),
        (FaultPlan(timeout=1.0, stall_s=0), LMTransportError),
    ):
        proxy.set_plan(plan)
        with pytest.raises(error_type) as transient:
            ask(native_lm(proxy, num_retries=0))
        assert is_retryable_lm_error(transient.value)
    proxy.clear()
    proxy.dead()
    with pytest.raises(LMTransportError, match="Connection refused"):
        ask(native_lm(proxy, num_retries=0))


def test_the_openai_embedder_through_the_proxy(proxy: FaultProxy) -> None:
    proxy.set_plan(FaultPlan(seed=4, rate_limit=0.4, server_error=0.1, retry_after="0.01"))
    embedder = OpenAIEmbedder("embed-stub", api_base=proxy.base_url, api_key_env=KEY_ENV, max_retries=10)
    texts = [f"fact {i} about Alice" for i in range(6)]
    vectors = np.vstack([embedder.embed([text]) for text in texts])
    np.testing.assert_allclose(vectors, HashingEmbedder(dim=16).embed(texts), atol=1e-6)
    assert proxy.count(FaultKind.FORWARDED) == 6 and proxy.count() > 6


# ------------------------------------------------------------------------------------- standalone
def test_standalone_process_prints_a_usable_url(server: OpenAIStubServer) -> None:
    command = [sys.executable, "-m", "tests.support.fault_proxy", "--upstream", server.base_url]
    command += ["--port", "0", "--rate-limit", "1", "--retry-after", "5", "--only-paths", "/embeddings", "--log"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        base_url = process.stdout.readline().strip()
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
        assert call(f"{base_url}/chat/completions", CHAT).json["object"] == "chat.completion"
        limited = call(f"{base_url}/embeddings", EMBED)
        assert (limited.status, limited.header("Retry-After")) == (429, "5")
        logged = [json.loads(process.stdout.readline()) for _ in range(2)]
        assert [(line["path"], line["fault"]) for line in logged] == [
            ("/v1/chat/completions", "forwarded"),
            ("/v1/embeddings", "rate_limit"),
        ]
        assert len(server.requests) == 1
    finally:
        process.terminate()
        process.wait(timeout=10)
