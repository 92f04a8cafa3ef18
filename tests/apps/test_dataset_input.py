"""The data a run used, logged as an MLflow dataset input (`Tracker.log_dataset`): name, content
digest, source, context and the split's size, read back through MLflow's own API."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from memtrace_loop.pipeline.core.records import Dataset
from memtrace_loop.pipeline.data.locomo import parse_locomo
from memtrace_loop.pipeline.sim.world import generate_locomo
from memtrace_loop.pipeline.tracking.mlflow_tracker import MlflowTracker
from memtrace_loop.pipeline.tracking.redacting_tracker import RedactingTracker
from memtrace_loop.pipeline.tracking.run_logging import dataset_digest, dataset_input, dataset_source
from memtrace_loop.pipeline.tracking.run_record import RunRecord, read_run_record, upload_saved_run, write_run_record
from mlflow.tracking import MlflowClient

# every test starts with a fresh, migrated MLflow store at tmp_path/mlflow.db (a copy of a template: tests/conftest.py)
pytestmark = pytest.mark.usefixtures("mlflow_db")


def generate_dataset(n_conversations: int, seed: int) -> Dataset:
    return parse_locomo(generate_locomo(seed=seed, n_conversations=n_conversations, sessions_per_conversation=2), "sim")


def test_the_digest_follows_the_content_and_the_source_names_file_or_generator(tmp_path: Path):
    data = generate_dataset(n_conversations=2, seed=0)
    assert dataset_digest(data) == dataset_digest(generate_dataset(n_conversations=2, seed=0))
    assert dataset_digest(data) != dataset_digest(generate_dataset(n_conversations=2, seed=1))
    first = data.conversations[0].id
    assert dataset_digest(data.subset((first,))) != dataset_digest(data)
    assert dataset_source({"kind": "sim", "seed": 0, "n_conversations": 2}) == "sim n_conversations=2 seed=0"
    assert dataset_source({"kind": "locomo", "path": "data/l.json"}, tmp_path) == str(tmp_path / "data/l.json")


def test_a_logged_dataset_input_reads_back_with_its_context_digest_and_profile(tmp_path: Path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    data: Dataset = generate_dataset(n_conversations=3, seed=0)
    file = tmp_path / "data.json"
    file.write_text("{}", encoding="utf-8")
    tracker = RedactingTracker(MlflowTracker(uri), ["s3cret"])
    tracker.open_experiment("datasets")
    with tracker.start_run("r") as run_id:
        tracker.log_dataset(dataset_input(data, "train", "train", "sim seed=0 key=s3cret"))
        tracker.log_dataset(dataset_input(data.subset((data.conversations[0].id,)), "test", "test", str(file)))
    inputs = MlflowClient(tracking_uri=uri).get_run(run_id).inputs.dataset_inputs
    by_context = {next(t.value for t in i.tags if t.key == "mlflow.data.context"): i.dataset for i in inputs}
    assert set(by_context) == {"train", "test"}
    train, test = by_context["train"], by_context["test"]
    assert train.name == f"{data.name}-train" and train.digest == dataset_digest(data)
    assert json.loads(train.profile) == {"split": "train", "conversations": 3, "questions": len(data.questions)}
    assert train.source_type == "code" and "s3cret" not in train.source  # secrets masked on the way out
    assert test.source_type == "local" and json.loads(test.source)["uri"] == str(file)
    assert json.loads(test.profile)["conversations"] == 1


def test_a_saved_run_record_keeps_its_dataset_inputs_and_the_upload_logs_them(tmp_path: Path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    data = generate_dataset(n_conversations=2, seed=0)
    logged = dataset_input(data, "eval", "all", "sim seed=0")
    write_run_record(tmp_path / "out", RunRecord("uploads", "run-x", metrics={"m": 1.0}, datasets=(logged,)))
    assert read_run_record(tmp_path / "out").datasets == (logged,)
    upload = upload_saved_run(MlflowTracker(uri), tmp_path / "out")
    (found,) = MlflowClient(tracking_uri=uri).get_run(upload.run_id).inputs.dataset_inputs
    assert (found.dataset.name, found.dataset.digest) == (logged.name, dataset_digest(data))


# what a tracking server answered in CI when two sweep jobs logged the same data at the same moment
RACE_REPLY = ("BAD_REQUEST: (sqlite3.IntegrityError) UNIQUE constraint failed: datasets.experiment_id, "
              "datasets.name, datasets.digest [SQL: INSERT INTO datasets ...]")


def test_a_dataset_another_process_inserted_at_the_same_moment_is_linked_not_fatal(tmp_path: Path, monkeypatch):
    import mlflow
    from mlflow.exceptions import MlflowException

    real_log_input = mlflow.log_input
    calls = []

    def losing_the_race_once(*args, **kwargs):
        calls.append(args)
        if len(calls) == 1:  # the other process's insert landed between MLflow's lookup and ours
            real_log_input(*args, **kwargs)  # ... it is in the store now
            raise MlflowException(RACE_REPLY)
        return real_log_input(*args, **kwargs)

    monkeypatch.setattr(mlflow, "log_input", losing_the_race_once)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = MlflowTracker(uri)
    tracker.open_experiment("datasets")
    data = generate_dataset(2, seed=0)
    with tracker.start_run("r") as run_id:
        tracker.log_dataset(dataset_input(data, "test", "test", "sim seed=0"))
    inputs = MlflowClient(uri).get_run(run_id).inputs.dataset_inputs
    assert len(calls) == 2 and [i.dataset.digest for i in inputs] == [dataset_digest(data)]

    def failing(*args, **kwargs):
        raise MlflowException("BAD_REQUEST: something else")

    monkeypatch.setattr(mlflow, "log_input", failing)
    with tracker.start_run("other"):  # any other refusal still surfaces
        try:
            tracker.log_dataset(dataset_input(data, "test", "test", "sim seed=0"))
        except MlflowException as exc:
            assert "something else" in str(exc)
        else:
            raise AssertionError("a refusal that is not the race must be raised")
