"""Bounded, visible retries and failing fast at the LM layer, against the real local OpenAI server.

pipeline.backends.{resilience, guarded_engine, openai_engine, failure_guard, services, preflight}:
every LM built by the registry runs behind the project's retry loop. Outcomes are asserted on what
the server received and on what the LM layer reports (errors, log lines, ledgers), never on elapsed
time.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dspy
import pytest
from dspy.utils.exceptions import LMRateLimitError, LMServerError, LMTimeoutError
from memtrace_loop.memory_systems.signatures import AnswerQuestion
from memtrace_loop.pipeline.backends.call_count import CallLedger
from memtrace_loop.pipeline.backends.embeddings import OpenAIEmbedder
from memtrace_loop.pipeline.backends.failure_guard import FailureGuard
from memtrace_loop.pipeline.backends.lm import LMConfig
from memtrace_loop.pipeline.backends.preflight import check_endpoints
from memtrace_loop.pipeline.backends.registry import build_lm, build_lm_set
from memtrace_loop.pipeline.backends.services import RetryLedger, RunLedger, RunServices
from memtrace_loop.pipeline.core.config import ConfigError
from memtrace_loop.pipeline.core.stop import EndpointUnusable, Interrupted, StopToken, TooManyFailures
from memtrace_loop.pipeline.tracking.run_logging import retry_metrics

from tests.support import answering, forbid_network, isolate_llm_env
from tests.support.answering import ANSWER, ask, chat_calls
from tests.support.openai_server import OpenAIStubServer

KEY_ENV = "MEMTRACE_TEST_RESILIENCE_KEY"
KEY = "sk-memtrace-resilience-8d41c2a9f3"


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    cache_dir = isolate_llm_env(monkeypatch, tmp_path)
    forbid_network(monkeypatch)
    monkeypatch.setenv(KEY_ENV, KEY)
    return cache_dir


@pytest.fixture
def server() -> Iterator[OpenAIStubServer]:
    yield from answering.answering_server()


def openai_config(server: OpenAIStubServer, **overrides: Any) -> dict[str, Any]:
    return answering.openai_config(server, KEY_ENV, **overrides)


def closed_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    sock.close()
    return port


def retry_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "retrying in" in r.getMessage()]


# ------------------------------------------------------------------------------------ config
def test_retry_bounds_are_validated_with_the_key_named() -> None:
    config = LMConfig.from_mapping({"backend": "sim", "model": "stand-in"})
    assert (config.retry_after_cap_s, config.deadline_s) == (60.0, 300.0)
    with pytest.raises(ConfigError, match=r"lm\.judge\.retry_after_cap_s"):
        LMConfig.from_mapping({"backend": "sim", "model": "m", "retry_after_cap_s": 0}, role="judge")
    with pytest.raises(ConfigError, match=r"lm\.task\.deadline_s"):
        LMConfig.from_mapping({"backend": "sim", "model": "m", "deadline_s": -1}, role="task")
    with pytest.raises(ConfigError, match=r"lm\.task\.engine"):  # LiteLLM would bypass the retry loop
        LMConfig.from_mapping(
            {"backend": "openai", "model": "m", "api_base": "http://x/v1", "engine": "litellm"}, role="task"
        )


# --------------------------------------------------------------------------------- bounded waits
def test_retry_after_longer_than_the_cap_is_never_waited(
    server: OpenAIStubServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    lm = build_lm(openai_config(server, retry_after_cap_s=60), role="task")
    server.inject(status=429, times=5, retry_after=3600)
    with pytest.raises(LMRateLimitError, match=r"rate limited for longer than allowed.*3600 s.*retry_after_cap_s=60"):
        ask(lm)
    assert [call.status for call in chat_calls(server)] == [429]  # no retry, no wait
    assert "3600" in caplog.text and "lm.task" in caplog.text


def test_a_capped_retry_after_is_honoured(server: OpenAIStubServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    lm = build_lm(openai_config(server, retry_after_cap_s=2), role="task")
    server.inject(status=429, times=1, retry_after=1)
    assert ask(lm).answer == ANSWER
    assert [call.status for call in chat_calls(server)] == [429, 200]
    (line,) = retry_lines(caplog)
    assert "retrying in 1.0 s" in line


def test_the_deadline_is_never_slept_past(server: OpenAIStubServer) -> None:
    lm = build_lm(openai_config(server, deadline_s=0.5), role="task")
    server.inject(status=503, times=5, retry_after=1)  # waiting 1 s would end after the deadline
    with pytest.raises(LMTimeoutError, match=r"deadline_s=0\.5 passed after 1 attempt"):
        ask(lm)
    assert len(chat_calls(server)) == 1


def test_backoff_without_retry_after_is_capped(server: OpenAIStubServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    lm = build_lm(openai_config(server, num_retries=3, retry_after_cap_s=0.01), role="task")
    server.inject(status=500, times=3, retry_after=None)
    assert ask(lm).answer == ANSWER
    waits = [float(m) for m in re.findall(r"retrying in ([0-9.]+) s", caplog.text)]
    assert waits == [0.0, 0.0, 0.0]  # 1, 2, 4 s capped at 0.01 s (logged with one decimal)
    assert len(chat_calls(server)) == 4


@pytest.mark.slow  # seconds each (measured): out of `make test-fast`
@pytest.mark.parametrize(
    "body", [b"<html><body>502 Bad Gateway</body></html>", b'{"id": "chatcmpl-1", "choi', b"", b"{}"],
    ids=["not-json", "truncated", "empty", "no-choice"],
)
def test_a_malformed_200_body_is_retried(
    server: OpenAIStubServer, caplog: pytest.LogCaptureFixture, body: bytes
) -> None:
    caplog.set_level(logging.WARNING)
    retries = RetryLedger()
    lm = build_lm(openai_config(server), role="judge", services=RunServices(ledger=RunLedger(retries=retries)))
    server.inject_body(body, times=2)
    assert ask(lm).answer == ANSWER
    assert [call.status for call in chat_calls(server)] == [200, 200, 200]
    assert retries.tally().cause("judge", "malformed") == 2
    assert all("malformed" in line for line in retry_lines(caplog))


# ------------------------------------------------------------------------------- visible retries
def test_retries_are_logged_with_a_scrubbed_endpoint_and_counted_per_role(
    server: OpenAIStubServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    retries = RetryLedger()
    lms = build_lm_set(
        {
            "task": {"backend": "sim", "model": "stand-in"},
            "judge": openai_config(server),
            "attributor": openai_config(server, reuse_calls=False),  # its own call, not the judge's reply
            "rewriter": {"backend": "sim", "model": "stand-in"},
        },
        services=RunServices(ledger=RunLedger(retries=retries)),
    )
    server.inject(status=503, times=2, retry_after=0)
    assert ask(lms.judge).answer == ANSWER
    server.inject(status=429, times=1, retry_after=0)
    assert ask(lms.attributor).answer == ANSWER
    lines = retry_lines(caplog)
    assert len(lines) == 3
    assert lines[0].startswith(f"lm.judge {server.base_url}: attempt 1/4 failed (server_error: HTTP 503")
    assert lines[1].startswith(f"lm.judge {server.base_url}: attempt 2/4 failed")
    assert lines[2].startswith(f"lm.attributor {server.base_url}: attempt 1/4 failed (rate_limited: HTTP 429")
    assert KEY not in caplog.text
    tally = retries.tally()
    assert (tally.role("judge"), tally.role("attributor"), tally.role("task"), tally.total) == (2, 1, 0, 3)
    assert retry_metrics(tally) == {
        "lm_retries/total": 3.0,
        "lm_retries/attributor": 1.0, "lm_retries/attributor/rate_limited": 1.0,
        "lm_retries/judge": 2.0, "lm_retries/judge/server_error": 2.0,
    }


def test_credentials_in_the_api_base_never_reach_a_log_or_an_error(
    server: OpenAIStubServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    secret_base = f"http://127.0.0.1:{server.port}/v1?token=qs-secret"  # (user info is refused by LMConfig)
    lm = build_lm(openai_config(server, api_base=secret_base, num_retries=1, retry_after_cap_s=0.01), role="judge")
    assert ask(lm).answer == ANSWER  # the query reaches the server after the path
    assert server.requests[-1].path == "/v1/chat/completions?token=qs-secret"
    server.inject(404, message=f"no model at {secret_base}/chat/completions")
    with pytest.raises(BaseException) as caught:  # EndpointUnusable, the URL scrubbed
        ask(lm, question="Another question?")
    assert str(caught.value).startswith(f"lm.judge endpoint {server.base_url}")
    for text in (caplog.text, str(caught.value), json.dumps(lm.dump_state(), default=str)):
        assert "qs-secret" not in text and KEY not in text


def test_credentials_as_user_info_in_the_api_base_are_refused_without_echoing_them() -> None:
    from memtrace_loop.pipeline.backends.lm import LMConfig
    from memtrace_loop.pipeline.core.config import ConfigError

    with pytest.raises(ConfigError, match=r"lm\.judge: api_base: credentials in the URL") as refused:
        LMConfig.from_mapping(
            {"backend": "openai", "model": "m", "api_base": "http://user:pw-in-url@127.0.0.1:9/v1"}, role="judge"
        )
    assert "pw-in-url" not in str(refused.value)


def test_a_call_retried_three_times_counts_once_as_made(server: OpenAIStubServer) -> None:
    calls, retries = CallLedger(), RetryLedger()
    services = RunServices(ledger=RunLedger(retries=retries))
    lm = calls.count("task", build_lm(openai_config(server), role="task", services=services))
    server.inject(status=503, times=3, retry_after=0)
    assert ask(lm).answer == ANSWER
    assert len(chat_calls(server)) == 4
    task = calls.tally().role("task")
    assert (task.made, task.cached, task.failed) == (1, 0, 0)
    assert task.prompt_tokens > 0
    assert retries.tally().role("task") == 3


def test_async_calls_are_retried_too(server: OpenAIStubServer) -> None:
    retries = RetryLedger()
    lm = build_lm(openai_config(server), role="task", services=RunServices(ledger=RunLedger(retries=retries)))

    async def ask_async() -> dspy.Prediction:
        with dspy.context(lm=lm):
            return await dspy.Predict(AnswerQuestion).acall(context="Memory: x", question="When?")

    server.inject(status=502, times=1, retry_after=0)
    assert asyncio.run(ask_async()).answer == ANSWER
    assert [call.status for call in chat_calls(server)] == [502, 200]
    assert retries.tally().cause("task", "server_error") == 1


# ----------------------------------------------------------------------------- fail fast and loud
def test_401_ends_the_run_naming_role_endpoint_and_key_variable(server: OpenAIStubServer) -> None:
    lm = build_lm(openai_config(server), role="judge")
    server.inject(status=401, times=5, message=f"Incorrect API key provided: {KEY}")
    with pytest.raises(EndpointUnusable) as caught:
        ask(lm)
    error = caught.value
    assert (error.role, error.endpoint) == ("judge", server.base_url)
    assert f"authentication failed (HTTP 401): check the key in ${KEY_ENV}" in str(error)
    assert str(error).startswith(f"lm.judge endpoint {server.base_url}")
    assert KEY not in str(error) and error.__cause__ is None and error.__suppress_context__
    assert len(chat_calls(server)) == 1  # never retried


def test_403_is_an_authentication_failure_too(server: OpenAIStubServer) -> None:
    lm = build_lm(openai_config(server), role="task")
    server.inject(status=403, times=1)
    with pytest.raises(EndpointUnusable, match="authentication failed \\(HTTP 403\\)"):
        ask(lm)


def test_404_names_the_model_and_the_path(server: OpenAIStubServer) -> None:
    lm = build_lm(openai_config(server, model="no-such-model"), role="rewriter")
    server.inject(status=404, times=5, message=f"The model `no-such-model` does not exist (key {KEY})")
    with pytest.raises(EndpointUnusable) as caught:
        ask(lm)
    text = str(caught.value)
    assert caught.value.role == "rewriter"
    assert "model 'no-such-model' or path not found (HTTP 404)" in text
    assert f"POST {server.base_url}/chat/completions" in text and "lm.rewriter.api_base" in text
    assert KEY not in text and "***" in text
    assert len(chat_calls(server)) == 1


def test_the_failure_guard_stops_the_run_and_later_calls_never_reach_the_server(server: OpenAIStubServer) -> None:
    guard = FailureGuard(max_failed_share=0.5, min_calls=4)
    services = RunServices(ledger=RunLedger(guard=guard))
    # every request the same: with reuse off, so each one is a call the guard counts
    lm = build_lm(openai_config(server, num_retries=0, reuse_calls=False), role="task", services=services)
    assert ask(lm).answer == ANSWER  # 1 ok
    server.inject(status=500, times=100, retry_after=0)
    for _ in range(2):  # 2 of 3 failed: a failed operation each, the run goes on (min_calls not reached)
        with pytest.raises(LMServerError):
            ask(lm)
    with pytest.raises(TooManyFailures, match=r"3 of 4 LM calls failed \(75%\).*50%.*max_failed_share"):
        ask(lm)
    sent = len(chat_calls(server))
    with pytest.raises(TooManyFailures):
        ask(lm)
    assert len(chat_calls(server)) == sent
    assert KEY not in str(guard.counts())


def test_failure_guard_counts_shares() -> None:
    guard = FailureGuard(max_failed_share=0.5, min_calls=4)
    for failed in (True, False, True, False, True):  # 3 of 5 = 60% > 50%, tripped on the 5th
        if guard.counts().calls == 4:
            with pytest.raises(TooManyFailures):
                guard.record(failed=failed, error="LMServerError: boom")
        else:
            guard.record(failed=failed)
    with pytest.raises(TooManyFailures, match="last error: LMServerError: boom"):
        guard.check()
    with pytest.raises(ValueError):
        FailureGuard(max_failed_share=1.5)


# ------------------------------------------------------------------------------------- stopping
def test_no_request_starts_after_a_stop_was_requested(server: OpenAIStubServer) -> None:
    stop = StopToken()
    lms = build_lm_set(
        {role: openai_config(server) for role in ("task", "judge", "attributor")}
        | {"rewriter": {"backend": "sim", "model": "stand-in", "cache": False}},
        services=RunServices(stop=stop),
    )
    assert ask(lms.task).answer == ANSWER
    sent = len(server.requests)
    stop.request("interrupted (test)")
    for lm in lms.by_role().values():
        with pytest.raises(Interrupted, match=r"interrupted \(test\)"):
            ask(lm)
    assert len(server.requests) == sent


def test_a_stop_during_a_backoff_wait_ends_the_call_without_another_request(server: OpenAIStubServer) -> None:
    stop = StopToken()
    lm = build_lm(openai_config(server), role="task", services=RunServices(stop=stop))
    server.inject(status=503, times=1, retry_after=30)  # within the cap: the call would wait 30 s
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            ask(lm)
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=call)
    worker.start()
    while not chat_calls(server) or chat_calls(server)[0].status == 0:
        threading.Event().wait(0.01)
    stop.request()
    worker.join()
    assert len(outcome) == 1 and isinstance(outcome[0], Interrupted)
    assert [call.status for call in chat_calls(server)] == [503]


# -------------------------------------------------------------------------------------- preflight
def lm_set_on(server: OpenAIStubServer, **overrides: Any) -> dict[str, Any]:
    shared = openai_config(server, cache=True, **overrides)
    return {"task": shared, "judge": shared, "attributor": shared, "rewriter": {"backend": "sim", "model": "x"}}


def test_preflight_asks_each_distinct_endpoint_once_and_bypasses_the_cache(server: OpenAIStubServer) -> None:
    mapping = lm_set_on(server)
    mapping["judge"] = openai_config(server, model="judge-model", cache=True)
    calls = CallLedger()
    lms = calls.counted(build_lm_set(mapping))
    checked = check_endpoints(lms)
    assert [(c.roles, c.model) for c in checked] == [
        (("task", "attributor"), "stub-model"), (("judge",), "judge-model"),
    ]
    assert sorted(call.json["model"] for call in chat_calls(server)) == ["judge-model", "stub-model"]
    check_endpoints(lms)  # asked again: a cached answer would prove nothing
    assert len(chat_calls(server)) == 4
    assert calls.tally().made() + calls.tally().cached() == 0  # no LM call was counted against any budget
    assert all(call.json["messages"][-1]["content"] == "ping" for call in chat_calls(server))


def test_preflight_on_a_dead_endpoint(server: OpenAIStubServer) -> None:
    mapping = lm_set_on(server, api_base=f"http://127.0.0.1:{closed_port()}/v1", num_retries=1)
    with pytest.raises(EndpointUnusable, match=r"refused at the first attempt: .*start the server") as caught:
        check_endpoints(build_lm_set(mapping))
    assert caught.value.role == "task" and caught.value.endpoint.startswith("http://127.0.0.1:")


def test_preflight_on_a_wrong_key(server: OpenAIStubServer) -> None:
    server.inject(status=401, times=1, message=f"Incorrect API key provided: {KEY}")
    with pytest.raises(EndpointUnusable) as caught:
        check_endpoints(build_lm_set(lm_set_on(server)))
    assert f"check the key in ${KEY_ENV}" in str(caught.value) and KEY not in str(caught.value)
    assert len(chat_calls(server)) == 1


def test_preflight_on_a_long_rate_limit(server: OpenAIStubServer) -> None:
    server.inject(status=429, times=1, retry_after=3600)
    with pytest.raises(EndpointUnusable, match=r"rate limited for longer than allowed: .*3600 s"):
        check_endpoints(build_lm_set(lm_set_on(server)))
    assert len(chat_calls(server)) == 1


def test_preflight_checks_an_openai_embedder(server: OpenAIStubServer) -> None:
    embedder = OpenAIEmbedder("embed-model", api_base=server.base_url, api_key_env=KEY_ENV, max_retries=0)
    checked = check_endpoints(build_lm_set(lm_set_on(server)), embedder=embedder)
    assert [c.roles for c in checked] == [("task", "judge", "attributor"), ("embedder",)]
    server.inject(status=401, times=1, endpoint="/embeddings")
    with pytest.raises(EndpointUnusable, match=rf"embedder endpoint {re.escape(server.base_url)}: .*\${KEY_ENV}"):
        check_endpoints({}, embedder=embedder)


def test_the_sim_needs_no_check_but_obeys_the_stop_token() -> None:
    stop = StopToken()
    roles = ("task", "judge", "attributor", "rewriter")
    lms = build_lm_set({role: {"backend": "sim", "model": "stand-in"} for role in roles}, RunServices(stop=stop))
    assert check_endpoints(lms) == ()
    stop.request()
    with pytest.raises(Interrupted):
        ask(lms.task)


def test_the_openai_embedder_fails_fast_on_a_wrong_model(server: OpenAIStubServer) -> None:
    embedder = OpenAIEmbedder("no-such-embedder", api_base=server.base_url, api_key_env=KEY_ENV, max_retries=3)
    server.inject(status=404, times=5, endpoint="/embeddings", message=f"no model (key {KEY})")
    with pytest.raises(EndpointUnusable, match=r"model 'no-such-embedder' or path not found \(HTTP 404\)") as caught:
        embedder.embed(["a text"])
    assert caught.value.role == "embedder" and KEY not in str(caught.value)
    assert len(server.requests_to("/embeddings")) == 1  # not retried
