"""The local llama.cpp server's lifecycle (issue 12), with the real `xllamacpp` and SmolLM2 GGUF: roles
with the same model, context and threads share ONE server on a loopback port, spoken to as an `openai`
endpoint (the preflight check answers through the guarded engine); another context size is another
server; leaving `local_models` stops every server (the port refuses connections), also when the work
raised, and restores DSPy's adapter. No LM work beyond the preflight's one-token check."""

from __future__ import annotations

import dspy
import pytest
from memtrace_loop.experiments.factory import local_models
from memtrace_loop.pipeline.backends.lm import LMConfig
from memtrace_loop.pipeline.backends.local_server import LocalServers
from memtrace_loop.pipeline.backends.preflight import check_endpoints
from memtrace_loop.pipeline.backends.registry import build_lm_set
from memtrace_loop.pipeline.backends.services import RunServices
from memtrace_loop.pipeline.backends.structured_output import StructuredOutputAdapter, asks_for_json_schema
from memtrace_loop.pipeline.core.config import ConfigError

from tests.support.local_model import missing_local_model, port_open

pytestmark = pytest.mark.skipif(missing_local_model() is not None, reason=str(missing_local_model()))

LOCAL = {"backend": "local", "model": "auto", "context_size": 512, "threads": 1, "max_tokens": 8,
         "structured_output": "json_schema"}


@pytest.mark.slow  # seconds each (measured): out of `make test-fast`
def test_roles_share_one_server_and_it_stops_on_the_way_out():
    with pytest.raises(ConfigError, match="local servers"):
        build_lm_set({role: LOCAL for role in ("task", "judge", "attributor", "rewriter")})  # no servers=
    with LocalServers() as servers:
        lms = build_lm_set({"task": LOCAL, "judge": LOCAL, "attributor": LOCAL,
                            "rewriter": {**LOCAL, "context_size": 256}}, services=RunServices(servers=servers))
        running = servers.servers
        assert len(running) == 2  # task/judge/attributor share one; the rewriter's context differs
        assert all(port_open(server.port) for server in running)
        checked = check_endpoints(lms)  # the same client path as any endpoint: one ping per server
        assert sorted(len(c.roles) for c in checked) == [1, 3]
        assert all(c.endpoint.startswith("http://127.0.0.1:") for c in checked)
        assert all(asks_for_json_schema(lm) for lm in lms.by_role().values())
    assert not any(server.running or port_open(server.port) for server in running)


def test_local_models_stops_the_server_when_the_work_fails_and_restores_the_adapter():
    before = dspy.settings.adapter
    with pytest.raises(RuntimeError, match="boom"), local_models() as servers:
        assert isinstance(dspy.settings.adapter, StructuredOutputAdapter)
        servers.serve(LMConfig.model_validate(LOCAL), "task")
        port = servers.servers[0].port
        assert port_open(port)
        raise RuntimeError("boom")
    assert not port_open(port)
    assert dspy.settings.adapter is before
