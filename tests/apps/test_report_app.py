"""`memtrace report`: a real `memtrace run` (sim world, temp MLflow store) gets its report.html from the
MLflow run (logged back to it, its status untouched) or from the saved directory; attributions the run
saved are used instead of attributing again; the CLI lists the command."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from memtrace_loop.experiments.cli import USAGE
from memtrace_loop.experiments.report import report
from memtrace_loop.experiments.run import run
from memtrace_loop.pipeline.analysis.attribution.records import ErrorType
from memtrace_loop.pipeline.tracking.run_logging import attribution_rows, read_saved_run
from mlflow.tracking import MlflowClient

from tests.support.store import fresh_store

# every test starts with a fresh, migrated MLflow store at tmp_path/mlflow.db (a copy of a template: tests/conftest.py)
pytestmark = pytest.mark.usefixtures("mlflow_db")

SMALL = ["dataset.n_conversations=2", "workers=2"]


def composed(config: str, tmp_path: Path, *overrides: str):
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        return compose(config, overrides=[f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
                                          f"cache_dir={tmp_path}/cache", *overrides])


def payload(page: str) -> dict:
    match = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.S)
    assert match is not None
    return json.loads(match.group(1))


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("report")
    fresh_store(tmp_path / "mlflow.db")  # migrated already (a copy of the tests' template)
    outcome = run(composed("run", tmp_path, *SMALL))
    return tmp_path, outcome["run_id"], Path(outcome["run_dir"])


@pytest.mark.slow
def test_report_of_a_logged_run_is_written_and_logged_back(source, monkeypatch):
    tmp_path, run_id, _ = source
    monkeypatch.chdir(tmp_path)
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    status = client.get_run(run_id).info.status
    outcome = report(composed("report", tmp_path, f"run_id={run_id}"))
    page = Path(outcome["path"]).read_text(encoding="utf-8")
    failures = payload(page)["failures"]
    assert outcome["failures"] == len(failures) > 0
    assert any(f["attr"] for f in failures) and outcome["logged"]
    assert "report.html" in {a.path for a in client.list_artifacts(run_id)}
    assert client.get_run(run_id).info.status == status  # the source run was not reopened


def test_report_of_a_saved_run_uses_its_saved_attributions(source, monkeypatch):
    tmp_path, _, run_dir = source
    monkeypatch.chdir(tmp_path)
    fresh = report(composed("report", tmp_path, f"run_dir={run_dir}", "log=false"))
    assert fresh["attributions"] and not fresh["logged"]
    saved = read_saved_run(run_dir)
    rows = attribution_rows(fresh["attributions"][:1])
    rows[0]["reason"] = "saved by the run"
    rows[0]["error_type"] = ErrorType.RESPONSE.value
    (run_dir / "artifacts" / "attributions.json").write_text(json.dumps(rows), encoding="utf-8")
    try:
        again = report(composed("report", tmp_path, f"run_dir={run_dir}", "log=false", "max_nodes=12",
                                "title=mine"))
    finally:
        (run_dir / "artifacts" / "attributions.json").unlink()
    assert [a.reason for a in again["attributions"]] == ["saved by the run"]
    assert again["attributions"][0].case in saved.results
    page = Path(again["path"]).read_text(encoding="utf-8")
    assert "<title>mine</title>" in page
    drawn = [f["graph"] for f in payload(page)["failures"]]
    assert all(g is not None and len(g["nodes"]) <= 12 for g in drawn)


def test_cli_lists_report():
    assert "  report " in USAGE and "memtrace report run_id=" in USAGE


def test_report_needs_a_source(tmp_path):
    from memtrace_loop.experiments.config import validated_report
    from memtrace_loop.experiments.factory import to_plain

    with pytest.raises(Exception, match="run_id"):
        validated_report(to_plain(composed("report", tmp_path)))
