"""One wall-clock deadline per LM call covers connecting, waiting AND reading; an api_base keeps its query.

Behind the fault-injecting proxy, a 200 whose body arrives one byte a second (it never trips the 5 s
read timeout) ends the call, sync or async, within `deadline_s` plus a second, with the deadline named
and logged while it happens; the endpoint check (`check_endpoints`) is bound by the same deadline. A
reply that arrives in time is not cut. An api_base with a query (Azure-style `?api-version=...`) reaches
the server as path + query. Timing bounds use small limits (`deadline_s=2`) and slack for a loaded host;
the clock runs around the call only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dspy
import pytest
from memtrace_loop.memory_systems.signatures import AnswerQuestion
from memtrace_loop.pipeline.backends.preflight import check_endpoints
from memtrace_loop.pipeline.backends.registry import build_lm
from memtrace_loop.pipeline.core.stop import EndpointUnusable

from tests.support import answering, forbid_network, isolate_llm_env
from tests.support.answering import ANSWER, QUESTION, ask
from tests.support.fault_proxy import FaultKind, FaultPlan, FaultProxy
from tests.support.openai_server import OpenAIStubServer, running_server

KEY_ENV = "MEMTRACE_TEST_DRIP_KEY"
DEADLINE_S = 2.0
SLACK_S = 1.0 + 1.5  # the promise (one second) plus room for a loaded host


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate_llm_env(monkeypatch, tmp_path)
    forbid_network(monkeypatch)
    monkeypatch.setenv(KEY_ENV, "sk-drip-test")


@pytest.fixture
def server() -> Iterator[OpenAIStubServer]:
    yield from running_server(responder=answering.answering_responder)


@pytest.fixture
def dripping(server: OpenAIStubServer) -> Iterator[FaultProxy]:
    with FaultProxy(server.base_url, FaultPlan(slow_drip=1.0, drip_s=1.0)) as proxy:
        yield proxy


def lm_at(api_base: str, **overrides: Any) -> dspy.LM:
    config = {"backend": "openai", "model": "stub-model", "api_base": api_base, "api_key_env": KEY_ENV,
              "timeout_s": 5, "deadline_s": DEADLINE_S, "num_retries": 3, "cache": False, **overrides}
    return build_lm(config, role="task")


def test_a_dripped_reply_ends_the_call_at_its_deadline(dripping: FaultProxy, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    lm = lm_at(dripping.base_url)
    started = time.monotonic()
    with pytest.raises(Exception, match=r"deadline_s=2 passed") as caught:
        ask(lm)
    elapsed = time.monotonic() - started
    assert DEADLINE_S - 0.1 < elapsed < DEADLINE_S + SLACK_S, elapsed
    assert dripping.count(FaultKind.SLOW_DRIP) == 1  # no retry started after the deadline
    assert "Timeouts(" not in str(caught.value) and "deadline_s=2" in caplog.text  # logged as it happened


def test_an_async_call_is_cut_at_its_deadline_too(dripping: FaultProxy) -> None:
    lm = lm_at(dripping.base_url)

    async def ask_async() -> Any:
        with dspy.context(lm=lm):
            return await dspy.Predict(AnswerQuestion).acall(context="Memory: none", question=QUESTION)

    started = time.monotonic()
    with pytest.raises(Exception, match=r"deadline_s=2 passed"):
        asyncio.run(ask_async())
    assert time.monotonic() - started < DEADLINE_S + SLACK_S


def test_the_endpoint_check_is_bound_by_the_deadline(dripping: FaultProxy) -> None:
    lm = lm_at(dripping.base_url)
    started = time.monotonic()
    with pytest.raises(EndpointUnusable, match=r"deadline_s=2 passed") as caught:
        check_endpoints({"task": lm})
    assert time.monotonic() - started < DEADLINE_S + SLACK_S
    assert str(caught.value).startswith(f"lm.task endpoint {dripping.base_url}")


def test_a_reply_that_arrives_in_time_is_not_cut(server: OpenAIStubServer) -> None:
    with FaultProxy(server.base_url, FaultPlan(slow_drip=1.0, drip_s=0.002)) as proxy:  # ~1 s for the body
        assert ask(lm_at(proxy.base_url)).answer == ANSWER
        assert proxy.count(FaultKind.SLOW_DRIP) == 1


def test_an_api_base_with_a_query_keeps_path_and_query(server: OpenAIStubServer) -> None:
    lm = lm_at(f"{server.base_url}?api-version=2024-02-01")
    assert ask(lm).answer == ANSWER
    assert [request.path for request in server.requests] == ["/v1/chat/completions?api-version=2024-02-01"]
    check_endpoints({"task": lm})
    assert server.requests[-1].path == "/v1/chat/completions?api-version=2024-02-01"


def test_a_slow_reply_is_logged_while_it_arrives(server: OpenAIStubServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    plan = FaultPlan(slow_drip=1.0, drip_s=0.25)  # never 1 s without a byte: no read timeout
    with FaultProxy(server.base_url, plan) as proxy, pytest.raises(Exception, match=r"deadline_s=2 passed"):
        ask(lm_at(proxy.base_url, timeout_s=1))
    ended = time.time()
    slow = [record for record in caplog.records if "has been arriving for" in record.getMessage()]
    assert len(slow) == 1 and ended - slow[0].created > 0.5  # logged during the reply, not after it
