"""`memtrace run` against a real local HTTP server speaking the OpenAI chat and embeddings protocol
(backed by the stand-in LM), through the real client path: one injected 429 and one malformed
response are survived, and the API key never reaches the MLflow store."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from memtrace_loop.experiments.run import run
from mlflow.tracking import MlflowClient

from tests.support.openai_server import OpenAIStubServer
from tests.support.store import fresh_store

SECRET = "sk-memtrace-test-7f3a9c1e55d24b6a"


@pytest.fixture
def server():
    with OpenAIStubServer() as stub:
        yield stub


def files_containing(root: Path, needle: bytes) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


@pytest.mark.slow
def test_run_against_an_openai_compatible_endpoint(server, tmp_path, monkeypatch, caplog, capsys):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("MEMTRACE_TEST_KEY", SECRET)
    store_dir = tmp_path / "store"
    uri = fresh_store(store_dir / "mlflow.db")  # a migrated store (a copy of the tests' template)
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        cfg = compose(
            "run",
            overrides=[
                "lm=openai", f"lm.task.api_base={server.base_url}", "lm.task.api_key_env=MEMTRACE_TEST_KEY",
                "lm.task.model=stub-model", "lm.task.num_retries=3", "lm.task.timeout_s=20",
                "embedder=openai", f"embedder.api_base={server.base_url}", "embedder.api_key_env=MEMTRACE_TEST_KEY",
                "dataset.n_conversations=1", "dataset.sessions_per_conversation=3", "workers=4",
                f"tracking.uri={uri}", f"cache_dir={tmp_path}/cache",
            ],
        )
    # The preflight check (one "ping" per endpoint before any work) takes the first chat requests: the
    # 429 and, retried, the first garbage (any 200 proves the endpoint works). Then garbage twice more:
    # the first real call's chat adapter and its JSON fallback.
    server.inject(status=429, times=1, retry_after=0, endpoint="/chat/completions")
    server.inject_malformed(times=3)
    outcome = run(cfg)

    requests = server.requests_to("/chat/completions")
    pings = [r for r in requests if r.json["messages"][-1]["content"] == "ping"]
    chats = [r for r in requests if r not in pings]
    assert [r.status for r in pings] == [429, 200]
    assert sum(r.status == 200 for r in chats) > 20
    assert all(r.header("Authorization") == f"Bearer {SECRET}" for r in server.requests)
    assert server.requests_to("/embeddings"), "the openai embedder was used"

    client = MlflowClient(tracking_uri=uri)
    metrics = client.get_run(outcome["run_id"]).data.metrics
    assert metrics["eval/traced/failed_operations"] >= 1  # the malformed response became a failed operation
    assert metrics["eval/n"] > 0
    # the traced calls, plus the diagnosis's one analysis call (attributor role; lineage itself calls no LM)
    assert metrics["lm_calls/attributor/made"] == 1
    made = metrics["eval/traced/lm_calls"] - metrics["eval/traced/lm_cached_calls"]
    assert made + 1 == sum(r.status == 200 for r in chats)
    params = client.get_run(outcome["run_id"]).data.params
    assert params["lm.task.api_key_env"] == "MEMTRACE_TEST_KEY"

    printed = capsys.readouterr()
    assert SECRET not in caplog.text and SECRET not in printed.out + printed.err, "the key reached a log"
    assert caplog.records, "logging was captured"
    leaked = files_containing(store_dir, SECRET.encode())
    assert leaked == [], f"API key found in {leaked}"
    assert files_containing(store_dir, b"MEMTRACE_TEST_KEY"), "the store was searched (it names the variable)"
