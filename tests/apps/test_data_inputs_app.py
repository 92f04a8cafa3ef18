"""Every `memtrace run` and `memtrace optimize` records the data it used as MLflow dataset inputs (source,
content digest, split, conversations, questions), read back from a real MLflow store: the same data has the
same digest across runs and across a local file and the same file as a hub dataset, other data another.
The stand-in LM on a real dataset says so: a WARNING at the start and the end, the `memtrace.test_world`
tags and a banner in report.html; and `memtrace run dataset=longmemeval` works as written, out of the box."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from hydra import compose, initialize_config_module
from memtrace_loop.experiments.config import TEST_WORLD_NOTE_TAG, TEST_WORLD_TAG, Chosen, stand_in_notice
from memtrace_loop.experiments.optimize import optimize
from memtrace_loop.experiments.report import report as report_app
from memtrace_loop.experiments.run import run
from memtrace_loop.pipeline.data.locomo import load_locomo
from memtrace_loop.pipeline.data.longmemeval import load_longmemeval
from memtrace_loop.pipeline.data.splits import split_by_conversation
from memtrace_loop.pipeline.tracking.run_logging import dataset_digest
from memtrace_loop.pipeline.tracking.run_record import read_run_record
from mlflow.tracking import MlflowClient

from tests.support.paths import FIXTURES, REPO

# every test starts with a fresh, migrated MLflow store at tmp_path/mlflow.db (a copy of a template: tests/conftest.py)
pytestmark = pytest.mark.usefixtures("mlflow_db")

MINI = FIXTURES / "locomo_mini.json"
SHIPPED_LONGMEMEVAL = REPO / "data" / "longmemeval_fixture.json"



def _stand_in_on(kind: str) -> SimpleNamespace:
    """What `stand_in_notice` reads of a validated config: the stand-in answering and judging on `kind`."""
    sim = SimpleNamespace(backend="sim")
    return SimpleNamespace(lm=SimpleNamespace(task=sim, judge=sim), dataset=Chosen(kind, None))


def composed(config: str, *overrides: str):
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        return compose(config, overrides=list(overrides))


def inputs_of(uri: str, run_id: str) -> dict[str, dict]:
    """The run's dataset inputs by context: name, digest, source, profile (as MLflow returns them)."""
    found = {}
    for item in MlflowClient(tracking_uri=uri).get_run(run_id).inputs.dataset_inputs:
        context = next(t.value for t in item.tags if t.key == "mlflow.data.context")
        found[context] = {"name": item.dataset.name, "digest": item.dataset.digest, "source": item.dataset.source,
                          "source_type": item.dataset.source_type, "profile": json.loads(item.dataset.profile)}
    return found


def hub_folder(tmp_path: Path, file: Path, name: str) -> Path:
    folder = tmp_path / "hub-repo"
    folder.mkdir(exist_ok=True)
    shutil.copy(file, folder / name)
    return folder


@pytest.mark.slow  # three runs and a report
def test_run_logs_its_data_and_says_it_ran_in_the_test_world(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    common = (f"tracking.uri={uri}", "tracking.experiment=data", f"cache_dir={tmp_path}/cache", "workers=2",
              "dataset=locomo")
    changed = json.loads(MINI.read_text(encoding="utf-8"))
    changed[0]["qa"][0]["answer"] = "Another answer"
    (tmp_path / "changed.json").write_text(json.dumps(changed), encoding="utf-8")
    folder = hub_folder(tmp_path, MINI, "locomo_mini.json")

    with caplog.at_level(logging.WARNING, logger="memtrace.run"):
        file_run = run(composed("run", *common, f"dataset.path={MINI}", "run_name=file"))
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "TEST WORLD" in r.getMessage()]
    hub_run = run(composed("run", *common, f"dataset.hub={folder}", "dataset.hub_file=locomo_mini.json",
                           "run_name=hub"))
    changed_run = run(composed("run", *common, f"dataset.path={tmp_path / 'changed.json'}", "run_name=changed"))

    by_file, by_hub, by_changed = (inputs_of(uri, r["run_id"])["eval"] for r in (file_run, hub_run, changed_run))
    expected = load_locomo(MINI)
    assert by_file["digest"] == dataset_digest(expected) == by_hub["digest"]  # same data, two ways in
    assert by_changed["digest"] != by_file["digest"]  # one answer differs
    assert by_file["profile"] == {"split": "all", "conversations": 2, "questions": len(expected.questions)}
    assert by_file["source_type"] == "local" and json.loads(by_file["source"])["uri"] == str(MINI)
    # MLflow keeps one dataset per (name, digest) in an experiment: the hub run shares the file run's; what
    # the hub run logged (its run record) names the hub dataset
    hub_source = read_run_record(hub_run["run_dir"]).datasets[0].source
    assert hub_source == f"hf:{folder}/locomo_mini.json (split train)"
    assert by_file["name"] == "locomo_mini-all"
    # the run record keeps it too, so `memtrace upload` logs it with the rest
    assert read_run_record(file_run["run_dir"]).datasets[0].digest == by_file["digest"]

    # the stand-in LM on a real dataset: a WARNING at the start and at the end, two tags, the report's banner
    notice = stand_in_notice(_stand_in_on("locomo"))
    assert notice and "test world" in notice and "'locomo'" in notice
    assert warned == [notice, notice]  # at the start and at the end
    tags = MlflowClient(tracking_uri=uri).get_run(file_run["run_id"]).data.tags
    assert tags[TEST_WORLD_TAG] == "true" and tags[TEST_WORLD_NOTE_TAG] == notice
    report = (Path(file_run["run_dir"]) / "artifacts" / "report.html").read_text(encoding="utf-8")
    assert '<div class="banner" id="banner" role="alert">TEST WORLD: the stand-in LM' in report
    # `memtrace report` of the saved run (with the run's own config) shows it too
    remade = report_app(composed("report", f"tracking.uri={uri}", f"run_dir={file_run['run_dir']}"))
    assert 'id="banner"' in Path(remade["path"]).read_text(encoding="utf-8")


