"""pipeline.backends.lm: configs, the sim backend, and the openai backend through DSPy's real client path.

The openai-backend tests talk HTTP to `tests.support.openai_server` on 127.0.0.1; nothing else is
reachable (`forbid_network`).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dspy
import pytest
from dspy.utils.exceptions import (
    AdapterParseError,
    LMError,
    LMRateLimitError,
    LMTimeoutError,
    LMTransportError,
    is_retryable_lm_error,
)
from memtrace_loop.memory_systems.signatures import AnswerQuestion
from memtrace_loop.pipeline.backends.lm import (
    LMConfig,
    LMSet,
    MissingAPIKeyError,
    configure_cache,
    describe,
)
from memtrace_loop.pipeline.backends.registry import build_lm, build_lm_set
from memtrace_loop.pipeline.core.config import ConfigError

from tests.support import answering, forbid_network, isolate_llm_env
from tests.support.answering import ANSWER, ask, chat_calls
from tests.support.openai_server import OpenAIStubServer

KEY_ENV = "MEMTRACE_TEST_LM_KEY"
KEY = "sk-memtrace-test-5f2b9c0e7d"


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


# --------------------------------------------------------------------------------------- config
def test_config_from_mapping_rejects_unknown_keys() -> None:
    with pytest.raises(ValueError, match=r"unknown keys \['temprature'\]"):
        LMConfig.from_mapping({"backend": "sim", "model": "stand-in", "temprature": 0.2})


def test_config_defaults_and_frozen() -> None:
    config = LMConfig.from_mapping({"backend": "sim", "model": "stand-in"})
    assert (config.temperature, config.num_retries, config.cache) == (0.0, 5, True)
    assert config.max_tokens is None and not config.paraphrase
    endpoint = LMConfig.from_mapping({"backend": "openai", "model": "m", "api_base": "http://x"})
    assert (endpoint.timeout_s, endpoint.api_key_env, endpoint.dialect) == (60, None, "openai")
    with pytest.raises(pydantic_error()):
        config.model = "other"  # type: ignore[misc]


def test_a_key_of_another_backend_is_refused_naming_it_and_its_backend() -> None:
    with pytest.raises(ConfigError, match=r"lm\.task\.dialect: a key of backend openai, not of sim"):
        LMConfig.from_mapping({"backend": "sim", "model": "stand-in", "dialect": "vllm"}, role="task")
    with pytest.raises(ConfigError, match=r"lm\.judge\.paraphrase: a key of backend sim, not of openai"):
        LMConfig.from_mapping({"backend": "openai", "model": "m", "api_base": "http://x", "paraphrase": True},
                              role="judge")


def pydantic_error() -> type[Exception]:
    import pydantic

    return pydantic.ValidationError


def test_config_errors_do_not_echo_a_key_put_in_the_wrong_field() -> None:
    with pytest.raises(ValueError) as caught:
        LMConfig.from_mapping({"backend": "openai", "model": "m", "api_base": "http://x", "api_key_env": KEY})
    assert "api_key_env" in str(caught.value) and KEY not in str(caught.value)
    with pytest.raises(pydantic_error()) as direct:
        LMConfig(backend="openai", model="m", api_base="http://x", api_key_env=KEY)
    assert KEY not in str(direct.value)


def test_config_openai_without_base_needs_a_key_variable() -> None:
    with pytest.raises(ValueError, match="api_key_env"):
        LMConfig.from_mapping({"backend": "openai", "model": "gpt-4o-mini"})


def test_describe_is_safe_to_log(server: OpenAIStubServer) -> None:
    config = LMConfig.from_mapping(
        openai_config(server, api_base=f"http://127.0.0.1:{server.port}/v1?token=tk-5678&t=1")
    )
    info = describe(config)
    text = json.dumps(info)
    assert KEY not in text and "tk-5678" not in text  # (user info in an api_base is refused by LMConfig)
    assert info["api_key_env"] == KEY_ENV and info["api_key_set"] == "true"
    # credential-looking query values masked, the rest kept (pipeline.core.redaction.scrub_url)
    assert info["api_base"] == f"http://127.0.0.1:{server.port}/v1?token=***&t=1"
    assert info["backend"] == "openai" and info["model"] == "stub-model" and info["timeout_s"] == "5.0"
    assert all(isinstance(value, str) for value in info.values())


# ------------------------------------------------------------------------------------------ sim
@pytest.mark.usefixtures("lm_history")  # reads `lm.history` (off in the test session)
def test_sim_lm_gives_the_stand_in_answer() -> None:
    from dspy.adapters import ChatAdapter
    from memtrace_loop.pipeline.sim.stand_in import respond

    lm = build_lm({"backend": "sim", "model": "stand-in"})
    assert lm.model == "sim/stand-in"
    prediction = ask(lm)
    (entry,) = lm.history
    expected = respond(entry["messages"])
    assert entry["outputs"] == [expected]
    assert prediction.answer == ChatAdapter().parse(AnswerQuestion, expected)["answer"]
    assert entry["usage"]["total_tokens"] > 0


def test_sim_lm_supports_async_calls_and_saves_its_state() -> None:
    import asyncio

    lm = build_lm({"backend": "sim", "model": "stand-in", "cache": False})

    async def ask_async() -> dspy.Prediction:
        with dspy.context(lm=lm):
            return await dspy.Predict(AnswerQuestion).acall(context="Memory: x", question="What?")

    assert isinstance(asyncio.run(ask_async()), dspy.Prediction)
    state = lm.dump_state()
    assert state["engine"]["class"] == "memtrace_loop.pipeline.backends.guarded_engine:GuardedEngine"
    assert state["engine"]["state"]["inner"]["class"] == "memtrace_loop.pipeline.sim.engine:SimEngine"
    assert state["num_retries"] == 0  # the guarded engine retries, not DSPy
    reloaded = dspy.LM.load_state(state, allow_custom_lm_class=True)
    assert ask(reloaded).answer == ask(lm).answer


# --------------------------------------------------------------------------------------- openai
@pytest.mark.usefixtures("lm_history")  # reads `lm.history` (off in the test session)
def test_openai_backend_through_dspy_predict(
    server: OpenAIStubServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    lm = build_lm(openai_config(server, max_tokens=128, temperature=0.0))
    prediction = ask(lm)
    assert prediction.answer == ANSWER
    (call,) = chat_calls(server)
    assert call.path == "/v1/chat/completions"
    assert call.header("authorization") == f"Bearer {KEY}"
    assert call.json["model"] == "stub-model"
    assert call.json["max_completion_tokens"] == 128 and call.json["temperature"] == 0.0
    assert [message["role"] for message in call.json["messages"]] == ["system", "user"]
    (entry,) = lm.history
    assert entry["usage"]["total_tokens"] > 0
    # the key went to the server's Authorization header and nowhere else
    assert KEY not in json.dumps(lm.dump_state(), default=str)
    assert KEY not in json.dumps(lm.history, default=str)
    assert KEY not in caplog.text
    assert KEY not in json.dumps(
        [{k: v for k, v in c.headers.items() if k.lower() != "authorization"} for c in server.requests]
    )
    assert KEY.encode() not in call.body


@pytest.mark.parametrize(("dialect", "field"), [("vllm", "max_tokens"), ("ollama", "max_tokens")])
def test_dialect_selects_the_token_limit_field(server: OpenAIStubServer, dialect: str, field: str) -> None:
    lm = build_lm(openai_config(server, dialect=dialect, max_tokens=64))
    assert ask(lm).answer == ANSWER
    (call,) = chat_calls(server)
    assert call.json[field] == 64 and "max_completion_tokens" not in call.json
    assert call.json["model"] == "stub-model"


def test_no_key_variable_sends_a_placeholder_not_an_ambient_key(
    server: OpenAIStubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-ambient-should-not-leak")
    lm = build_lm(openai_config(server, api_key_env=None))
    assert ask(lm).answer == ANSWER
    assert chat_calls(server)[0].header("authorization") == "Bearer EMPTY"


def test_missing_key_variable_is_named(server: OpenAIStubServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMTRACE_TEST_ABSENT_KEY", raising=False)
    with pytest.raises(MissingAPIKeyError, match="MEMTRACE_TEST_ABSENT_KEY") as caught:
        build_lm(openai_config(server, api_key_env="MEMTRACE_TEST_ABSENT_KEY"))
    assert caught.value.variable == "MEMTRACE_TEST_ABSENT_KEY"
    monkeypatch.setenv("MEMTRACE_TEST_ABSENT_KEY", "")
    with pytest.raises(MissingAPIKeyError, match="MEMTRACE_TEST_ABSENT_KEY"):
        build_lm(openai_config(server, api_key_env="MEMTRACE_TEST_ABSENT_KEY"))
    assert server.requests == []


def retry_waits(caplog: pytest.LogCaptureFixture) -> list[float]:
    """The seconds the retry loop chose to wait before each retry (Retry-After, else its backoff), read
    from its WARNING lines instead of timed: no wall-clock assertion."""
    return [float(m) for m in re.findall(r"retrying in ([0-9.]+) s", caplog.text)]


def test_one_429_is_retried_at_once(server: OpenAIStubServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    lm = build_lm(openai_config(server))
    server.inject(status=429, times=1, retry_after=0)
    assert ask(lm).answer == ANSWER
    assert retry_waits(caplog) == [0]
    assert [call.status for call in chat_calls(server)] == [429, 200]


def test_retry_after_is_honoured(server: OpenAIStubServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    lm = build_lm(openai_config(server))
    server.inject(status=503, times=1, retry_after=1.5)  # without the header the backoff would wait 1 s
    assert ask(lm).answer == ANSWER
    assert retry_waits(caplog) == [1.5]
    assert [call.status for call in chat_calls(server)] == [503, 200]


def test_retries_are_bounded_by_num_retries(server: OpenAIStubServer) -> None:
    lm = build_lm(openai_config(server, num_retries=2))
    server.inject(status=429, times=10, retry_after=0)
    with pytest.raises(LMRateLimitError) as caught:
        ask(lm)
    assert caught.value.status == 429
    assert len(chat_calls(server)) == 3  # first attempt + 2 retries


def test_timeout_is_applied_and_raises_a_retryable_lm_error(server: OpenAIStubServer) -> None:
    lm = build_lm(openai_config(server, timeout_s=0.4, num_retries=0))
    server.inject_delay(10, times=1)  # the default timeout_s (60 s) would wait this out: only 0.4 s raises
    with pytest.raises(LMError) as caught:
        ask(lm)
    # DSPy 3.4.1's native engine reports a read timeout as LMTransportError ("read timed out ...");
    # the LiteLLM engine would raise LMTimeoutError. Both are retryable.
    assert isinstance(caught.value, (LMTransportError, LMTimeoutError))
    assert is_retryable_lm_error(caught.value)
    assert "timed out" in str(caught.value)


def test_a_timed_out_attempt_is_retried(server: OpenAIStubServer) -> None:
    lm = build_lm(openai_config(server, timeout_s=0.4, num_retries=1))
    server.inject_delay(10, times=1)
    assert ask(lm).answer == ANSWER
    assert len(chat_calls(server)) == 2


def test_malformed_response_raises_adapter_parse_error(server: OpenAIStubServer) -> None:
    lm = build_lm(openai_config(server))
    server.inject_malformed(times=2)
    with pytest.raises(AdapterParseError) as caught:
        ask(lm)
    # ChatAdapter failed, fell back to JSONAdapter (a second request), which failed too.
    assert caught.value.adapter_name == "JSONAdapter"
    assert len(chat_calls(server)) == 2
    assert [call.status for call in chat_calls(server)] == [200, 200]


def test_one_malformed_response_is_rescued_by_the_json_fallback(server: OpenAIStubServer) -> None:
    lm = build_lm(openai_config(server))
    server.inject_malformed(times=1)
    assert ask(lm).answer == ANSWER
    second = chat_calls(server)[1]
    assert "Respond with a JSON object" in second.json["messages"][-1]["content"]


def test_malformed_responses_are_cached_like_any_other(server: OpenAIStubServer) -> None:
    """DSPy caches the raw LM response before parsing: garbage is replayed until the cache is bypassed."""
    lm = build_lm(openai_config(server, cache=True))
    server.inject_malformed(times=2)
    with pytest.raises(AdapterParseError):
        ask(lm)
    with pytest.raises(AdapterParseError):
        ask(lm)
    assert len(chat_calls(server)) == 2  # the repeat never reached the server
    with dspy.context(lm=lm):  # a distinct rollout_id (with temperature > 0) is a fresh cache entry
        fresh = dspy.Predict(AnswerQuestion)(
            context="Memory: Caroline went to a group. Time: 7 May 2023",
            question="When did Caroline go to the support group?",
            config={"rollout_id": 1, "temperature": 0.7},
        )
    assert fresh.answer == ANSWER


def test_cache_directory_is_honoured(server: OpenAIStubServer, tmp_path: Path) -> None:
    first_dir, second_dir = tmp_path / "cache-a", tmp_path / "cache-b"
    configure_cache(first_dir)
    assert Path(dspy.cache.disk_cache.directory) == first_dir.resolve()
    lm = build_lm(openai_config(server, cache=True, reuse_calls=False))  # DSPy's cache alone
    assert ask(lm).answer == ANSWER
    assert ask(lm).answer == ANSWER
    assert len(chat_calls(server)) == 1  # second identical call: cache hit
    assert any(first_dir.rglob("*.db"))

    configure_cache(first_dir)  # a fresh in-memory layer: the hit must now come from disk
    assert ask(build_lm(openai_config(server, cache=True))).answer == ANSWER
    assert len(chat_calls(server)) == 1
    assert KEY.encode() not in b"".join(path.read_bytes() for path in first_dir.rglob("*") if path.is_file())

    configure_cache(second_dir)  # an empty cache: the call reaches the server again
    assert ask(lm).answer == ANSWER
    assert len(chat_calls(server)) == 2


def test_cache_false_always_reaches_the_server(server: OpenAIStubServer) -> None:
    lm = build_lm(openai_config(server, cache=False, reuse_calls=False))  # reuse: tests/http/test_reused_replies.py
    ask(lm)
    ask(lm)
    assert len(chat_calls(server)) == 2


# ------------------------------------------------------------------------------------------ sets
def lm_set_mapping(server: OpenAIStubServer) -> dict:
    return {
        "task": {"backend": "sim", "model": "stand-in"},
        "judge": openai_config(server, model="judge-model"),
        "attributor": openai_config(server, model="attributor-model"),
        "rewriter": {"backend": "sim", "model": "rewriter", "cache": False},
    }


def test_build_lm_set(server: OpenAIStubServer) -> None:
    lms = build_lm_set(lm_set_mapping(server))
    assert isinstance(lms, LMSet)
    assert lms.task.model == "sim/stand-in" and lms.rewriter.model == "sim/rewriter"
    assert lms.judge.model == "openai/judge-model" and lms.attributor.model == "openai/attributor-model"
    assert set(lms.by_role()) == {"task", "judge", "attributor", "rewriter"}
    assert ask(lms.judge).answer == ANSWER
    assert chat_calls(server)[0].json["model"] == "judge-model"
    with pytest.raises(AttributeError):
        lms.task = lms.judge  # type: ignore[misc]


def test_build_lm_set_names_missing_and_unknown_roles(server: OpenAIStubServer) -> None:
    mapping = lm_set_mapping(server)
    del mapping["judge"]
    mapping["critic"] = {"backend": "sim", "model": "x"}
    with pytest.raises(ValueError, match=r"unknown roles \['critic'\], missing roles \['judge'\]"):
        build_lm_set(mapping)
    mapping = lm_set_mapping(server)
    mapping["judge"] = {"backend": "sim", "model": "x", "timeout": 3}
    with pytest.raises(ValueError, match=r"role 'judge'.*unknown keys \['timeout'\]"):
        build_lm_set(mapping)
