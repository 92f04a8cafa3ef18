"""The LLM attributor through DSPy's real OpenAI client path, against the local OpenAI-compatible stub.

The stub answers with the simulated world (`pipeline.sim.stand_in.respond`), so the verdicts that come
back over HTTP must be those the in-process sim LM gives: the same blamed operation. Nothing but
127.0.0.1 is reachable (`forbid_network`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from memtrace_loop.memory_systems.registry import build_memory_system
from memtrace_loop.pipeline.analysis.attribution.llm import LLMAttributor
from memtrace_loop.pipeline.analysis.attribution.settings import LLMSettings
from memtrace_loop.pipeline.analysis.judge import make_judge
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.backends.lm import LMConfig
from memtrace_loop.pipeline.backends.registry import build_lm
from memtrace_loop.pipeline.loop.runner import run_dataset
from memtrace_loop.pipeline.sim import stand_in

from tests.support import forbid_network, isolate_llm_env
from tests.support.openai_server import OpenAIStubServer, running_server
from tests.support.sim import sim_dataset, sim_lm

KEY_ENV = "MEMTRACE_TEST_LM_KEY"


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate_llm_env(monkeypatch, tmp_path)
    forbid_network(monkeypatch)
    monkeypatch.setenv(KEY_ENV, "sk-memtrace-test-attributor")


@pytest.fixture
def server() -> Iterator[OpenAIStubServer]:
    yield from running_server(responder=stand_in.respond)


def test_the_walk_runs_through_the_openai_client(server: OpenAIStubServer) -> None:
    dataset = sim_dataset(seed=0, n_conversations=1)
    system = build_memory_system({"name": "mem0"}, HashingEmbedder())
    lm = sim_lm()
    system.set_lm(lm)
    result = run_dataset(system, make_judge(lm), dataset, workers=1)
    case = next(c for c in result.results if not c.correct and c.question.category != 5)
    graph = result.graph_by_conversation[case.question.conversation_id]

    remote_lm = build_lm(LMConfig.from_mapping({
        "backend": "openai", "model": "stub-model", "api_base": server.base_url, "api_key_env": KEY_ENV,
        "timeout_s": 5, "num_retries": 1, "cache": False,
    }))
    settings = LLMSettings(max_steps=6)
    remote = LLMAttributor(lm=remote_lm, settings=settings).attribute(graph, case)
    local = LLMAttributor(lm=sim_lm(), settings=settings).attribute(graph, case)

    calls = server.requests_to("/chat/completions")
    assert calls and all(c.status == 200 for c in calls)
    assert "kept_information" in str(calls[0].json["messages"])
    assert remote is not None and remote.method == "llm"
    assert remote.cost.lm_calls == len(calls) and remote.cost.prompt_tokens > 0
    assert "could not be judged" not in remote.reason
    assert (remote.op, remote.error_type, remote.reason) == (local.op, local.error_type, local.reason)
