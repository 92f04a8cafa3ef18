"""`memtrace optimize` against a real local OpenAI-protocol server: the LM calls counted and logged to
MLflow equal the chat requests the server answered, and a warm-cache rerun makes none (0 made, every
call cached, nothing negative anywhere)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from memtrace_loop.experiments.optimize import optimize
from mlflow.tracking import MlflowClient

from tests.support.openai_server import OpenAIStubServer

# every test starts with a fresh, migrated MLflow store at tmp_path/mlflow.db (a copy of a template: tests/conftest.py)
pytestmark = pytest.mark.usefixtures("mlflow_db")

ROLES = ("task", "judge", "attributor", "rewriter")


def cfg(server: OpenAIStubServer, tmp_path: Path, *extra: str):
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        return compose(
            "optimize",
            overrides=[
                "lm=openai", f"lm.task.api_base={server.base_url}", "lm.task.api_key_env=MEMTRACE_TEST_KEY",
                "lm.task.model=stub-model", "lm.task.num_retries=3", "lm.task.timeout_s=20",
                "dataset.n_conversations=4", "dataset.sessions_per_conversation=3", "workers=4",
                "loop.max_iterations=1", f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
                f"cache_dir={tmp_path}/cache", "register_prompts=false", *extra,
            ],
        )


def lm_requests(server: OpenAIStubServer) -> tuple[list, list]:
    """(the chat requests of the work, the preflight's "ping" checks)."""
    requests = server.requests_to("/chat/completions")
    pings = [r for r in requests if r.json["messages"][-1]["content"] == "ping"]
    return [r for r in requests if r not in pings], pings


def run_app(server: OpenAIStubServer, tmp_path: Path, name: str, *extra: str) -> dict:
    before = Path.cwd()
    os.chdir(tmp_path)
    try:
        return optimize(cfg(server, tmp_path, f"hydra.run.dir={tmp_path}/{name}", *extra))
    finally:
        os.chdir(before)


@pytest.mark.slow
def test_counted_and_logged_calls_equal_the_requests_the_server_received(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MEMTRACE_TEST_KEY", "sk-test-calls")
    with OpenAIStubServer() as server:
        server.inject(status=429, times=1, retry_after=0, endpoint="/chat/completions")  # the preflight's
        cold = run_app(server, tmp_path, "cold")
        chats, pings = lm_requests(server)
        answered = sum(r.status == 200 for r in chats)
        assert [r.status for r in pings] == [429, 200] and answered > 50  # a retried check counts nowhere

        tally = cold["calls"].tally()
        # the loop's calls, then the diagnosis's one analysis call after it (attributor role)
        assert tally.made() == answered == cold["result"].lm_calls_made + 1
        assert tally.made(["rewriter"]) > 0 and tally.made(["judge"]) > 0
        client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
        metrics = client.get_run(cold["run_id"]).data.metrics
        assert metrics["lm_calls/made"] == answered - 1
        assert sum(metrics[f"lm_calls/{role}/made"] for role in ROLES) == answered - 1
        assert metrics["lm_calls/cached"] == tally.cached()
        assert metrics["lm_tokens/prompt"] > 0 and metrics["lm_calls/saved"] == cold["result"].lm_calls_saved
        spent = client.get_metric_history(cold["run_id"], "lm_calls/budget_spent")
        assert [m.step for m in spent] == [0, 1] and spent[0].value <= spent[1].value
        assert client.get_run(cold["run_id"]).data.tags["memtrace.stop_reason"] in ("patience", "max_iterations")

        server.reset()
        capsys.readouterr()
        warm = run_app(server, tmp_path, "warm")  # the same run again: DSPy's cache serves every call
        chats, pings = lm_requests(server)
        assert chats == [] and len(pings) == 1  # the preflight check never comes from the cache
        warm_tally = warm["calls"].tally()
        assert warm_tally.made() == 0 and warm_tally.cached() == tally.made() + tally.cached()
        assert warm["result"].budget_spent == cold["result"].budget_spent  # the budget ignores the cache state
        warm_metrics = client.get_run(warm["run_id"]).data.metrics
        assert warm_metrics["lm_calls/made"] == 0 and warm_metrics["lm_calls/cached"] == warm_tally.cached() - 1
        assert all(value >= 0 for name, value in warm_metrics.items() if name.startswith("lm_"))
        printed = capsys.readouterr().out
        assert "LM calls by role" in printed and "-" not in "".join(
            line for line in printed.splitlines() if line.startswith("│ all")
        )
