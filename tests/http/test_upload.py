"""`memtrace upload`: a run saved on disk (MLflow was unreachable) logged later to a real `mlflow server`
equals the run as logged live; uploading twice gives one run; a broken-off live run is completed, not
duplicated; a dead server fails at once with the cause named and nothing logged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from memtrace_loop.experiments.run import run
from memtrace_loop.experiments.upload import UploadError, upload
from memtrace_loop.pipeline.core.command_line import program_path
from memtrace_loop.pipeline.tracking.mlflow_tracker import MlflowTracker
from memtrace_loop.pipeline.tracking.run_record import (
    LOGGED_COMPLETE,
    LOGGED_TAG,
    RECORD_TAG,
    UPLOADED_FROM_TAG,
    RunRecord,
    upload_saved_run,
    write_run_record,
)
from memtrace_loop.pipeline.tracking.store_access import ENV_MAX_RETRIES, ENV_TIMEOUT
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from tests.support.mlflow_server import free_port, mlflow_server
from tests.support.store import fresh_store

# every test starts with a fresh, migrated MLflow store at tmp_path/mlflow.db (a copy of a template: tests/conftest.py)
pytestmark = pytest.mark.usefixtures("mlflow_db")


def composed(config: str, *overrides: str):
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        return compose(config, overrides=list(overrides))


@pytest.fixture
def knobs(monkeypatch):
    """MLflow's HTTP knobs, restored after the test (the apps set them in the process environment)."""
    for name in (ENV_MAX_RETRIES, ENV_TIMEOUT, "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"):
        monkeypatch.delenv(name, raising=False)


def top_level_artifacts(client: MlflowClient, run_id: str) -> set[str]:
    return {f.path for f in client.list_artifacts(run_id)}


@pytest.mark.slow
def test_a_saved_run_uploaded_to_a_server_equals_the_live_run_and_twice_is_once(tmp_path, monkeypatch, knobs):
    monkeypatch.chdir(tmp_path)
    local_uri = fresh_store(tmp_path / "local.db")
    outcome = run(composed("run", f"tracking.uri={local_uri}", "tracking.experiment=upload-e2e",
                           "dataset.n_conversations=1", f"cache_dir={tmp_path}/cache", "run_name=saved-run"))
    out_dir = outcome["run_dir"]
    live_client = MlflowClient(tracking_uri=local_uri)
    live = live_client.get_run(outcome["run_id"])

    with mlflow_server(tmp_path / "server") as url:
        first = upload(composed("upload", f"tracking.uri={url}", f"run_dir={out_dir}"))
        again = upload(composed("upload", f"tracking.uri={url}", f"run_dir={out_dir}/artifacts"))
        client = MlflowClient(tracking_uri=url)
        uploaded = client.get_run(first.run_id)
        experiment = client.get_experiment_by_name("upload-e2e")
        runs = client.search_runs([experiment.experiment_id])
        uploaded_artifacts = top_level_artifacts(client, first.run_id)
        table_file = client.download_artifacts(first.run_id, "results_table.json", str(tmp_path))
        table = json.loads(Path(table_file).read_text())

    assert first.created and not again.logged and again.run_id == first.run_id
    assert [r.info.run_id for r in runs] == [first.run_id]
    assert uploaded.info.run_name == "saved-run" and uploaded.info.status == "FINISHED"
    assert uploaded.data.params == live.data.params and len(live.data.params) > 20
    assert uploaded.data.metrics == live.data.metrics
    assert uploaded.data.metrics["eval/judge_accuracy"] == pytest.approx(outcome["judge_accuracy"])
    assert uploaded.data.tags[UPLOADED_FROM_TAG] == str(out_dir)
    memtrace_tags = {k: v for k, v in live.data.tags.items() if k.startswith("memtrace.") or k == "git_commit"}
    assert memtrace_tags.items() <= uploaded.data.tags.items()
    assert live.data.tags[LOGGED_TAG] == LOGGED_COMPLETE and RECORD_TAG in live.data.tags
    assert uploaded_artifacts == top_level_artifacts(live_client, outcome["run_id"])
    assert {"cases.json", "graphs", "results.json", "prompts.json", "report.json", "config.json",
            "results_table.json"} <= uploaded_artifacts
    assert len(table["data"]) == len(json.loads((Path(out_dir) / "artifacts" / "results.json").read_text()))


