"""`memtrace run memory_system=mem0ai` against a real local OpenAI-protocol server: mem0's two LLM
calls go out with the JSON schema of their reply shape (`{"facts": [...]}`, `{"memory": [...]}`) when the
LM asks for JSON-schema output (`structured_output: json_schema`, `lm=local`'s default) and with mem0's
own `{"type": "json_object"}` otherwise, through the real client path (lm15, HTTP). The server answers
as the simulated world (its mem0 rows), so the run stores memories either way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_module
from memtrace_loop.experiments.run import run
from memtrace_loop.memory_systems.mem0ai.schemas import SCHEMA_BY_STAGE
from memtrace_loop.memory_systems.mem0ai.system import Mem0aiMemory
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.backends.lm import LMConfig
from memtrace_loop.pipeline.backends.registry import build_lm
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.graph_io import load_graph
from memtrace_loop.pipeline.core.records import Conversation, Turn
from memtrace_loop.pipeline.core.tracing import Tracer
from memtrace_loop.pipeline.sim.stand_in import foreign_rows, respond, world_handlers
from memtrace_loop.pipeline.sim.system_stages import system_stages
from memtrace_loop.pipeline.tracking.run_logging import GRAPHS_DIR

from tests.support.openai_server import OpenAIStubServer
from tests.support.paths import FIXTURES
from tests.support.store import fresh_store


def world_with_mem0_rows() -> Any:
    """The simulated world as the server's responder, with the rows answering mem0's own requests."""
    extra = system_stages()
    handlers, foreign = world_handlers(extra), foreign_rows(extra)

    def responder(messages: list[dict[str, str]]) -> str:
        return "pong" if messages[-1]["content"] == "ping" else respond(messages, handlers, foreign)

    return responder


def mem0_stage(body: dict) -> str | None:
    """Which mem0 call a request is (by mem0 1.0.x's message structure), None for our own stages."""
    messages = body["messages"]
    if messages[0]["role"] == "system" and messages[-1]["content"].startswith("Input:\n"):
        return "fact_extraction"
    if len(messages) == 1 and "The new retrieved facts are mentioned in the triple backticks" in messages[0]["content"]:
        return "update_memory"
    return None


def run_mem0ai(server: OpenAIStubServer, tmp_path: Path) -> list[ExecutionGraph]:
    """`memtrace run memory_system=mem0ai lm=openai` (JSON-schema output) at `server`; its graphs."""
    fresh_store(tmp_path / "mlflow.db")
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        cfg = compose("run", overrides=[
            "memory_system=mem0ai", "lm=openai", f"lm.task.api_base={server.base_url}", "lm.task.api_key_env=null",
            "lm.task.model=stub-model", "lm.task.structured_output=json_schema",
            "dataset=locomo", f"dataset.path={FIXTURES / 'locomo_tiny.json'}", "workers=1",
            f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", f"cache_dir={tmp_path}/cache", "tracking.traces=false",
        ])
    run(cfg)
    return [load_graph(path) for path in sorted(tmp_path.rglob(f"{GRAPHS_DIR}/*.json"))]


def chats(server: OpenAIStubServer) -> dict[str, list[dict]]:
    """The chat requests the server got (not the preflight's ping), by mem0 stage or "ours"."""
    by_stage: dict[str, list[dict]] = {}
    for request in server.requests_to("/chat/completions"):
        if request.json["messages"][-1]["content"] != "ping":
            by_stage.setdefault(mem0_stage(request.json) or "ours", []).append(request.json)
    return by_stage


@pytest.mark.slow
def test_a_run_sends_mem0s_calls_with_the_json_schema_of_their_reply(tmp_path):
    with OpenAIStubServer(responder=world_with_mem0_rows()) as server:
        graphs = run_mem0ai(server, tmp_path)
        by_stage = chats(server)
    assert set(by_stage) == {"fact_extraction", "update_memory", "ours"}
    assert len(by_stage["fact_extraction"]) == 7  # one add per turn of the fixture
    for stage, name, key in (("fact_extraction", "mem0_facts", "facts"),
                             ("update_memory", "mem0_memory_actions", "memory")):
        for body in by_stage[stage]:
            sent = body["response_format"]
            assert sent["type"] == "json_schema" and sent["json_schema"]["name"] == name
            assert sent["json_schema"]["schema"]["required"] == [key]
    assert all(body["response_format"]["type"] == "json_schema" for body in by_stage["ours"])  # DSPy's JSONAdapter
    ops = [op for graph in graphs for op in graph.operations()]
    assert any(op.name == "memory_add" and not op.failed for op in ops)  # the replies parsed and reached the store
    assert not any(op.failed for op in ops if op.stage in SCHEMA_BY_STAGE)


def test_without_the_knob_mem0s_own_json_object_goes_out():
    conversation = Conversation("c1", ("Ada", "Bruno"), (
        Turn("D1:1", "Ada", "I started pottery classes this week.", 1, "2022-03-03T09:05"),
        Turn("D1:2", "Ada", "I sold three bowls at the market.", 1, "2022-03-03T09:05"),
    ))
    with OpenAIStubServer(responder=world_with_mem0_rows()) as server:
        system = Mem0aiMemory(HashingEmbedder())
        system.set_lm(build_lm(LMConfig(backend="openai", model="stub-model", api_base=server.base_url, cache=False,
                                        structured_output="off")))
        graph = ExecutionGraph("c1")
        system.ingest(conversation, Tracer(graph))
        by_stage = chats(server)
    assert set(by_stage) == {"fact_extraction", "update_memory"}
    assert all(body["response_format"] == {"type": "json_object"} for bodies in by_stage.values() for body in bodies)
    assert any(op.name == "memory_add" and not op.failed for op in graph.operations())
