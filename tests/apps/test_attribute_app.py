"""`memtrace attribute`: a real `memtrace run` (sim world, temp MLflow store) attributed afterwards, from
the MLflow run or from the saved directory, gives the same attributions as attributing in-process;
with verification the replay verdicts are the same too; what is logged has the verification columns."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from memtrace_loop.experiments.attribute import attribute
from memtrace_loop.experiments.config import validated_run
from memtrace_loop.experiments.factory import build_components, load_chosen_dataset, load_dataset, to_plain
from memtrace_loop.experiments.run import run
from memtrace_loop.pipeline.analysis.attribution.lineage import LineageAttributor
from memtrace_loop.pipeline.analysis.attribution.protocol import TracedRun, attribute_run
from memtrace_loop.pipeline.analysis.attribution.verification import Verifier, VerifyingAttributor
from memtrace_loop.pipeline.core.case_io import cases_from_json, cases_to_json
from memtrace_loop.pipeline.core.config import ConfigError
from memtrace_loop.pipeline.core.graph_io import graph_to_json
from memtrace_loop.pipeline.loop.runner import run_dataset
from memtrace_loop.pipeline.tracking.mlflow_tracker import MlflowTracker
from memtrace_loop.pipeline.tracking.run_logging import ATTRIBUTION_COLUMNS, attribution_rows, read_saved_run, save_run
from mlflow.tracking import MlflowClient

from tests.support.store import fresh_store

# every test starts with a fresh, migrated MLflow store at tmp_path/mlflow.db (a copy of a template: tests/conftest.py)
pytestmark = pytest.mark.usefixtures("mlflow_db")

SMALL = ["dataset.n_conversations=2", "workers=2"]


def composed(config: str, tmp_path: Path, *overrides: str):
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        return compose(config, overrides=[f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
                                          f"cache_dir={tmp_path}/cache", *overrides])


def comparable(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k != "seconds"} for row in rows]  # wall-clock time differs


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A `memtrace run` logged to a temp MLflow store, and the same run made in-process."""
    tmp_path = tmp_path_factory.mktemp("attribute")
    fresh_store(tmp_path / "mlflow.db")  # migrated already (a copy of the tests' template)
    cfg = composed("run", tmp_path, *SMALL)
    outcome = run(cfg)
    config = validated_run(to_plain(cfg))
    _, system, judge = build_components(config, tmp_path)
    dataset = load_chosen_dataset(config.dataset, tmp_path)
    result = run_dataset(system, judge, dataset, workers=1, exclude_categories=config.evaluation.exclude_categories)
    traced = TracedRun(result.results, result.graph_by_conversation, {c.id: c for c in dataset.conversations},
                       config.evaluation.exclude_categories)
    return tmp_path, outcome["run_id"], result, traced, system, judge


@pytest.mark.slow
def test_attributing_a_logged_run_reproduces_in_process_attribution(source, monkeypatch):
    tmp_path, run_id, _, traced, _, _ = source
    monkeypatch.chdir(tmp_path)
    done = attribute(composed("attribute", tmp_path, f"run_id={run_id}", "run_name=re-attributed"))
    expected = attribute_run(LineageAttributor(), traced)
    assert len(expected) > 5
    assert comparable(attribution_rows(done["attributions"])) == comparable(attribution_rows(expected))
    written = json.loads(Path(done["attributions_path"]).read_text())
    assert comparable(written) == comparable(attribution_rows(expected))
    assert json.loads(Path(done["blame_path"]).read_text())[0]["count"] > 0

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    logged = client.get_run(done["run_id"])
    assert logged.data.tags["memtrace.command"] == "attribute"
    assert logged.data.tags["memtrace.source_run_id"] == run_id
    assert logged.data.metrics["attribution/count"] == len(expected)
    assert logged.data.metrics["attribution/verified_share"] == 0.0  # nothing verified by default
    files = {f.path for f in client.list_artifacts(done["run_id"])}
    assert {"attributions.json", "blame.json", "attributions_table.json"} <= files
    table = json.loads(Path(client.download_artifacts(done["run_id"], "attributions_table.json",
                                                      str(tmp_path / "dl"))).read_text())
    assert {"check", "joint", "cost_lm_calls", "replay_calls"} <= set(table["columns"])


