"""Stopping on purpose: the stop token in the runner, signals, MLflow run statuses and the apps' one-line exits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest
from memtrace_loop.experiments.lifecycle import EXIT_USAGE, one_line, run_app, stop_on_signals
from memtrace_loop.pipeline.core.config import ConfigError
from memtrace_loop.pipeline.core.stop import EndpointUnusable, Interrupted, StopToken, TooManyFailures
from memtrace_loop.pipeline.loop.runner import _map
from memtrace_loop.pipeline.tracking.mlflow_tracker import MlflowTracker

# every test starts with a fresh, migrated MLflow store at tmp_path/mlflow.db (a copy of a template: tests/conftest.py)
pytestmark = pytest.mark.usefixtures("mlflow_db")


@pytest.mark.parametrize("workers", [1, 4])
def test_no_item_starts_after_a_stop_is_requested(workers):
    stop = StopToken()
    started: list[int] = []
    lock = threading.Lock()

    def work(item: int) -> int:
        with lock:
            started.append(item)
        if item == 2:
            stop.request("test")
        return item

    with pytest.raises(Interrupted, match="test"):
        _map(work, list(range(200)), workers, stop=stop)
    assert 2 in started and len(started) < 200
    if workers == 1:
        assert started == [0, 1, 2]


def test_an_error_in_one_item_cancels_the_items_not_started():
    started: list[int] = []
    gate = threading.Event()

    def work(item: int) -> int:
        started.append(item)
        if item == 0:
            raise TooManyFailures(3, 4, 0.5)
        gate.wait(0.05)
        return item

    with pytest.raises(TooManyFailures, match="3 of 4 LM calls failed"):
        _map(work, list(range(100)), 2)
    assert len(started) < 100


def test_the_tracker_ends_a_run_finished_killed_or_failed(tmp_path):
    tracker = MlflowTracker(f"sqlite:///{tmp_path}/mlflow.db")
    tracker.open_experiment("statuses")
    with tracker.start_run("ok") as ok:
        pass
    with (
        pytest.raises(Interrupted), tracker.start_run("stopped") as stopped,
        tracker.start_run("child", nested=True) as child,
    ):
        raise Interrupted("interrupted by SIGINT")
    with pytest.raises(EndpointUnusable), tracker.start_run("broken") as broken:
        raise EndpointUnusable("task", "http://127.0.0.1:1/v1", "connection refused")
    with pytest.raises(KeyboardInterrupt), tracker.start_run("ctrl-c") as ctrl_c:
        raise KeyboardInterrupt
    status = {name: tracker.run_status(run_id) for name, run_id in
              {"ok": ok, "stopped": stopped, "child": child, "broken": broken, "ctrl-c": ctrl_c}.items()}
    assert status == {"ok": "FINISHED", "stopped": "KILLED", "child": "KILLED", "broken": "FAILED",
                      "ctrl-c": "KILLED"}


def test_superseded_iterations_of_a_parent_run_are_deleted(tmp_path):
    tracker = MlflowTracker(f"sqlite:///{tmp_path}/mlflow.db")
    tracker.open_experiment("children")
    ids = {}
    with tracker.start_run("parent") as parent:
        for iteration in (0, 1, 2):
            with tracker.start_run(f"iteration-{iteration}", nested=True) as child:
                tracker.set_tags({"memtrace.iteration": str(iteration)})
                ids[iteration] = child
    assert sorted(tracker.delete_children(parent, "memtrace.iteration", 0)) == sorted([ids[1], ids[2]])
    assert tracker.search_run_ids("children", f"tags.mlflow.parentRunId = '{parent}'") == [ids[0]]


def test_the_first_signal_requests_a_stop_and_the_second_raises():
    before = signal.getsignal(signal.SIGINT)  # default_int_handler, or SIG_IGN in a background job (nohup, `&`)
    token = StopToken()
    with stop_on_signals(token):
        os.kill(os.getpid(), signal.SIGINT)
        assert token.requested and "SIGINT" in token.reason
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGINT) is before  # restored


def test_an_app_error_is_one_line_with_the_secret_masked(capsys):
    def body(_stop: StopToken) -> None:
        raise EndpointUnusable("judge", "http://127.0.0.1:9/v1", "HTTP 401: Incorrect API key provided: sk-SECRET-1")

    with pytest.raises(SystemExit) as exited:
        run_app("run", body, lambda: ("sk-SECRET-1",))
    err = capsys.readouterr().err
    assert exited.value.code == 1
    assert err.count("\n") == 1 and "lm.judge endpoint http://127.0.0.1:9/v1" in err and "sk-SECRET-1" not in err

    with pytest.raises(SystemExit) as exited:
        run_app("run", lambda _stop: (_ for _ in ()).throw(ConfigError("top_k: must be >= 1")))
    assert exited.value.code == EXIT_USAGE and "top_k: must be >= 1" in capsys.readouterr().err


def test_notes_follow_the_message():
    error = Interrupted("interrupted by SIGTERM")
    error.add_note("resume with: memtrace optimize resume=outputs/x")
    assert one_line(error) == "interrupted by SIGTERM; resume with: memtrace optimize resume=outputs/x"


def test_an_interrupted_app_exits_130_at_once_even_with_a_call_in_flight(tmp_path):
    script = """
import threading, time, os, signal
from memtrace_loop.experiments.lifecycle import run_app
from memtrace_loop.pipeline.core.stop import StopToken

def body(stop: StopToken):
    worker = threading.Thread(target=time.sleep, args=(600,))  # an LM call that would not return soon
    worker.start()
    os.kill(os.getpid(), signal.SIGINT)
    stop.check()

run_app("run", body)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 130
    assert done.stderr.strip().splitlines()[-1] == "memtrace run: interrupted by SIGINT (Ctrl-C)"
    assert "Traceback" not in done.stderr
