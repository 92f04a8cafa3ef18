"""The local OpenAI-protocol test server speaks the protocol the official `openai` client expects."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import numpy as np
import openai
import pytest
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder

from tests.support import forbid_network, isolate_llm_env
from tests.support.openai_server import MALFORMED_CONTENT, OpenAIStubServer, running_server


def fixed_responder(messages: list[dict]) -> str:
    return f"echo:{messages[-1]['content']}"


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    isolate_llm_env(monkeypatch, tmp_path)
    forbid_network(monkeypatch)


@pytest.fixture
def server() -> Iterator[OpenAIStubServer]:
    yield from running_server(responder=fixed_responder)


def client_for(server: OpenAIStubServer, max_retries: int = 0) -> openai.OpenAI:
    return openai.OpenAI(
        api_key="sk-test-server", base_url=server.base_url, max_retries=max_retries, timeout=5
    )


def raw_post(url: str, payload: dict) -> tuple[int, dict[str, str], dict]:
    request = urllib.request.Request(
        url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, dict(response.headers.items()), json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers.items()), json.loads(error.read())


def test_base_url_is_loopback_v1(server: OpenAIStubServer) -> None:
    assert server.base_url == f"http://127.0.0.1:{server.port}/v1"
    assert server.port > 0


def test_chat_completion_through_official_client(server: OpenAIStubServer) -> None:
    completion = client_for(server).chat.completions.create(
        model="stub-model",
        messages=[{"role": "system", "content": "sys"}, {"role": "user", "content": "hello"}],
    )
    assert completion.object == "chat.completion"
    assert completion.id.startswith("chatcmpl-")
    assert completion.model == "stub-model"
    assert completion.choices[0].message.role == "assistant"
    assert completion.choices[0].message.content == "echo:hello"
    assert completion.choices[0].finish_reason == "stop"
    assert (
        completion.usage.total_tokens == completion.usage.prompt_tokens + completion.usage.completion_tokens
    )
    (recorded,) = server.requests
    assert (recorded.method, recorded.path, recorded.status) == ("POST", "/v1/chat/completions", 200)
    assert recorded.header("authorization") == "Bearer sk-test-server"
    assert recorded.json["messages"][1] == {"role": "user", "content": "hello"}


def test_default_responder_is_the_sim_stand_in() -> None:
    from memtrace_loop.pipeline.sim.stand_in import respond

    messages = [
        {
            "role": "system",
            "content": "Your input fields are:\n1. `question` (str):\nYour output fields are:\n"
            "1. `answer` (str):\nAll interactions will be structured...\nIn adhering to this structure, your "
            "objective is: \n        Answer.",
        },
        {
            "role": "user",
            "content": "[[ ## question ## ]]\nWho?\n\nRespond with the corresponding output fields",
        },
    ]
    with OpenAIStubServer() as server:
        completion = client_for(server).chat.completions.create(model="m", messages=messages)
    assert completion.choices[0].message.content == respond(messages)


def test_embeddings_through_official_client(server: OpenAIStubServer) -> None:
    texts = ["Alice adopted a dog", "Bob went hiking", ""]
    result = client_for(server).embeddings.create(model="embed-stub", input=texts)
    assert [item.index for item in result.data] == [0, 1, 2]
    assert all(item.object == "embedding" for item in result.data)
    vectors = np.asarray([item.embedding for item in result.data], dtype=np.float32)
    np.testing.assert_allclose(vectors, HashingEmbedder().embed(texts), atol=1e-6)
    assert result.usage.total_tokens > 0
    assert server.requests[-1].path == "/v1/embeddings"


def test_single_string_embedding_input(server: OpenAIStubServer) -> None:
    result = client_for(server).embeddings.create(model="embed-stub", input="just one")
    assert len(result.data) == 1 and len(result.data[0].embedding) == 256


def test_models_listing(server: OpenAIStubServer) -> None:
    assert [model.id for model in client_for(server).models.list()] == ["stub-model"]


def test_paths_without_v1_prefix_are_served(server: OpenAIStubServer) -> None:
    root = server.base_url.removesuffix("/v1")
    status, _, body = raw_post(
        f"{root}/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    )
    assert status == 200 and body["choices"][0]["message"]["content"] == "echo:x"


def test_unknown_endpoint_is_404_with_openai_error(server: OpenAIStubServer) -> None:
    status, _, body = raw_post(f"{server.base_url}/nothing", {})
    assert status == 404 and body["error"]["type"] == "invalid_request_error"


def test_injected_status_has_retry_after_and_error_json(server: OpenAIStubServer) -> None:
    server.inject(status=429, times=2, retry_after=3)
    payload = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    for _ in range(2):
        status, headers, body = raw_post(f"{server.base_url}/chat/completions", payload)
        assert status == 429
        assert headers["Retry-After"] == "3"
        assert body["error"]["type"] == "rate_limit_error" and body["error"]["code"] == "rate_limit_exceeded"
    status, _, _ = raw_post(f"{server.base_url}/chat/completions", payload)
    assert status == 200
    assert [request.status for request in server.requests] == [429, 429, 200]


def test_injected_status_surfaces_in_official_client(server: OpenAIStubServer) -> None:
    server.inject(status=503, times=1, retry_after=None)
    with pytest.raises(openai.InternalServerError) as caught:
        client_for(server).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert caught.value.status_code == 503
    assert "Retry-After" not in caught.value.response.headers


def test_official_client_retries_an_injected_429(server: OpenAIStubServer) -> None:
    server.inject(status=429, times=1, retry_after=0)
    completion = client_for(server, max_retries=2).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "x"}]
    )
    assert completion.choices[0].message.content == "echo:x"
    assert [request.status for request in server.requests] == [429, 200]


def test_inject_can_target_one_endpoint(server: OpenAIStubServer) -> None:
    server.inject(status=429, times=1, retry_after=0, endpoint="/chat/completions")
    client = client_for(server)
    assert len(client.embeddings.create(model="e", input=["a"]).data) == 1
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert [(r.path, r.status) for r in server.requests] == [
        ("/v1/embeddings", 200),
        ("/v1/chat/completions", 429),
    ]


def test_malformed_applies_to_chat_only(server: OpenAIStubServer) -> None:
    server.inject_malformed(times=1)
    client = client_for(server)
    embedding = client.embeddings.create(model="e", input=["a"])
    assert len(embedding.data) == 1
    first = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    second = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert first.choices[0].message.content == MALFORMED_CONTENT
    assert second.choices[0].message.content == "echo:x"


def test_delay_then_stop_does_not_hang() -> None:
    server = OpenAIStubServer(responder=fixed_responder).start()
    server.inject_delay(300)
    client = openai.OpenAI(api_key="k", base_url=server.base_url, max_retries=0, timeout=0.3)
    with pytest.raises(openai.APITimeoutError):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert len(server.requests) == 1 and server.requests[0].status == 0  # recorded on arrival, still pending
    # a hang guard, not a speed test: a stop that waited out the pending 300 s delay would still be running
    stopper = threading.Thread(target=server.stop, daemon=True)
    stopper.start()
    stopper.join(timeout=60)
    assert not stopper.is_alive()


def test_reset_forgets_requests_and_faults(server: OpenAIStubServer) -> None:
    client_for(server).models.list()
    server.inject(status=500, times=5)
    server.reset()
    assert server.requests == []
    assert [model.id for model in client_for(server).models.list()] == ["stub-model"]


def test_context_manager_closes_the_port() -> None:
    with OpenAIStubServer(responder=fixed_responder) as server:
        url = server.base_url
        assert client_for(server).models.list().data
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"{url}/models", timeout=2)


def test_broken_responder_is_a_500() -> None:
    def broken(messages: list[dict]) -> str:
        raise RuntimeError("boom")

    with OpenAIStubServer(responder=broken) as server:
        status, _, body = raw_post(
            f"{server.base_url}/chat/completions",
            {"model": "m", "messages": [{"role": "user", "content": "x"}]},
        )
    assert status == 500 and "boom" in body["error"]["message"]
