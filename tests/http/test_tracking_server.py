"""A run logged to a real `mlflow server` (tracking URI over HTTP) lands the same as to a SQLite file,
and secrets are scrubbed from everything that leaves through pipeline.tracking."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_module
from memtrace_loop.experiments.run import run
from memtrace_loop.pipeline.tracking.run_logging import flatten, scrub
from mlflow.tracking import MlflowClient

from tests.support.mlflow_server import mlflow_server as running_mlflow_server


def test_scrub_replaces_every_secret_and_ignores_tiny_ones():
    assert scrub("key=sk-abcdef and again sk-abcdef", ["sk-abcdef"]) == "key=*** and again ***"
    assert scrub("abc", ["ab"]) == "abc"  # too short to be a key; replacing would mangle text
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": None}) == {"a.b": "1", "a.c": "[1, 2]", "d": "None"}


@pytest.fixture
def mlflow_server(tmp_path):
    with running_mlflow_server(tmp_path) as url:
        yield url


@pytest.mark.slow
def test_run_logs_to_a_tracking_server(mlflow_server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the run saves its results below the working directory
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        cfg = compose(
            "run",
            overrides=[f"tracking.uri={mlflow_server}", "tracking.experiment=server-e2e", "dataset.n_conversations=1",
                       f"cache_dir={tmp_path}/cache"],
        )
    outcome = run(cfg)
    client = MlflowClient(tracking_uri=mlflow_server)
    logged = client.get_run(outcome["run_id"])
    assert logged.data.metrics["eval/judge_accuracy"] == pytest.approx(outcome["judge_accuracy"])
    paths = {f.path for f in client.list_artifacts(outcome["run_id"])}
    assert {"results.json", "prompts.json", "graphs"} <= paths
