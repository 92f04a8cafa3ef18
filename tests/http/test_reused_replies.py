"""Reusing replies within a run (`lm.<role>.reuse_calls`) through the real LM layer: DSPy's client, the
`GuardedEngine`, the run's `ReplyStore` and `CallLedger`, with DSPy's response cache off (as `make
compare` runs). The simulated world's stand-in and a local OpenAI-protocol server (which counts what it
received) answer."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import dspy
import pytest
from memtrace_loop.pipeline.backends.lm import configure_cache
from memtrace_loop.pipeline.backends.registry import build_lm_set
from memtrace_loop.pipeline.backends.services import RunServices

from tests.support import answering, forbid_network, isolate_llm_env
from tests.support.answering import ANSWER, ask, chat_calls
from tests.support.openai_server import OpenAIStubServer

KEY_ENV = "MEMTRACE_TEST_REUSE_KEY"


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate_llm_env(monkeypatch, tmp_path)
    forbid_network(monkeypatch)
    monkeypatch.setenv(KEY_ENV, "sk-reuse-test-0b1c")


@pytest.fixture
def server() -> Iterator[OpenAIStubServer]:
    yield from answering.answering_server()


def sim_lm_set(services: RunServices, reuse: bool = True) -> dspy.LM:
    role = {"backend": "sim", "model": "stand-in", "cache": False, "reuse_calls": reuse}
    return build_lm_set({name: role for name in ("task", "judge", "attributor", "rewriter")}, services).task


@pytest.mark.parametrize("reuse", [True, False], ids=["reuse on", "reuse off"])
def test_a_repeated_identical_request_to_the_sim_lm_is_reused_not_made(reuse: bool) -> None:
    services = RunServices()
    task = sim_lm_set(services, reuse)
    first, second = ask(task), ask(task)
    assert first.answer == second.answer and first.answer  # the same reply either way
    calls = services.ledger.call_tally().role("task")
    assert (calls.made, calls.reused, calls.cached) == ((1, 1, 0) if reuse else (2, 0, 0))
    assert calls.prompt_tokens > 0
    made_once = services.ledger.call_tally().role("task").prompt_tokens
    ask(task, "What did Caroline research?")  # another question: made
    after = services.ledger.call_tally().role("task")
    assert after.made == calls.made + 1 and after.reused == calls.reused
    assert after.prompt_tokens > made_once  # only made calls add tokens


def test_a_request_with_other_parameters_is_made_again() -> None:
    services = RunServices()
    task = sim_lm_set(services)
    ask(task)
    with dspy.context(lm=task.copy(temperature=0.5)):  # a copy keeps the counter and the store
        dspy.Predict("question -> answer")(question="x")
    ask(task.copy(max_tokens=500))
    calls = services.ledger.call_tally().role("task")
    assert (calls.made, calls.reused) == (3, 0)


def test_each_run_has_its_own_store() -> None:
    first, second = RunServices(), RunServices()
    ask(sim_lm_set(first))
    ask(sim_lm_set(second))
    assert first.ledger.call_tally().role("task").made == 1
    assert second.ledger.call_tally().role("task").made == 1  # not reused from the other run


def test_the_endpoint_receives_a_repeated_request_once_even_from_concurrent_threads(server: OpenAIStubServer) -> None:
    services = RunServices()
    config = answering.openai_config(server, KEY_ENV)
    lms = build_lm_set({role: config for role in ("task", "judge", "attributor", "rewriter")}, services)
    start = threading.Barrier(4)
    answers: list[str] = []

    def asking() -> None:
        start.wait()
        answers.append(ask(lms.task).answer)

    threads = [threading.Thread(target=asking) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == [ANSWER] * 4
    assert len(chat_calls(server)) == 1
    calls = services.ledger.call_tally().role("task")
    assert (calls.made, calls.reused, calls.cached) == (1, 3, 0)
    usage_of_reused = asyncio.run(_async_usage(lms.task))  # the async face reuses too, billing nothing
    assert len(chat_calls(server)) == 1 and usage_of_reused == {}
    assert services.ledger.call_tally().role("task").reused == 4


async def _async_usage(lm: dspy.LM) -> dict:
    from memtrace_loop.memory_systems.signatures import AnswerQuestion

    with dspy.context(lm=lm, track_usage=True):
        prediction = await dspy.Predict(AnswerQuestion).acall(
            context="Memory: Caroline went to a group. Time: 7 May 2023", question=answering.QUESTION
        )
    return prediction.get_lm_usage()


def test_with_reuse_off_the_endpoint_receives_every_request(server: OpenAIStubServer) -> None:
    services = RunServices()
    config = answering.openai_config(server, KEY_ENV, reuse_calls=False)
    lms = build_lm_set({role: config for role in ("task", "judge", "attributor", "rewriter")}, services)
    ask(lms.task)
    ask(lms.task)
    assert len(chat_calls(server)) == 2
    assert services.ledger.call_tally().role("task").made == 2


def test_with_dspys_cache_on_a_repeat_in_the_run_is_reused_and_a_warm_cache_hit_is_cached(tmp_path: Path) -> None:
    """DSPy's cache answers a repeat before the reply store is asked; the counter still counts it as reused,
    so the budget (made + cached) is the same with the cache on or off. A reply cached by an EARLIER run is
    'cached' (charged), as before."""
    previous = dspy.cache
    configure_cache(tmp_path / "dspy")
    try:
        role = {"backend": "sim", "model": "stand-in", "cache": True, "reuse_calls": True}
        first_run = RunServices()
        task = build_lm_set({name: role for name in ("task", "judge", "attributor", "rewriter")}, first_run).task
        ask(task), ask(task)
        calls = first_run.ledger.call_tally().role("task")
        assert (calls.made, calls.cached, calls.reused) == (1, 0, 1)
        second_run = RunServices()  # a later run on the warm cache: the first ask is charged, the repeat is not
        task = build_lm_set({name: role for name in ("task", "judge", "attributor", "rewriter")}, second_run).task
        ask(task), ask(task)
        calls = second_run.ledger.call_tally().role("task")
        assert (calls.made, calls.cached, calls.reused) == (0, 1, 1)
    finally:
        dspy.cache = previous
