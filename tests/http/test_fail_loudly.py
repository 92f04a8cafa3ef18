"""The console script as a user runs it against an endpoint that misbehaves, behind the fault-injecting
proxy: Ctrl-C stops the requests at once and the run is KILLED; a wrong key, a server that asks to wait
an hour and a dead endpoint each end the command quickly, non-zero, with the endpoint and the cause
named, no FINISHED MLflow run and no export. A dead local endpoint ends it at the check's first attempt,
with no retry warning and the fix named (start the server, or check `lm.task.api_base`)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.support.fault_proxy import FaultProxy
from tests.support.openai_server import OpenAIStubServer

KEY = "sk-memtrace-FAILLOUDLY-0123456789abcdef"
# every test starts with a fresh, migrated MLflow store at tmp_path/mlflow.db (a copy of a template: tests/conftest.py)
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("mlflow_db")]


@pytest.fixture
def proxy():
    with OpenAIStubServer() as stub, FaultProxy(stub.base_url) as front:
        front.stub = stub
        yield front


def memtrace(tmp_path: Path, command: str, api_base: str, *overrides: str) -> list[str]:
    return [
        sys.executable, "-m", "memtrace_loop.experiments.cli", command,
        "lm=openai", f"lm.task.api_base={api_base}", "lm.task.api_key_env=MEMTRACE_FAIL_KEY",
        "lm.task.model=stub-model", "lm.task.timeout_s=5", "lm.task.deadline_s=20",
        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", f"cache_dir={tmp_path}/cache", *overrides,
    ]


def env() -> dict[str, str]:
    return {**os.environ, "MEMTRACE_FAIL_KEY": KEY, "COLUMNS": "200", "PYTHONUNBUFFERED": "1"}


def statuses(tmp_path: Path) -> list[str]:
    db = tmp_path / "mlflow.db"
    if not db.exists():
        return []
    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    experiments = client.search_experiments()
    return [r.info.status for r in client.search_runs([e.experiment_id for e in experiments])]


def test_ctrl_c_stops_every_request_and_kills_the_run(proxy, tmp_path):
    proxy.stub.latency_s = 0.3  # a slow endpoint
    process = subprocess.Popen(
        memtrace(tmp_path, "run", proxy.base_url, "workers=4", "dataset.n_conversations=2"),
        cwd=tmp_path, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 240
        while proxy.count() < 12 and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.1)
        assert process.poll() is None, "the run ended before it could be interrupted"
        process.send_signal(signal.SIGINT)
        signalled = time.monotonic()
        _out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    late = proxy.received_after(signalled + 1.0)  # 1 s for a request already on the wire
    assert late == [], f"{len(late)} requests reached the server after the signal"
    assert process.returncode == 130, err[-2000:]
    assert err.strip().splitlines()[-1].startswith("memtrace run: interrupted by SIGINT")
    assert "Traceback" not in err
    assert statuses(tmp_path) == ["KILLED"]


def test_a_wrong_key_stops_before_any_work_with_the_endpoint_named(proxy, tmp_path):
    proxy.always(401, body_text=f"Incorrect API key provided: {KEY}. You can find your API key at ...")
    done = subprocess.run(memtrace(tmp_path, "optimize", proxy.base_url), cwd=tmp_path, env=env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    line = done.stderr.strip().splitlines()[-1]
    assert "401" in line and proxy.base_url in line and "lm.task" in line
    assert KEY not in done.stderr + done.stdout
    assert "FINISHED" not in statuses(tmp_path)
    assert not list(tmp_path.glob("outputs/**/best_prompts.json"))
    assert proxy.count() <= 3  # one check per distinct endpoint, not a run's worth of calls


def test_a_server_asking_to_wait_an_hour_ends_the_run_with_the_wait_named(proxy, tmp_path):
    proxy.always(429, retry_after="3600")
    done = subprocess.run(memtrace(tmp_path, "run", proxy.base_url), cwd=tmp_path, env=env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    line = done.stderr.strip().splitlines()[-1]
    assert "3600" in line and proxy.base_url in line
    assert "FINISHED" not in statuses(tmp_path)


def test_a_dead_endpoint_ends_the_run_with_the_endpoint_named(tmp_path):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    done = subprocess.run(memtrace(tmp_path, "run", dead), cwd=tmp_path, env=env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith(f"memtrace run: lm.task endpoint {dead}: connection refused at the first attempt")
    assert "start the server there, or check lm.task.api_base" in line  # the fix, for the actual role
    assert "retrying in" not in done.stderr and "attempt 1/" not in done.stderr  # no back-off, no warning
    assert "Traceback" not in done.stderr
    assert "FINISHED" not in statuses(tmp_path)
