"""`memtrace run` attributes its failures, diagnoses them and logs both: the files in its artifacts, the
blame metrics and the attribution table in MLflow (read back with MlflowClient), the analysis on the
console; the LLM attributor's calls count under the attributor role; a run without failures gets an
empty diagnosis and no analysis call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from memtrace_loop.experiments.failure_analysis import analyse_failures
from memtrace_loop.experiments.run import run
from memtrace_loop.pipeline.analysis.attribution.lineage import LineageAttributor
from memtrace_loop.pipeline.analysis.diagnosis import diagnosis_from_dict
from memtrace_loop.pipeline.loop.runner import RunResult
from mlflow.tracking import MlflowClient
from rich.console import Console

from tests.support.sim import sim_dataset

# every test starts with a fresh, migrated MLflow store at tmp_path/mlflow.db (a copy of a template: tests/conftest.py)
pytestmark = pytest.mark.usefixtures("mlflow_db")


def composed(*overrides: str):
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        return compose("run", overrides=list(overrides))


def sim_run(tmp_path: Path, *overrides: str) -> tuple[dict[str, object], MlflowClient, str]:
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    cfg = composed(f"tracking.uri={uri}", "dataset.n_conversations=2", f"cache_dir={tmp_path}/cache", *overrides)
    console = Console(record=True, width=160)
    outcome = run(cfg, console=console)
    return outcome, MlflowClient(tracking_uri=uri), console.export_text()


def test_run_attributes_diagnoses_and_logs_its_failures(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    outcome, client, shown = sim_run(tmp_path)
    run_id = str(outcome["run_id"])
    artifacts = Path(str(outcome["run_dir"])) / "artifacts"
    attributions = json.loads((artifacts / "attributions.json").read_text())
    diagnosis = diagnosis_from_dict(json.loads((artifacts / "diagnosis.json").read_text()))
    assert attributions and all(row["method"] == "lineage" for row in attributions)
    assert diagnosis.ok and diagnosis.failures == len(attributions)
    assert sum(g.count for g in diagnosis.groups) == len(attributions)
    top = diagnosis.groups[0]
    assert f"{top.stage} stage with {top.error_type}: {top.count} of {len(attributions)}" in diagnosis.analysis
    assert diagnosis.analysis.splitlines()[0] in (artifacts / "diagnosis.md").read_text()

    logged = client.get_run(run_id)
    metrics = logged.data.metrics
    assert metrics["attribution/count"] == len(attributions)
    assert metrics[f"blame/{top.stage}/count"] >= top.count
    shares = [v for k, v in metrics.items() if k.startswith("blame/") and k.endswith("/share")]
    assert sum(shares) == pytest.approx(1.0)
    assert metrics["diagnosis/ok"] == 1.0
    assert logged.data.tags["memtrace.attributor"] == "lineage"
    names = {f.path for f in client.list_artifacts(run_id)}
    assert {"attributions.json", "blame.json", "diagnosis.json", "diagnosis.md", "attributions_table.json"} <= names
    downloaded = client.download_artifacts(run_id, "diagnosis.json", str(tmp_path / "dl"))
    assert diagnosis_from_dict(json.loads(Path(downloaded).read_text())) == diagnosis
    table_file = client.download_artifacts(run_id, "attributions_table.json", str(tmp_path / "dl"))
    table = json.loads(Path(table_file).read_text())
    assert len(table["data"]) == len(attributions)

    assert "blame per stage (lineage)" in shown and "Most failures are blamed on" in shown


def test_the_llm_attributor_counts_under_its_role(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    outcome, client, _ = sim_run(tmp_path, "attributor=llm", "attributor.max_steps=3")
    metrics = client.get_run(str(outcome["run_id"])).data.metrics
    rows = json.loads((Path(str(outcome["run_dir"])) / "artifacts" / "attributions.json").read_text())
    assert rows and all(row["method"] == "llm" for row in rows)
    walked = sum(row["cost_lm_calls"] for row in rows)
    assert walked > 0
    attributor_calls = metrics["lm_calls/attributor/made"] + metrics["lm_calls/attributor/cached"]
    assert attributor_calls == walked + 1  # the walk's steps and the one analysis call


def test_no_failures_gives_an_empty_diagnosis_without_an_lm_call():
    dataset = sim_dataset(n_conversations=1)
    result = RunResult((), {}, None, None)  # type: ignore[arg-type]  # nothing answered, nothing failed

    class NoLM:
        def __call__(self, *args: object, **kwargs: object) -> object:
            raise AssertionError("no analysis call expected")

    analysis = analyse_failures(result, dataset, LineageAttributor(), NoLM())  # type: ignore[arg-type]
    assert analysis.attributions == () and analysis.diagnosis.groups == () and analysis.diagnosis.ok
    assert analysis.metrics()["attribution/count"] == 0 and analysis.tables() == {}


def test_optimize_logs_the_diagnosis_of_the_last_attributed_train_failures(tmp_path, monkeypatch):
    from memtrace_loop.experiments.optimize import optimize

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        cfg = compose("optimize", overrides=[
            f"tracking.uri={uri}", f"cache_dir={tmp_path}/cache", "optimizer=none", "loop.max_iterations=1",
            "dataset.n_conversations=4",
        ])
    console = Console(record=True, width=200)
    outcome = optimize(cfg, console)
    (last,) = [r for r in outcome["result"].iterations if r.attributions]
    client = MlflowClient(tracking_uri=uri)
    names = {f.path for f in client.list_artifacts(outcome["run_id"])}
    assert {"diagnosis.json", "diagnosis.md"} <= names
    logged = diagnosis_from_dict(json.loads(Path(client.download_artifacts(
        outcome["run_id"], "diagnosis.json", str(tmp_path / "dl"))).read_text()))
    assert logged.ok and logged.failures == len(last.attributions)
    shown = console.export_text()
    assert f"train failures of iteration {last.iteration}" in shown and "Most failures are blamed on" in shown
