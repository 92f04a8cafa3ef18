"""`memtrace run memory_system=mem0ai` against a real local HTTP server speaking the OpenAI chat and
embeddings protocol (the stand-in LM behind it): mem0's own two requests travel through our openai
backend (counted, with the run's key, JSON reply format asked for), its embeddings through our openai
embedder, and the key never reaches the store; an LM asking for JSON-schema output gets mem0's shapes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_module
from memtrace_loop.experiments.run import run
from memtrace_loop.memory_systems.mem0ai.memory import PLACEHOLDER_KEY
from memtrace_loop.memory_systems.mem0ai.system import Mem0aiMemory
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.backends.lm import OpenAILMConfig
from memtrace_loop.pipeline.backends.registry import build_lm
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.tracing import Tracer
from memtrace_loop.pipeline.sim.engine import SimEngine
from mlflow.tracking import MlflowClient

from tests.stages.test_mem0ai import CONVERSATION
from tests.support.openai_server import OpenAIStubServer
from tests.support.store import fresh_store

SECRET = "sk-memtrace-mem0ai-test-5b1d0e"

pytestmark = pytest.mark.slow  # a whole run over HTTP (~10 s)


def world() -> Callable[[list[dict[str, Any]]], str]:
    """The simulated world as the `sim` engine answers (with the rows systems add, mem0's among them);
    the preflight's plain "ping" gets a plain answer."""
    engine = SimEngine()
    return lambda messages: "pong" if messages[-1]["content"] == "ping" else engine.reply(messages)


def test_mem0s_requests_go_through_our_openai_backend(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MEMTRACE_TEST_KEY", SECRET)
    store_dir = tmp_path / "store"
    uri = fresh_store(store_dir / "mlflow.db")
    with OpenAIStubServer(responder=world()) as server:
        with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
            cfg = compose("run", overrides=[
                "memory_system=mem0ai", "lm=openai", f"lm.task.api_base={server.base_url}",
                "lm.task.api_key_env=MEMTRACE_TEST_KEY", "lm.task.model=stub-model", "embedder=openai",
                f"embedder.api_base={server.base_url}", "embedder.api_key_env=MEMTRACE_TEST_KEY",
                "dataset.n_conversations=1", "dataset.sessions_per_conversation=1", "workers=2",
                f"tracking.uri={uri}", f"cache_dir={tmp_path}/cache",
            ])
        outcome = run(cfg)
        chats = [r for r in server.requests_to("/chat/completions") if r.status == 200]
        embeddings = server.requests_to("/embeddings")
    extraction = [r for r in chats if r.json["messages"][0]["role"] == "system"
                  and r.json["messages"][-1]["content"].startswith("Input:\nuser: ")]
    update = [r for r in chats if len(r.json["messages"]) == 1
              and "The new retrieved facts are mentioned in the triple backticks" in r.json["messages"][0]["content"]]
    assert extraction and update, "mem0's own requests reached the endpoint"
    assert all(r.json.get("response_format") == {"type": "json_object"} for r in extraction + update)
    assert "Today's date is 20" in extraction[0].json["messages"][0]["content"]  # the session date filled in
    assert all(r.header("Authorization") == f"Bearer {SECRET}" for r in chats + embeddings)
    assert embeddings, "mem0's embeddings came from our openai embedder"

    metrics = MlflowClient(tracking_uri=uri).get_run(outcome["run_id"]).data.metrics
    made = metrics["eval/traced/lm_calls"] - metrics["eval/traced/lm_cached_calls"]
    assert made + metrics["lm_calls/attributor/made"] == len(chats) - 1  # all traced, less the preflight ping
    for needle in (SECRET.encode(), PLACEHOLDER_KEY.encode()):
        assert not [p for p in store_dir.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_json_schema_output_carries_mem0s_two_reply_shapes() -> None:
    """An LM asking for JSON-schema output (`structured_output: json_schema`, as `lm=local` uses) gets
    the schema of mem0's reply for each of its two requests, and mem0 reads the replies."""
    with OpenAIStubServer(responder=world()) as server:
        lm = build_lm(OpenAILMConfig(backend="openai", model="stub-model", api_base=server.base_url,
                                     structured_output="json_schema", cache=False))
        system = Mem0aiMemory(HashingEmbedder())
        system.set_lm(lm)
        graph = ExecutionGraph("c1")
        system.ingest(CONVERSATION, Tracer(graph))
        formats = [r.json.get("response_format") for r in server.requests_to("/chat/completions")]
    schemas = {f["json_schema"]["name"]: f["json_schema"]["schema"] for f in formats if f["type"] == "json_schema"}
    assert schemas["mem0_facts"]["required"] == ["facts"] and schemas["mem0_memory_actions"]["required"] == ["memory"]
    assert len(formats) == sum(op.prompt is not None for op in graph.operations())
    assert not [op for op in graph.operations() if op.failed and op.stage == "fact_extraction"]
