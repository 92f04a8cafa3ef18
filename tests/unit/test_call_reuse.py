"""pipeline.backends.call_count: the run's store of replies (single flight, LRU bound, what the key covers)."""

from __future__ import annotations

import threading
import time

import pytest
from dspy.lm15 import Config, Message, Request, Response, TextPart, Usage
from memtrace_loop.pipeline.backends.call_count import (
    CallTally,
    ReplyStore,
    RoleCalls,
    close_call,
    current_call,
    mark_reused,
    open_call,
    request_key,
)


def reply(text: str) -> Response:
    return Response(id=None, model="m", message=Message.assistant([TextPart(text)]), finish_reason="stop",
                    usage=Usage(input_tokens=3, output_tokens=1))


def request(question: str = "when?", **config: object) -> Request:
    return Request(model="stand-in", messages=(Message.user(question),), system="answer briefly",
                   config=Config(**config))


def key(req: Request, model: str = "sim/stand-in", endpoint: str = "sim/stand-in") -> str:
    return request_key(model, endpoint, req)


def test_concurrent_identical_requests_make_one_call_and_the_others_reuse_it() -> None:
    store, calls, start = ReplyStore(), [], threading.Barrier(6)
    results: list[tuple[Response, bool]] = []

    def slow_call() -> Response:
        calls.append(1)
        time.sleep(0.3)  # the other five threads arrive while it runs
        return reply("May")

    def ask() -> None:
        start.wait()
        results.append(store.get_or_call(key(request()), slow_call))

    threads = [threading.Thread(target=ask) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1
    assert sorted(reused for _, reused in results) == [False, *[True] * 5]
    assert {response.text for response, _ in results} == {"May"}
    assert store.stats().hits == 5 and store.stats().stored == 1


def test_a_failed_call_is_not_stored_and_a_waiting_thread_then_calls_itself() -> None:
    store, entered, attempts = ReplyStore(), threading.Event(), []

    def failing() -> Response:
        attempts.append("failed")
        entered.set()
        time.sleep(0.2)
        raise TimeoutError("no reply")

    def succeeding() -> Response:
        attempts.append("made")
        return reply("June")

    outcome: list[tuple[Response, bool]] = []
    waiter = threading.Thread(target=lambda: (entered.wait(), outcome.append(store.get_or_call("k", succeeding))))
    waiter.start()
    with pytest.raises(TimeoutError):
        store.get_or_call("k", failing)
    waiter.join()
    assert attempts == ["failed", "made"]
    assert outcome[0][0].text == "June" and outcome[0][1] is False
    assert store.get("k") is not None and store.stats().stored == 1


def test_the_store_keeps_at_most_max_entries_dropping_the_least_recently_used() -> None:
    store = ReplyStore(max_entries=2)
    store.put("a", reply("1"))
    store.put("b", reply("2"))
    assert store.get("a") is not None  # a is now the most recently used
    store.put("c", reply("3"))
    assert store.get("b") is None and store.get("a") is not None and store.get("c") is not None
    assert store.stats().entries == 2
    with pytest.raises(ValueError, match="max_entries must be at least 1"):
        ReplyStore(max_entries=0)


@pytest.mark.parametrize("changed", [
    request(temperature=0.7),
    request(max_tokens=64),
    request(response_format={"type": "json_object"}),
    request("where?"),
    Request(model="stand-in", messages=(Message.user("when?"),), system="answer at length"),
], ids=["temperature", "max_tokens", "response_format", "messages", "system"])
def test_the_key_covers_every_part_of_the_request(changed: Request) -> None:
    assert key(request()) == key(request())
    assert key(changed) != key(request())


def test_the_key_covers_the_model_the_endpoint_and_the_rollout() -> None:
    same = key(request())
    assert key(request(), model="other-model") != same
    assert key(request(), endpoint="http://127.0.0.1:9/v1") != same
    assert request_key("sim/stand-in", "sim/stand-in", request(), rollout_id="1") != same


def test_a_call_slot_is_marked_reused_only_inside_a_counted_call() -> None:
    mark_reused()  # outside a counted call: nothing to mark
    assert current_call() is None
    token = open_call(rollout_id=3)
    assert current_call() is not None and current_call().rollout_id == "3"  # type: ignore[union-attr]
    assert close_call(token) is False
    token = open_call()
    mark_reused()
    assert close_call(token) is True and current_call() is None


def test_reused_calls_are_their_own_count_and_older_tallies_still_load() -> None:
    tally = CallTally({"task": RoleCalls(made=6, cached=1, reused=2)})
    assert tally.reused() == 2 and tally.made() + tally.cached() == 7  # a budget counts made + cached only
    assert tally.role("task").reuse_share == pytest.approx(0.25)
    assert CallTally.from_dict(tally.to_dict()) == tally
    old = {"task": {"made": 3, "cached": 1, "failed": 0, "prompt_tokens": 5, "completion_tokens": 2}}
    assert CallTally.from_dict(old).role("task") == RoleCalls(3, 1, 0, 5, 2, reused=0)
    assert (tally - CallTally.from_dict(old)).role("task").reused == 2
    assert RoleCalls().reuse_share == 0.0
