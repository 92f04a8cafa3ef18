"""The fault proxy's shape-less 200s and its slow drip, as a raw HTTP client sees them at the wire."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.fault_proxy import FaultKind, FaultPlan, FaultProxy
from tests.support.openai_server import OpenAIStubServer

CHAT = {"model": "stub-model", "messages": [{"role": "user", "content": "hello"}], "max_completion_tokens": 77}


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    with OpenAIStubServer(responder=lambda messages: "an answer") as stub, FaultProxy(stub.base_url) as front:
        yield front


def post(proxy: FaultProxy, timeout: float = 5) -> tuple[int, Any]:
    request = urllib.request.Request(f"{proxy.base_url}/chat/completions", data=json.dumps(CHAT).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.status, json.loads(response.read())


def first_choice(body: dict[str, Any]) -> dict[str, Any]:
    return body["choices"][0]


SHAPES = {
    FaultKind.JSON_LIST: lambda body: isinstance(body, list) and body[0]["object"] == "chat.completion",
    FaultKind.NO_CHOICES: lambda body: body["object"] == "chat.completion" and "choices" not in body,
    FaultKind.NO_MESSAGE: lambda body: "message" not in first_choice(body) and first_choice(body)["index"] == 0,
    FaultKind.CONTENT_NULL: lambda body: first_choice(body)["message"]["content"] is None,
    FaultKind.EMPTY_AT_LENGTH: lambda body: (first_choice(body)["message"]["content"], first_choice(body)[
        "finish_reason"], body["usage"]["completion_tokens"]) == ("", "length", 77),
}


@pytest.mark.parametrize("kind", list(SHAPES), ids=str)
def test_each_shape_is_a_200_carrying_it(proxy: FaultProxy, kind: FaultKind) -> None:
    proxy.set_plan(FaultPlan(**{kind.value: 1.0}))
    status, body = post(proxy)
    assert status == 200 and SHAPES[kind](body)
    assert [request.fault for request in proxy.requests] == [kind]


def test_slow_drip_sends_the_head_at_once_and_the_body_a_byte_at_a_time(proxy: FaultProxy) -> None:
    proxy.set_plan(FaultPlan(slow_drip=1.0, drip_s=0.005))
    started = time.monotonic()
    status, body = post(proxy)
    took = time.monotonic() - started
    assert status == 200 and first_choice(body)["message"]["content"] == "an answer"
    size = len(json.dumps(body))
    assert took > 0.8 * size * 0.005  # every byte waited for
    assert proxy.requests[0].fault is FaultKind.SLOW_DRIP
