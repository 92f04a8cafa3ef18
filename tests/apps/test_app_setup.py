"""What an app's entry point sets up before its work, as a user sees it in the console: no progress bar
of `datasets` (a data file read) or of MLflow (artifacts downloaded) after `setup_logging` (the first
call of every app's `main`), no DSPy history of LM calls kept, and "DSPy response cache at ..." said
only when some LM uses the cache.
(A sweep job's labelled log lines: tests/apps/test_compare_app.py, on a real parallel multirun.)"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import datasets
import dspy
import pytest
from dspy.utils.dummies import DummyLM
from hydra import compose, initialize_config_module
from memtrace_loop.experiments.app_setup import ENV_MLFLOW_PROGRESS, no_lm_history
from memtrace_loop.experiments.config import validated_run
from memtrace_loop.experiments.console import setup_logging
from memtrace_loop.experiments.factory import to_plain
from memtrace_loop.experiments.session import open_session
from memtrace_loop.pipeline.data.reader import read_file_rows
from memtrace_loop.pipeline.tracking.mlflow_tracker import MlflowTracker

pytestmark = pytest.mark.usefixtures("mlflow_db")

BARS = ("Generating train split", "Downloading artifacts", "it/s]")


@pytest.fixture
def entry_point_setup(monkeypatch):
    """`setup_logging()` as an app's main calls it; the test process's logging and bars put back after."""
    monkeypatch.setenv(ENV_MLFLOW_PROGRESS, "unset-by-the-test")
    monkeypatch.delenv(ENV_MLFLOW_PROGRESS)  # restored (absent) at teardown
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        setup_logging()
        yield
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in handlers:
            root.addHandler(handler)
        root.setLevel(level)
        datasets.enable_progress_bars()


def _read_and_download(tmp_path: Path, mlflow_uri: str) -> None:
    data = tmp_path / "records.jsonl"  # a new file: `datasets` generates its split (and would draw a bar)
    data.write_text("\n".join(json.dumps({"a": i, "b": "text"}) for i in range(500)), encoding="utf-8")
    assert len(read_file_rows(data, ["a", "b"])) == 500
    folder = tmp_path / "artifacts"
    folder.mkdir()
    for i in range(12):
        (folder / f"file-{i}.txt").write_text("x" * 100, encoding="utf-8")
    tracker = MlflowTracker(mlflow_uri)
    tracker.open_experiment("bars")
    with tracker.start_run("bars") as run_id:
        tracker.log_artifacts(folder, "folder")
    downloaded = tracker.download_artifact(run_id, "folder", tmp_path / "down")
    assert len(list(downloaded.iterdir())) == 12


def test_without_the_entry_point_setup_the_libraries_draw_bars(tmp_path, mlflow_uri, capfd, monkeypatch):
    monkeypatch.delenv(ENV_MLFLOW_PROGRESS, raising=False)
    datasets.enable_progress_bars()
    _read_and_download(tmp_path, mlflow_uri)
    err = capfd.readouterr().err
    assert all(bar in err for bar in BARS[:2]), err[-2000:]  # what the test below must not see


def test_after_the_entry_point_setup_neither_datasets_nor_mlflow_draws_a_bar(
    tmp_path, mlflow_uri, capfd, entry_point_setup
):
    _read_and_download(tmp_path, mlflow_uri)
    captured = capfd.readouterr()
    assert not [bar for bar in BARS if bar in captured.err + captured.out], captured.err[-2000:]


def test_after_the_entry_point_setup_dspy_keeps_no_history_of_lm_calls(entry_point_setup):
    """Every LM call would be kept, whole prompt and reply, by the LM and by each calling module: on a long
    run gigabytes that nothing reads (`app_setup.no_lm_history`)."""
    lm = DummyLM([{"answer": "Ohio"}] * 2)
    predict = dspy.Predict("question -> answer")
    predict.set_lm(lm)
    dspy.configure(disable_history=False)  # a fresh process's default (the test session keeps none)
    try:
        predict(question="Where did Alice grow up?")
        assert len(lm.history) == len(predict.history) == 1  # what the setup must stop
        setup_logging()  # as every app's main calls it first
        predict(question="Where did Alice grow up?")
        assert len(lm.history) == len(predict.history) == 1
    finally:
        no_lm_history()  # as the test session keeps it


def run_config(tmp_path: Path, *overrides: str):
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        cfg = compose("run", overrides=[f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", f"cache_dir={tmp_path}/cache",
                                        *overrides])
    return to_plain(cfg)


@pytest.mark.parametrize(("overrides", "said"), [((), True), (("lm.task.cache=false",), False)],
                         ids=["cache on", "every role's cache off"])
def test_the_response_cache_is_announced_only_when_an_lm_uses_it(tmp_path, monkeypatch, caplog, overrides, said):
    monkeypatch.chdir(tmp_path)  # the session's run folder goes below the working directory
    session = open_session("run", run_config(tmp_path, *overrides), validated_run)
    assert all(lm.cache is said for lm in session.config.lm.by_role().values())  # the roles copy the task LM
    with caplog.at_level(logging.INFO, logger="memtrace_loop.pipeline.backends.lm"):
        session.configure_cache()
    assert ("DSPy response cache at" in caplog.text) is said
    assert (tmp_path / "cache").is_dir()  # installed either way