def test_a_live_run_that_broke_off_is_completed_by_the_upload(tmp_path):
    record = RunRecord("broken", "run-x", {"memtrace.command": "run"}, {"seed": "3"}, {"judge_accuracy": 0.25})
    (tmp_path / "out" / "artifacts").mkdir(parents=True)
    (tmp_path / "out" / "artifacts" / "report.json").write_text("{}")
    write_run_record(tmp_path / "out", record)
    tracker = MlflowTracker(f"sqlite:///{tmp_path}/mlflow.db")
    tracker.open_experiment("broken")
    with tracker.start_run("run-x") as live_id:  # the live logging broke off after the first tags
        tracker.set_tags({RECORD_TAG: record.record_id, "memtrace.command": "run"})

    done = upload_saved_run(tracker, tmp_path / "out")
    assert done.continued and not done.created and done.run_id == live_id
    completed = tracker.get_run(live_id)
    assert completed.tags[LOGGED_TAG] == LOGGED_COMPLETE and completed.params == {"seed": "3"}
    assert completed.metrics == {"judge_accuracy": 0.25} and "report.json" in completed.artifacts
    assert not upload_saved_run(tracker, tmp_path / "out").logged
    assert tracker.search_run_ids("broken") == [live_id]


def test_upload_to_a_dead_server_fails_at_once_naming_the_cause(tmp_path, knobs):
    write_run_record(tmp_path / "out", RunRecord("dead", "run-x", metrics={"judge_accuracy": 0.5}))
    dead = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(UploadError, match=r"MLflow unreachable at http://127\.0\.0\.1:\d+ \(.*refused.*\): "
                                          r"nothing uploaded from .*out"):
        upload(composed("upload", f"tracking.uri={dead}", f"run_dir={tmp_path}/out", "tracking.max_retries=0",
                        "tracking.timeout_s=2"))
    assert os.environ[ENV_MAX_RETRIES] == "0" and os.environ[ENV_TIMEOUT] == "2"  # MLflow's own retries bounded
    # past the probe (a server that dies meanwhile), MLflow's client gives up at once with those knobs
    with pytest.raises(MlflowException, match=r"127\.0\.0\.1"):
        upload_saved_run(MlflowTracker(dead), tmp_path / "out")


@pytest.mark.slow
def test_a_run_whose_mlflow_is_down_keeps_its_results_and_says_how_to_upload_them(tmp_path):
    dead = f"http://127.0.0.1:{free_port()}"
    env = {**os.environ, "COLUMNS": "400", "MEMTRACE_CACHE_DIR": str(tmp_path / "cache")}
    memtrace = Path(sys.executable).parent / "memtrace"
    done = subprocess.run(
        [str(memtrace), "run", "dataset.n_conversations=1", f"tracking.uri={dead}", "tracking.max_retries=0",
         "run_name=offline"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False,
    )
    assert done.returncode == 1, done.stderr[-3000:]
    (out_dir,) = (tmp_path / "outputs" / "run").iterdir()
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("memtrace run: MLflow unreachable (") and "127.0.0.1" in line
    program = program_path("memtrace", path=env["PATH"], executable=sys.executable, cwd=tmp_path)  # as run there
    assert line.endswith(f"results saved in {out_dir}; upload them with: {program} upload run_dir={out_dir}")
    assert "judge acc" in done.stdout  # the summary is still shown

    store = fresh_store(tmp_path / "later.db")
    done = upload(composed("upload", f"tracking.uri={store}", f"run_dir={out_dir}"))
    logged = MlflowClient(tracking_uri=store).get_run(done.run_id)
    record = json.loads((out_dir / "run_record.json").read_text())
    assert logged.info.run_name == "offline" and logged.data.metrics == record["metrics"]
    assert logged.data.params == record["params"] and logged.data.params["tracking.uri"] == dead
