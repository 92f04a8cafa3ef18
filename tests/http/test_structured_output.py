"""JSON-schema constrained output on the wire (issue 12): an LM configured with `structured_output:
json_schema` sends each stage's output fields as `response_format: {type: json_schema, json_schema:
{schema: ...}}` through the real client path (DSPy's JSONAdapter, lm15, HTTP) and parses the JSON reply;
with the knob off nothing changes (DSPy's chat format, no response_format). A whole `memtrace run` with
the knob against the test server (which answers like the stand-in) scores exactly as without it: the
simulated world reads the JSON-adapter prompt as fairly as the chat one."""

from __future__ import annotations

import dspy
import pytest
from hydra import compose, initialize_config_module
from memtrace_loop.experiments.run import run
from memtrace_loop.memory_systems.signatures import ExtractFacts
from memtrace_loop.pipeline.backends.lm import LMConfig
from memtrace_loop.pipeline.backends.registry import build_lm
from memtrace_loop.pipeline.backends.structured_output import StructuredOutputAdapter

from tests.support.openai_server import OpenAIStubServer
from tests.support.store import fresh_store

TURN = "[3 March 2022] Ada: I started pottery classes this week."


@pytest.fixture
def server():
    with OpenAIStubServer() as stub:
        yield stub


def extract(server: OpenAIStubServer, structured_output: str, dialect: str = "openai") -> tuple[dspy.Prediction, dict]:
    lm = build_lm(LMConfig(backend="openai", model="stub-model", api_base=server.base_url, cache=False,
                           structured_output=structured_output, dialect=dialect))
    predict = dspy.Predict(ExtractFacts)
    predict.set_lm(lm)
    with dspy.context(adapter=StructuredOutputAdapter()):
        prediction = predict(turn=TURN)
    return prediction, server.requests_to("/chat/completions")[-1].json


@pytest.mark.parametrize("dialect", ["openai", "vllm", "ollama"])  # the README's recipes
def test_json_schema_reaches_the_wire_and_the_reply_parses(server, dialect):
    prediction, body = extract(server, "json_schema", dialect)
    assert server.requests_to("/chat/completions")[-1].path == "/v1/chat/completions"
    format_ = body["response_format"]
    assert format_["type"] == "json_schema"
    schema = format_["json_schema"]["schema"]
    assert schema["required"] == ["facts"]
    assert schema["properties"]["facts"]["type"] == "array"
    assert "Respond with a JSON object" in body["messages"][-1]["content"]
    assert prediction.facts and all(isinstance(fact, str) for fact in prediction.facts)


def test_off_sends_what_it_always_sent(server):
    prediction, body = extract(server, "off")
    assert "response_format" not in body
    assert "[[ ## facts ## ]]" in body["messages"][-1]["content"]
    assert prediction.facts


@pytest.mark.usefixtures("lm_history")  # reads `lm.history` (off in the test session)
def test_the_simulated_world_answers_the_json_schema_path_as_the_chat_one():
    by_setting = {}
    for setting in ("off", "json_schema"):
        lm = build_lm(LMConfig(backend="sim", model="stand-in", cache=False, structured_output=setting))
        predict = dspy.Predict(ExtractFacts)
        predict.set_lm(lm)
        with dspy.context(adapter=StructuredOutputAdapter()):
            by_setting[setting] = predict(turn=TURN).facts
        assert ("Respond with a JSON object" in lm.history[-1]["messages"][-1]["content"]) == (setting != "off")
    assert by_setting["json_schema"] == by_setting["off"] != []


def run_with(server: OpenAIStubServer, tmp_path, structured_output: str) -> tuple[dict, list]:
    store = tmp_path / structured_output
    fresh_store(store / "mlflow.db")  # a migrated store (a copy of the tests' template)
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        cfg = compose("run", overrides=[
            "lm=openai", f"lm.task.api_base={server.base_url}", "lm.task.api_key_env=null",
            "lm.task.model=stub-model", f"lm.task.structured_output={structured_output}",
            "dataset.n_conversations=1", "dataset.sessions_per_conversation=2", "workers=2",
            f"tracking.uri=sqlite:///{store}/mlflow.db", f"cache_dir={store}/cache", "tracking.traces=false",
        ])
    server.reset()
    outcome = run(cfg)
    chats = [r.json for r in server.requests_to("/chat/completions") if r.json["messages"][-1]["content"] != "ping"]
    return outcome, chats


@pytest.mark.slow
def test_a_run_with_json_schema_scores_as_without_it(server, tmp_path):
    plain_outcome, plain_chats = run_with(server, tmp_path, "off")
    schema_outcome, schema_chats = run_with(server, tmp_path, "json_schema")
    assert plain_chats and not any("response_format" in body for body in plain_chats)
    assert schema_chats and all(body["response_format"]["type"] == "json_schema" for body in schema_chats)
    assert schema_outcome["judge_accuracy"] == plain_outcome["judge_accuracy"]
