"""Reaching the tracking store: retries while SQLite is locked (and only then), MLflow's HTTP knobs from
config, the availability probe, the one-line message when MLflow is unreachable, the per-process run id
in output folder names (and a test's own outside the checkout) and Hydra's job log kept by `setup_logging`."""

from __future__ import annotations

import logging
import sqlite3

import pytest
from hydra import compose, initialize_config_module
from memtrace_loop.experiments.config import TrackingConfig
from memtrace_loop.experiments.console import setup_logging
from memtrace_loop.experiments.factory import launch_dir
from memtrace_loop.experiments.output_dirs import RUN_ID_RESOLVER, app_output_dir, process_run_id
from memtrace_loop.pipeline.core.command_line import program
from memtrace_loop.pipeline.tracking.run_record import RunRecord, read_run_record, unreachable_message, write_run_record
from memtrace_loop.pipeline.tracking.store_access import (
    ENV_BACKOFF_FACTOR,
    ENV_MAX_RETRIES,
    ENV_TIMEOUT,
    configure_tracking_client,
    failure_cause,
    is_locked_error,
    retry_when_locked,
    sqlite_path,
    store_lock,
    tracking_available,
)
from omegaconf import OmegaConf
from sqlalchemy.exc import OperationalError

from tests.support import root_handlers
from tests.support.mlflow_server import free_port
from tests.support.paths import REPO


def locked_error() -> Exception:
    """What MLflow raises when SQLite waited 5 s for a lock: sqlalchemy's wrapper of sqlite3's error."""
    return OperationalError("SELECT name FROM sqlite_master", {}, sqlite3.OperationalError("database is locked"))


def test_a_locked_store_is_retried_with_a_growing_pause_then_succeeds():
    pauses: list[float] = []
    failures = [locked_error(), locked_error()]

    def write() -> str:
        if failures:
            raise failures.pop(0)
        return "written"

    assert retry_when_locked(write, attempts=4, backoff_s=0.5, sleep=pauses.append) == "written"
    assert pauses == [0.5, 1.0]


def test_a_store_locked_for_every_try_raises_the_last_error_and_other_errors_are_not_retried():
    pauses: list[float] = []
    with pytest.raises(OperationalError, match="database is locked"):
        retry_when_locked(lambda: (_ for _ in ()).throw(locked_error()), attempts=3, sleep=pauses.append)
    assert len(pauses) == 2
    calls: list[int] = []

    def broken() -> None:
        calls.append(1)
        raise ConnectionError("connection refused")

    with pytest.raises(ConnectionError):
        retry_when_locked(broken, attempts=5, sleep=pauses.append)
    assert calls == [1]
    try:
        raise RuntimeError("logging failed") from locked_error()
    except RuntimeError as wrapped:
        assert is_locked_error(wrapped)  # found through the cause chain


def test_configure_tracking_client_sets_mlflows_documented_knobs():
    from mlflow import environment_variables as mlflow_env

    environ: dict[str, str] = {ENV_MAX_RETRIES: "7"}
    configure_tracking_client(2.5, 0, environ)
    assert environ == {ENV_TIMEOUT: "3", ENV_MAX_RETRIES: "0", ENV_BACKOFF_FACTOR: "1"}
    # the names are MLflow's own (mlflow/environment_variables.py)
    assert {mlflow_env.MLFLOW_HTTP_REQUEST_TIMEOUT.name, mlflow_env.MLFLOW_HTTP_REQUEST_MAX_RETRIES.name,
            mlflow_env.MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR.name} == set(environ)
    with pytest.raises(ValueError, match="timeout_s"):
        TrackingConfig(uri="sqlite:///x.db", timeout_s=0)


def test_tracking_available_names_the_cause_of_a_dead_server_and_accepts_a_sqlite_store(tmp_path):
    cause = tracking_available(f"http://user:sk-secret-123@127.0.0.1:{free_port()}", timeout_s=2)
    assert cause is not None and "refused" in cause.lower() and "sk-secret-123" not in cause
    assert tracking_available(f"sqlite:///{tmp_path}/new/mlflow.db") is None
    connection = sqlite3.connect(tmp_path / "held.db", isolation_level=None)
    connection.execute("CREATE TABLE t (x)")
    connection.execute("BEGIN EXCLUSIVE")
    try:
        assert "locked" in str(tracking_available(f"sqlite:///{tmp_path}/held.db", timeout_s=0.2))
    finally:
        connection.execute("COMMIT")
        connection.close()


