"""mem0's two LLM calls on the wire of a real local OpenAI-protocol server, through our openai backend
(lm15, HTTP): with `structured_output: json_schema` (what `lm=local` uses) each call carries the JSON
schema of its reply shape (`{"facts": [...]}`, `{"memory": [...]}`, memory_systems/mem0ai/schemas.py),
otherwise mem0's own `{"type": "json_object"}`; either way the replies (the simulated world's, from its
mem0 rows) parse and reach mem0's store. A whole `memtrace run memory_system=mem0ai` over HTTP is
tests/e2e/test_mem0ai_openai.py; one with the real local model, tests/e2e/test_local_mem0ai.py."""

from __future__ import annotations

from typing import Any

import pytest
from memtrace_loop.memory_systems.mem0ai.schemas import SCHEMA_BY_STAGE
from memtrace_loop.memory_systems.mem0ai.system import Mem0aiMemory
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.backends.lm import LMConfig
from memtrace_loop.pipeline.backends.registry import build_lm
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.records import Conversation, Turn
from memtrace_loop.pipeline.core.tracing import Tracer
from memtrace_loop.pipeline.sim.stand_in import foreign_rows, respond, world_handlers
from memtrace_loop.pipeline.sim.system_stages import system_stages

from tests.support.openai_server import OpenAIStubServer

CONVERSATION = Conversation("c1", ("Ada", "Bruno"), (
    Turn("D1:1", "Ada", "I started pottery classes this week.", 1, "2022-03-03T09:05"),
    Turn("D1:2", "Ada", "I sold three bowls at the market.", 1, "2022-03-03T09:05"),
))
SENT = {  # stage -> what its requests carry, per setting
    "off": {"fact_extraction": ("json_object", None), "update_memory": ("json_object", None)},
    "json_schema": {"fact_extraction": ("json_schema", "facts"), "update_memory": ("json_schema", "memory")},
}


def world_with_mem0_rows() -> Any:
    """The simulated world as the server's responder, with the rows answering mem0's own requests."""
    extra = system_stages()
    handlers, foreign = world_handlers(extra), foreign_rows(extra)
    return lambda messages: respond(messages, handlers, foreign)


def mem0_stage(body: dict) -> str:
    """Which mem0 call a request is, by mem0 1.0.x's message structure."""
    messages = body["messages"]
    if messages[0]["role"] == "system" and messages[-1]["content"].startswith("Input:\n"):
        return "fact_extraction"
    assert len(messages) == 1 and "The new retrieved facts are mentioned" in messages[0]["content"]
    return "update_memory"


def sent(body: dict) -> tuple[str, str | None]:
    """The response_format's type and, for a schema, the key it requires."""
    format_ = body["response_format"]
    schema = format_.get("json_schema", {}).get("schema")
    return format_["type"], schema["required"][0] if schema else None


@pytest.mark.parametrize("structured_output", ["off", "json_schema"])
def test_mem0s_calls_carry_their_reply_schema_or_mem0s_json_object(structured_output):
    with OpenAIStubServer(responder=world_with_mem0_rows()) as server:
        system = Mem0aiMemory(HashingEmbedder())
        system.set_lm(build_lm(LMConfig(backend="openai", model="stub-model", api_base=server.base_url, cache=False,
                                        structured_output=structured_output)))
        graph = ExecutionGraph("c1")
        system.ingest(CONVERSATION, Tracer(graph))
        bodies = [request.json for request in server.requests_to("/chat/completions")]
    stages = [mem0_stage(body) for body in bodies]
    assert stages.count("fact_extraction") == 2 and "update_memory" in stages
    assert all(sent(body) == SENT[structured_output][stage] for body, stage in zip(bodies, stages, strict=True))
    ops = [op for op in graph.operations() if op.stage in SCHEMA_BY_STAGE]
    assert ops and not any(op.failed for op in ops)  # the replies parsed
    assert any(op.name == "memory_add" and not op.failed for op in graph.operations())  # and reached the store
