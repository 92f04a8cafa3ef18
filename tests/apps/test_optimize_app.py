"""`memtrace optimize` as a user runs it: MLflow parent and nested runs, plots, registry, export,
loading the export back, resuming an interrupted run, and the optimizer comparison multirun."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from memtrace_loop.experiments.export import ExportError, exported_from_run
from memtrace_loop.experiments.lifecycle import stop_on_signals
from memtrace_loop.experiments.optimize import optimize
from memtrace_loop.experiments.run import run
from memtrace_loop.pipeline.core.command_line import program
from memtrace_loop.pipeline.core.prompt_files import read_prompts
from memtrace_loop.pipeline.core.stop import Interrupted, StopToken
from memtrace_loop.pipeline.loop.checkpoint import CheckpointError
from memtrace_loop.pipeline.tracking import loop_observer as loop_tracking
from memtrace_loop.pipeline.tracking.mlflow_tracker import MlflowTracker
from memtrace_loop.pipeline.tracking.prompt_registry import load_registered_set, registry_name
from memtrace_loop.pipeline.tracking.tracker import CHAMPION
from mlflow.tracking import MlflowClient

from tests.support.store import fresh_store

# every test starts with a fresh, migrated MLflow store at tmp_path/mlflow.db (a copy of a template: tests/conftest.py)
pytestmark = pytest.mark.usefixtures("mlflow_db")

SMALL = ["dataset.n_conversations=8", "loop.max_iterations=4", "workers=2"]


def optimize_cfg(tmp_path: Path, *overrides: str):
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        return compose(
            "optimize",
            overrides=[f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", f"cache_dir={tmp_path}/cache", *SMALL,
                       *overrides],
        )


@pytest.fixture(scope="module")
def optimized(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("optimize")
    fresh_store(tmp_path / "mlflow.db")  # migrated already (a copy of the tests' template)
    before = Path.cwd()
    os.chdir(tmp_path)  # the app writes its run directory below the working directory
    try:
        # question traces are off in tests (MEMTRACE_MAX_TRACES=0, conftest): two per iteration here
        outcome = optimize(optimize_cfg(tmp_path, "tracking.max_traces=2", "tracking.max_traces_per_iteration=2"))
    finally:
        os.chdir(before)
    return tmp_path, outcome


@pytest.mark.slow  # the `optimized` fixture runs a whole optimization
def test_parent_run_has_one_nested_run_per_iteration_with_the_artifacts(optimized):
    tmp_path, outcome = optimized
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    parent = client.get_run(outcome["run_id"])
    assert parent.data.tags["memtrace.optimizer"] == "attribution"
    assert parent.data.params["optimizer.name"] == "attribution"
    assert parent.data.metrics["test/final/judge_accuracy"] > parent.data.metrics["test/start/judge_accuracy"]
    history = client.get_metric_history(outcome["run_id"], "dev/judge_accuracy")
    assert [m.step for m in history] == list(range(len(history))) and len(history) >= 3
    parent_files = {f.path for f in client.list_artifacts(outcome["run_id"], "plots")}
    assert parent_files == {"plots/scores.png", "plots/blame.png"}
    assert {f.path for f in client.list_artifacts(outcome["run_id"], "export")} == {
        "export/best_prompts.json", "export/best_prompts.yaml"
    }

    children = client.search_runs(
        [parent.info.experiment_id], f"tags.mlflow.parentRunId = '{outcome['run_id']}'",
        order_by=["attributes.start_time ASC"],
    )
    assert [c.data.tags["memtrace.iteration"] for c in children] == [str(i) for i in range(len(history))]
    contexts = {t.value: i.dataset for i in parent.inputs.dataset_inputs for t in i.tags}
    assert set(contexts) == {"train", "dev", "test"}  # the splits, as MLflow dataset inputs
    assert len({d.digest for d in contexts.values()}) == 3
    first = children[1]  # iteration 1: attributed failures and an accepted candidate
    files = {f.path for f in client.list_artifacts(first.info.run_id)}
    assert {"blame.json", "attributions.json", "prompts.json", "candidates"} <= files
    diffs = [f.path for f in client.list_artifacts(first.info.run_id, "candidates") if f.path.endswith(".diff.txt")]
    assert any(d.endswith("accepted.diff.txt") for d in diffs)
    blame = json.loads(Path(client.download_artifacts(first.info.run_id, "blame.json", str(tmp_path))).read_text())
    assert blame[0]["stage"] == "extract" and blame[0]["count"] > 0
    assert first.data.metrics["train/traced/lm_calls"] > 0 and first.data.metrics["loop/accepted"] == 1


@pytest.mark.slow  # the `optimized` fixture runs a whole optimization
def test_each_iteration_traces_its_first_train_failures_into_its_nested_run(optimized):
    tmp_path, outcome = optimized
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    parent = client.get_run(outcome["run_id"])
    children = client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{outcome['run_id']}'")
    assert len(children) >= 3
    for child in children:
        traces = mlflow.search_traces(locations=[parent.info.experiment_id], run_id=child.info.run_id,
                                      include_spans=False, return_type="list")
        assert len(traces) == 2, child.data.tags["memtrace.iteration"]  # min(max_traces_per_iteration, max_traces)
        assert {t.info.state.value for t in traces} == {"ERROR"}
        assert {t.info.tags["memtrace.verdict"] for t in traces} <= {"WRONG", "FAILED"}
    assert mlflow.search_traces(locations=[parent.info.experiment_id], run_id=outcome["run_id"],
                                include_spans=False, return_type="list") == []  # the parent has none of its own


@pytest.mark.slow  # the `optimized` fixture runs a whole optimization
def test_accepted_prompt_sets_are_in_the_prompt_registry(optimized):
    tmp_path, outcome = optimized
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    stages = ("extract", "decide", "respond")
    # named for the experiment; the accepted set is the champion (the latest versions here, too)
    champion = load_registered_set("mem0", stages, CHAMPION, experiment="memtrace").prompts
    assert champion == outcome["result"].final_prompts
    assert load_registered_set("mem0", stages, experiment="memtrace").prompts == champion
    client = mlflow.MlflowClient()
    for stage in stages:  # a version only for a stage whose text or set knobs changed, made by the optimize run
        versions = list(client.search_prompt_versions(registry_name("mem0", stage, "memtrace")))
        kept = [(v.template, v.tags["memtrace.knobs"]) for v in sorted(versions, key=lambda v: v.version)]
        assert len(set(kept)) == len(kept)
    linked = client.get_run(outcome["run_id"]).data.tags.get("mlflow.linkedPrompts", "")
    assert "memtrace-memtrace-mem0-" in linked


@pytest.mark.slow  # the `optimized` fixture runs a whole optimization
def test_export_command_and_loading_back_reproduce_the_final_test_metrics(optimized):
    tmp_path, outcome = optimized
    tracker = MlflowTracker(f"sqlite:///{tmp_path}/mlflow.db")
    exported = exported_from_run(tracker, outcome["run_id"])
    assert exported.prompts == outcome["result"].final_prompts
    assert read_prompts(outcome["exported"][1]).prompts == exported.prompts  # the YAML twin
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        cfg = compose("run", overrides=[f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", "split=test", *SMALL[:1],
                                        f"prompts={outcome['exported'][0]}", f"cache_dir={tmp_path}/cache"])
    again = run(cfg)
    assert again["judge_accuracy"] == pytest.approx(outcome["test_final"], abs=1e-12)
    with pytest.raises(ExportError, match="not found"):
        exported_from_run(tracker, "0" * 32)


def test_loading_a_prompt_file_for_another_system_fails_clearly(tmp_path):
    bad = tmp_path / "rag.json"
    bad.write_text(json.dumps({
        "format_version": 1, "system": "rag", "created": "2026-01-01T00:00:00+00:00", "source_run": None,
        "metrics": {}, "prompts": {"respond": "Answer."},
    }))
    with pytest.raises(ValueError, match="for memory system 'rag'"):
        optimize(optimize_cfg(tmp_path, f"prompts={bad}"))


@pytest.mark.slow  # the `optimized` fixture runs a whole optimization
def test_an_interrupted_optimization_resumes_into_the_same_mlflow_run(optimized, tmp_path, monkeypatch):
    _, uninterrupted = optimized
    monkeypatch.chdir(tmp_path)
    original = loop_tracking.TrackingLoopObserver.on_iteration

    def interrupt_after_first(self, record):
        original(self, record)
        if record.iteration == 1:  # a real Ctrl-C once iteration 1's nested run is logged
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(loop_tracking.TrackingLoopObserver, "on_iteration", interrupt_after_first)
    stop = StopToken()
    with pytest.raises(Interrupted) as interrupted, stop_on_signals(stop):
        optimize(optimize_cfg(tmp_path), stop=stop)  # the next LM call after the signal raises
    monkeypatch.setattr(loop_tracking.TrackingLoopObserver, "on_iteration", original)
    run_dirs = sorted((tmp_path / "outputs" / "optimize").iterdir())
    assert len(run_dirs) == 1
    assert f"resume with: {program('memtrace')} optimize resume={run_dirs[0]}" in interrupted.value.__notes__[0]
    assert "SIGINT" in str(interrupted.value)
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    parent_id = json.loads((run_dirs[0] / "checkpoint.json").read_text())["mlflow_run_id"]
    assert client.get_run(parent_id).info.status == "KILLED"
    made_before = json.loads((run_dirs[0] / "checkpoint.json").read_text())["calls"]["task"]["made"]

    resumed = optimize(optimize_cfg(tmp_path, f"resume={run_dirs[0]}"))
    assert resumed["result"].final_prompts == uninterrupted["result"].final_prompts
    assert resumed["test_final"] == uninterrupted["test_final"]
    assert client.get_run(resumed["run_id"]).info.status == "FINISHED"
    children = client.search_runs(
        [client.get_run(resumed["run_id"]).info.experiment_id], f"tags.mlflow.parentRunId = '{resumed['run_id']}'"
    )
    iterations = sorted(int(c.data.tags["memtrace.iteration"]) for c in children)
    # iteration 1 was logged before the interruption and redone: its first nested run is gone (no zombie)
    assert iterations == list(range(len(resumed["result"].history)))
    # counts are cumulative across the resume: the calls made before it are included
    calls = resumed["result"].calls.role("task")
    assert calls.made > made_before > 0

    # resuming a finished run is a no-op that says so: MLflow untouched
    points = len(client.get_metric_history(resumed["run_id"], "dev/judge_accuracy"))
    again = optimize(optimize_cfg(tmp_path, f"resume={run_dirs[0]}", "loop.max_iterations=9"))
    assert again["already_finished"] and again["test_final"] == resumed["test_final"]
    assert len(client.get_metric_history(resumed["run_id"], "dev/judge_accuracy")) == points
    assert client.get_run(resumed["run_id"]).info.status == "FINISHED"


@pytest.mark.slow
def test_resume_refuses_another_config_without_touching_the_run_and_names_ignored_overrides(
    optimized, tmp_path, monkeypatch, caplog
):
    monkeypatch.chdir(tmp_path)
    original = loop_tracking.TrackingLoopObserver.on_iteration

    def interrupt_after_first(self, record):
        original(self, record)
        if record.iteration == 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(loop_tracking.TrackingLoopObserver, "on_iteration", interrupt_after_first)
    with pytest.raises(KeyboardInterrupt):
        optimize(optimize_cfg(tmp_path, "loop.max_iterations=2"))
    monkeypatch.setattr(loop_tracking.TrackingLoopObserver, "on_iteration", original)
    run_dir = next((tmp_path / "outputs" / "optimize").iterdir())
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    parent_id = json.loads((run_dir / "checkpoint.json").read_text())["mlflow_run_id"]

    saved = json.loads((run_dir / "config.json").read_text())
    edited = {**saved, "seed": saved["seed"] + 1}
    (run_dir / "config.json").write_text(json.dumps(edited))
    with pytest.raises(CheckpointError, match="another configuration"):
        optimize(optimize_cfg(tmp_path, f"resume={run_dir}"))
    assert client.get_run(parent_id).info.status == "KILLED"  # the refused resume did not flip it

    (run_dir / "config.json").write_text(json.dumps(saved))
    caplog.clear()
    with caplog.at_level("WARNING", logger="memtrace.optimize"):
        optimize(optimize_cfg(tmp_path, f"resume={run_dir}", "loop.min_gain=0.5", "workers=1"))
    ignored = [r.getMessage() for r in caplog.records if "ignoring" in r.getMessage()]
    assert ignored and "loop.min_gain" in ignored[0] and "workers," not in ignored[0]


# (`memtrace optimize -m experiment=compare_optimizers` landing in one experiment is
# tests/apps/test_compare_app.py::test_the_jobs_ran_in_parallel_processes_into_one_experiment; attribution >
# uniform > none on mem0 is tests/e2e/test_loop.py::test_uniform_blame_gains_something_but_less_at_the_same_budget)


def test_an_optimization_that_accepts_nothing_says_so(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    from rich.console import Console

    console = Console(record=True, width=200)
    outcome = optimize(
        optimize_cfg(tmp_path, "optimizer=none", "loop.max_iterations=1", "dataset.n_conversations=4"), console
    )
    assert outcome["improved"] is False
    assert "No rewrite was accepted: the exported prompt set is the starting one" in console.export_text()
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    assert client.get_run(outcome["run_id"]).data.tags["memtrace.improved"] == "false"


def test_optimize_refuses_to_start_when_mlflow_is_unreachable(tmp_path, monkeypatch):
    import socket

    from memtrace_loop.pipeline.tracking.store_access import TrackingUnavailable

    monkeypatch.chdir(tmp_path)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    with pytest.raises(TrackingUnavailable, match=f"MLflow unreachable at {dead}"):
        optimize(optimize_cfg(tmp_path, f"tracking.uri={dead}", "tracking.max_retries=0", "tracking.timeout_s=2"))
    assert not list(tmp_path.glob("outputs/**/checkpoint.json"))  # nothing was run