def test_the_unreachable_message_names_the_cause_the_folder_and_the_upload_command(tmp_path):
    error = ConnectionError("HTTPConnectionPool(host='u:sk-key-999@h', port=5000): Max retries exceeded\nmore")
    message = unreachable_message(tmp_path, error)
    assert message == (
        f"MLflow unreachable (ConnectionError: HTTPConnectionPool(host='u:sk-key-999@h', port=5000): Max retries "
        f"exceeded): results saved in {tmp_path}; upload them with: {program('memtrace')} upload run_dir={tmp_path}"
    )
    assert "\n" not in message
    assert failure_cause(ValueError("see http://u:sk-key-999@host/api")) == "ValueError: see http://u:***@host/api"


def test_a_run_record_reads_back_equal(tmp_path):
    record = RunRecord("exp", "run-x", {"memtrace.command": "run"}, {"seed": "1"}, {"judge_accuracy": 0.5},
                       {"results_table.json": {"verdict": ["correct", "wrong"]}})
    write_run_record(tmp_path, record)
    assert read_run_record(tmp_path) == record
    assert read_run_record(tmp_path / "artifacts") == record  # given the artifacts folder of the output dir
    (tmp_path / "run_record.json").write_text('{"experiment": "x"}')
    with pytest.raises(ValueError, match=r"run_record\.json: not a run record"):
        read_run_record(tmp_path)


def test_the_store_lock_is_a_file_beside_a_sqlite_store_only(tmp_path):
    uri = f"sqlite:///{tmp_path}/sub/mlflow.db"
    assert sqlite_path(uri) == tmp_path / "sub" / "mlflow.db"
    with store_lock(uri):
        assert (tmp_path / "sub" / "mlflow.db.lock").exists()
    with store_lock("http://127.0.0.1:5000"):
        pass
    assert sqlite_path("http://127.0.0.1:5000") is None


def test_output_folders_carry_a_per_process_id_beside_the_time():
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        cfg = compose("run", return_hydra_config=True)
        optimize = compose("optimize", return_hydra_config=True)
    run_dir = str(cfg.hydra.run.dir)
    assert OmegaConf.has_resolver(RUN_ID_RESOLVER)
    assert run_dir.startswith("outputs/run/") and run_dir.endswith(f"-{process_run_id()}")
    assert str(optimize.hydra.sweep.dir).endswith(f"-{process_run_id()}")
    assert len(process_run_id()) == 6 and int(process_run_id(), 16) >= 0


def test_an_app_called_as_a_library_in_a_test_writes_outside_the_checkout():
    """The folder an app called through Hydra's compose API writes to (`outputs/<app>/...` under the launch
    directory) is under the test's own working directory (tests/conftest.py), never the checkout's."""
    folder = app_output_dir("run", launch_dir())
    assert folder.is_dir() and folder.parent == launch_dir() / "outputs" / "run"
    assert not folder.resolve().is_relative_to(REPO)


def test_setup_logging_keeps_hydras_job_log_file_and_writes_to_it(tmp_path):
    log_file = tmp_path / "run.log"
    file_handler = logging.FileHandler(log_file)
    with root_handlers(logging.StreamHandler(), file_handler) as root:
        setup_logging()
        assert file_handler in root.handlers and len(root.handlers) == 2
        assert any(type(h).__name__ == "RichHandler" for h in root.handlers)
        logging.getLogger("memtrace.run").info("running the test")
        file_handler.flush()
        assert "[memtrace.run][INFO] - running the test" in log_file.read_text()


@pytest.mark.parametrize("override,key", [("tracking.max_retries=-1", "tracking.max_retries"),
                                          ("tracking.timeout_s=0", "tracking.timeout_s")])
def test_tracking_bounds_are_validated_with_the_key_named(override, key):
    from memtrace_loop.experiments.config import validated_run
    from memtrace_loop.experiments.factory import to_plain
    from memtrace_loop.pipeline.core.config import ConfigError

    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        cfg = compose("run", overrides=[override])
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        validated_run(to_plain(cfg))