@pytest.mark.slow
def test_verified_attribution_of_a_saved_run_matches_in_process_replay(source, monkeypatch):
    tmp_path, _, result, traced, system, judge = source
    monkeypatch.chdir(tmp_path)
    saved_dir = save_run(tmp_path / "saved", result, system.prompt_set(), (),
                         to_plain(composed("run", tmp_path, *SMALL)))
    done = attribute(composed("attribute", tmp_path, f"run_dir={saved_dir}", "attributor.verify=true", "log=false"))
    expected = attribute_run(VerifyingAttributor(LineageAttributor(), Verifier(system, judge)), traced)
    assert comparable(attribution_rows(done["attributions"])) == comparable(attribution_rows(expected))
    assert all(a.verified is not None for a in done["attributions"])
    assert any(a.verified for a in done["attributions"]) and done["run_id"] is None
    assert done["blame"].rows[0].verified > 0


def test_cases_round_trip_and_a_saved_run_reads_back(tmp_path):
    from memtrace_loop.memory_systems.registry import build_memory_system
    from memtrace_loop.pipeline.analysis.judge import make_judge
    from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder

    from tests.support.sim import sim_lm

    dataset = load_dataset({"kind": "sim", "seed": 3, "n_conversations": 1})
    lm = sim_lm()
    system = build_memory_system({"name": "mem0"}, HashingEmbedder())
    system.set_lm(lm)
    result = run_dataset(system, make_judge(lm), dataset)
    assert cases_from_json(cases_to_json(result.results)) == result.results
    saved = read_saved_run(save_run(tmp_path / "out" / "artifacts", result, system.prompt_set(), (), {"seed": 1}))
    assert saved.results == result.results and saved.prompts == system.prompt_set()
    assert saved.config == {"seed": 1}
    assert {k: graph_to_json(g) for k, g in saved.graph_by_conversation.items()} == {
        k: graph_to_json(g) for k, g in result.graph_by_conversation.items()
    }
    assert read_saved_run(tmp_path / "out").results == result.results  # a run's output directory works too
    with pytest.raises(FileNotFoundError, match=r"cases\.json"):
        read_saved_run(tmp_path)
    with pytest.raises(ValueError, match="not a memtrace-cases"):
        cases_from_json("[]", "x.json")


def test_a_run_without_cases_cannot_be_downloaded_for_attribution(tmp_path):
    from memtrace_loop.pipeline.tracking.run_logging import download_saved_run

    tracker = MlflowTracker(f"sqlite:///{tmp_path}/mlflow.db")
    tracker.open_experiment("old")
    with tracker.start_run("old-run") as run_id:
        tracker.log_text("[]", "results.json")
    with pytest.raises(FileNotFoundError, match=r"no cases\.json"):
        download_saved_run(tracker, run_id, tmp_path / "dl")
    assert "check" in ATTRIBUTION_COLUMNS


@pytest.mark.slow
def test_cli_attribute_as_a_user_types_it(tmp_path, monkeypatch):
    """`memtrace attribute run_dir=...` as a process on a run made in-process (the run's own console script is
    tested by test_run_app); a bad knob is a ConfigError naming it (its non-zero exit as a process is shared
    by every app, tests/apps/test_refusals_app.py)."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlflow.db", "COLUMNS": "160"}
    memtrace = Path(sys.executable).parent / "memtrace"
    monkeypatch.chdir(tmp_path)
    made = run(composed("run", tmp_path, "dataset.n_conversations=1"))
    out = Path(made["run_dir"])
    done = subprocess.run(
        [str(memtrace), "attribute", f"run_dir={out}", "attributor.verify=true",
         f"cache_dir={tmp_path}/cache", f"hydra.run.dir={tmp_path}/att"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "blame per stage" in done.stdout and "verified" in done.stdout and "replay:" in done.stdout
    rows = json.loads((tmp_path / "att" / "attributions.json").read_text())
    assert rows and all(row["check"] != "unchecked" for row in rows)
    with pytest.raises(ConfigError, match=r"attributor\.replay\.max_joint"):
        attribute(composed("attribute", tmp_path, f"run_dir={out}", "attributor.replay.max_joint=0"))
