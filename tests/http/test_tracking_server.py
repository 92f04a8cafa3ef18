"""A run logged to a real `mlflow server` (tracking URI over HTTP) lands the same as to a SQLite file,
and secrets are scrubbed from everything that leaves through pipeline.tracking."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from memtrace_loop.experiments.run import run
from memtrace_loop.pipeline.tracking.run_logging import flatten, scrub
from mlflow.tracking import MlflowClient


def test_scrub_replaces_every_secret_and_ignores_tiny_ones():
    assert scrub("key=sk-abcdef and again sk-abcdef", ["sk-abcdef"]) == "key=*** and again ***"
    assert scrub("abc", ["ab"]) == "abc"  # too short to be a key; replacing would mangle text
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": None}) == {"a.b": "1", "a.c": "[1, 2]", "d": "None"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def mlflow_server(tmp_path):
    port = free_port()
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "MLFLOW_DISABLE_TELEMETRY": "true"}
    mlflow_bin = Path(sys.executable).parent / "mlflow"
    process = subprocess.Popen(
        [str(mlflow_bin), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{tmp_path}/server.db", "--artifacts-destination", str(tmp_path / "art")],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.status == 200:
                    break
        except OSError:
            time.sleep(0.5)
    else:
        process.kill()
        pytest.fail("mlflow server did not become ready in 90 s")
    yield url
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()


@pytest.mark.slow
def test_run_logs_to_a_tracking_server(mlflow_server, tmp_path):
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        cfg = compose(
            "run",
            overrides=[f"tracking.uri={mlflow_server}", "tracking.experiment=server-e2e", "dataset.n_conversations=1",
                       f"cache_dir={tmp_path}/cache"],
        )
    outcome = run(cfg)
    client = MlflowClient(tracking_uri=mlflow_server)
    logged = client.get_run(outcome["run_id"])
    assert logged.data.metrics["judge_accuracy"] == pytest.approx(outcome["judge_accuracy"])
    paths = {f.path for f in client.list_artifacts(outcome["run_id"])}
    assert {"results.json", "prompts.json", "graphs"} <= paths
