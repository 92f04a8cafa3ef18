"""What a chat reply must carry to be used (`guarded_engine.check_reply`), our hints instead of a library's, the query
an api_base keeps: pure functions on built replies, no network."""

from __future__ import annotations

from typing import Any

import pytest
from dspy.lm15 import Message, Response, Usage
from memtrace_loop.pipeline.backends.failure_guard import MaxTokensGuard
from memtrace_loop.pipeline.backends.guarded_engine import (
    EmptyAtMaxTokens,
    EmptyReply,
    MalformedReply,
    RetryCause,
    Transient,
    check_reply,
    classify,
    our_hint,
)
from memtrace_loop.pipeline.backends.lm import usable_record
from memtrace_loop.pipeline.backends.openai_engine import with_query
from memtrace_loop.pipeline.core.stop import MaxTokensTooSmall, RunStopped


def reply(text: str | None, finish: str = "stop", data: Any = "raw") -> Response:
    content = {"role": "assistant", "content": text}
    raw = {"object": "chat.completion", "choices": [{"index": 0, "message": content, "finish_reason": finish}]}
    message = Message.assistant(text or "")
    return Response(id="r", model="m", message=message, finish_reason=finish, usage=Usage(),  # type: ignore[arg-type]
                    provider_data=raw if data == "raw" else data)


def test_a_reply_with_text_is_returned_as_is() -> None:
    answer = reply("7 May 2023")
    assert check_reply(answer, 64) is answer


@pytest.mark.parametrize(
    ("response", "error", "cause"),
    [
        (reply(None), EmptyReply, RetryCause.EMPTY_REPLY),
        (reply("   \n"), EmptyReply, RetryCause.EMPTY_REPLY),
        (reply("x", data={"object": "chat.completion"}), MalformedReply, RetryCause.MALFORMED),
        (reply("x", data={"choices": [{"index": 0}]}), MalformedReply, RetryCause.MALFORMED),
        (reply("x", data={"choices": []}), MalformedReply, RetryCause.MALFORMED),
    ],
    ids=["null", "blank", "no-choices", "no-message", "empty-choices"],
)
def test_a_reply_without_an_answer_is_a_retried_failure(response: Response, error: type, cause: RetryCause) -> None:
    with pytest.raises(error) as caught:
        check_reply(response, 64)
    verdict = classify(caught.value)
    assert isinstance(verdict, Transient) and verdict.cause is cause


def test_an_empty_reply_cut_at_max_tokens_fails_at_once_naming_the_limit() -> None:
    with pytest.raises(EmptyAtMaxTokens, match=r"max_tokens=64 \(finish_reason \"length\"\)") as caught:
        check_reply(reply("", finish="length"), 64)
    assert classify(caught.value) is None and caught.value.max_tokens == 64  # not retried
    assert check_reply(reply("half an ans", finish="length"), 64).text == "half an ans"  # text: the adapter judges


def test_the_max_tokens_guard_stops_a_run_at_the_third_and_names_the_override() -> None:
    guard = MaxTokensGuard()
    guard.record("task", 64)
    guard.record("judge", 64)
    guard.record("task", 64)
    with pytest.raises(MaxTokensTooSmall) as caught:
        guard.record("task", 64)
    assert isinstance(caught.value, RunStopped) and guard.count("judge") == 1
    assert str(caught.value).startswith("lm.task: 3 replies came back empty, cut at lm.task.max_tokens=64")
    assert "lm.task.max_tokens=256" in str(caught.value)


def test_cache_records_without_any_answer_are_not_usable() -> None:
    record = {"_dspy_format": "dspy-lm15-result-v1", "responses": []}
    assert not usable_record({**record, "outputs": [None]})
    assert not usable_record({**record, "outputs": [""]})
    assert not usable_record({**record, "outputs": [{"text": None}]})
    assert usable_record({**record, "outputs": ["7 May 2023"]})
    assert usable_record({**record, "outputs": [{"text": None, "tool_calls": [{"id": "t"}]}]})
    assert usable_record({"choices": []})  # another format: not judged


def test_a_library_hint_becomes_the_key_our_user_sets() -> None:
    lm15_text = ("read timed out mid-body: no bytes for 5s; this is lm15's read timeout, not a server failure — "
                 "raise it with Timeouts(read=...) if the model needs longer")
    ours = our_hint(lm15_text, "judge")
    assert "Timeouts" not in ours and "lm15" not in ours and "raise lm.judge.timeout_s" in ours
    assert "Timeouts(" not in our_hint("all 100 connections were busy for 60s; raise max_connections, or "
                                       "Timeouts(pool=...) to wait longer", "task")


def test_an_api_base_query_is_appended_after_the_path() -> None:
    assert with_query("http://gw/v1/chat/completions", "api-version=2024-02-01") == (
        "http://gw/v1/chat/completions?api-version=2024-02-01")
    assert with_query("http://gw/v1/x?a=1", "b=2") == "http://gw/v1/x?a=1&b=2"
    assert with_query("http://gw/v1/x", "") == "http://gw/v1/x"
    assert with_query("http://gw/v1/x?b=2", "b=2") == "http://gw/v1/x?b=2"  # a request sent twice: once