def test_a_sim_run_on_sim_data_is_tagged_without_a_banner(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    with caplog.at_level(logging.WARNING):
        outcome = run(composed("run", f"tracking.uri={uri}", f"cache_dir={tmp_path}/cache",
                               "dataset.n_conversations=2", "dataset.sessions_per_conversation=2"))
    tags = MlflowClient(tracking_uri=uri).get_run(outcome["run_id"]).data.tags
    assert tags[TEST_WORLD_TAG] == "true" and TEST_WORLD_NOTE_TAG not in tags
    assert not [r for r in caplog.records if "TEST WORLD" in r.getMessage()]
    assert 'id="banner"' not in (Path(outcome["run_dir"]) / "artifacts" / "report.html").read_text(encoding="utf-8")
    source = json.loads(inputs_of(uri, outcome["run_id"])["eval"]["source"])["tags"]["source"]
    assert source.startswith("sim ") and "n_conversations=2" in source


@pytest.mark.slow
def test_optimize_logs_its_splits_and_says_it_ran_in_the_test_world(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    common = (f"tracking.uri={uri}", f"cache_dir={tmp_path}/cache", "workers=2", "optimizer=none",
              "loop.max_iterations=1", "dataset=longmemeval")
    with caplog.at_level(logging.WARNING, logger="memtrace.optimize"):
        first = optimize(composed("optimize", *common, f"dataset.path={SHIPPED_LONGMEMEVAL}", "run_name=file"))
    warned = [r.getMessage() for r in caplog.records if "TEST WORLD" in r.getMessage()]
    folder = hub_folder(tmp_path, SHIPPED_LONGMEMEVAL, "longmemeval_s_cleaned.json")
    second = optimize(composed("optimize", *common, f"dataset.hub={folder}", "run_name=hub"))

    by_file, by_hub = inputs_of(uri, first["run_id"]), inputs_of(uri, second["run_id"])
    assert set(by_file) == {"train", "dev", "test"}
    data = load_longmemeval(SHIPPED_LONGMEMEVAL)
    cfg = composed("optimize", *common)
    split = split_by_conversation(data, tuple(cfg.splits.fractions), int(cfg.splits.seed))
    for context in ("train", "dev", "test"):
        part = split.select(context)
        assert by_file[context]["digest"] == dataset_digest(part) == by_hub[context]["digest"]
        assert by_file[context]["profile"] == {"split": context, "conversations": len(part.conversations),
                                               "questions": len(part.questions)}
        assert json.loads(by_file[context]["source"])["uri"] == str(SHIPPED_LONGMEMEVAL)
    assert len({by_file[c]["digest"] for c in by_file}) == 3
    assert sum(by_file[c]["profile"]["conversations"] for c in by_file) == 18

    notice = stand_in_notice(_stand_in_on("longmemeval"))
    assert warned == [notice, notice]  # at the start and at the end
    tags = MlflowClient(tracking_uri=uri).get_run(first["run_id"]).data.tags
    assert tags[TEST_WORLD_TAG] == "true" and tags[TEST_WORLD_NOTE_TAG] == notice
    report = (Path(first["run_dir"]) / "report.html").read_text(encoding="utf-8")
    assert 'id="banner"' in report and "TEST WORLD" in report


@pytest.mark.slow
def test_memtrace_run_dataset_longmemeval_works_as_written(tmp_path):
    """The README's command, in the checkout, with nothing else: the shipped fixture is the default."""
    memtrace = Path(sys.executable).parent / "memtrace"
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlflow.db",
           "MEMTRACE_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "200"}
    env.pop("MEMTRACE_LONGMEMEVAL", None)
    done = subprocess.run(
        [str(memtrace), "run", "dataset=longmemeval", f"hydra.run.dir={tmp_path}/out"],  # the dir: test hygiene
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "longmemeval_fixture" in output and "18 questions" in output
    flat = " ".join(output.split())
    assert flat.count("TEST WORLD: the stand-in LM") == 2 and "WARNING" in output
    report = (tmp_path / "out" / "artifacts" / "report.html").read_text(encoding="utf-8")
    assert 'id="banner"' in report
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    (found,) = client.search_runs([client.get_experiment_by_name("memtrace").experiment_id])
    assert found.data.tags[TEST_WORLD_TAG] == "true"
    (eval_input,) = found.inputs.dataset_inputs
    assert eval_input.dataset.digest == dataset_digest(load_longmemeval(SHIPPED_LONGMEMEVAL))
