"""The console script against an endpoint that finally fails a few calls, behind the fault-injecting
proxy: a seeded plan answers some chat requests `429 Retry-After: 3600` (longer than the retry cap,
so each such call fails at once, with no retry), after the preflight. Fewer than `max_failed_share` of
the calls fail, so the run goes to its end: it says how many failed and what that did to the scores
(console, MLflow metrics and tags), exits 3 and its MLflow run is FAILED; `optimize` marks its export.
A clean run exits 0, FINISHED, and says nothing of failures."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.http.test_fail_loudly import env, memtrace
from tests.support.fault_proxy import FaultKind, FaultPlan, FaultProxy
from tests.support.openai_server import OpenAIStubServer

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("mlflow_db")]

# seed 7: the first 24 chat requests (the preflight among them) pass, then about 6% are rate-limited
PLAN = FaultPlan(seed=7, rate_limit=0.06, retry_after="3600", only_paths=("/chat/completions",))
SMALL = ("workers=4", "dataset.n_conversations=2", "dataset.sessions_per_conversation=2")
FAILED_LINE = re.compile(r"finished with failed LM calls: (\d+) of (\d+) LM calls finally failed")


def the_run(tmp_path: Path, experiment: str = "memtrace") -> tuple[str, dict[str, float], dict[str, str]]:
    """(status, metrics, tags) of the one top-level MLflow run of `experiment`."""
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    found = client.get_experiment_by_name(experiment)
    assert found is not None, f"no experiment {experiment!r}"
    runs = client.search_runs([found.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1, [r.info.run_name for r in runs]
    run = parents[0]
    return run.info.status, run.data.metrics, run.data.tags


def run_cli(tmp_path: Path, command: str, api_base: str, *overrides: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(memtrace(tmp_path, command, api_base, *SMALL, *overrides), cwd=tmp_path, env=env(),
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def stub():
    with OpenAIStubServer() as server:
        yield server


def test_a_run_with_a_few_failed_calls_says_so_and_exits_3(stub, tmp_path):
    with FaultProxy(stub.base_url, PLAN) as proxy:
        done = run_cli(tmp_path, "run", proxy.base_url)
        injected = proxy.count(FaultKind.RATE_LIMIT)
    assert injected > 0
    assert done.returncode == 3, done.stderr[-3000:]
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("memtrace run: finished with failed LM calls"), line
    match = FAILED_LINE.search(line)
    assert match is not None and int(match.group(1)) == injected, line
    assert "allow_failed_calls=true" in line and "Traceback" not in done.stderr
    assert "Failed LM calls:" in done.stdout and "touched by a failed operation" in done.stdout
    status, metrics, tags = the_run(tmp_path)
    assert status == "FAILED"
    assert metrics["lm_calls/failed"] == injected == metrics["lm_calls/task/failed"] + metrics.get(
        "lm_calls/judge/failed", 0.0) + metrics.get("lm_calls/attributor/failed", 0.0)
    assert 0 < metrics["eval/failures/touched"] <= metrics["eval/failures/scored"]
    assert metrics["eval/failures/judge_accuracy_low"] <= metrics["eval/judge_accuracy"]
    assert metrics["eval/judge_accuracy"] <= metrics["eval/failures/judge_accuracy_high"]
    assert tags["memtrace.outcome"] == "finished_with_failed_calls" and tags["memtrace.failed_calls"] == str(injected)
    record = json.loads(next(tmp_path.glob("outputs/run/*/run_record.json")).read_text())
    assert record["metrics"]["lm_calls/failed"] == injected


def test_failed_calls_may_be_allowed_and_a_clean_run_exits_0(stub, tmp_path):
    with FaultProxy(stub.base_url, PLAN) as proxy:
        allowed = run_cli(tmp_path, "run", proxy.base_url, "allow_failed_calls=true", "tracking.experiment=allowed")
    assert allowed.returncode == 0, allowed.stderr[-3000:]
    assert "Failed LM calls:" in allowed.stdout  # accepted, still said
    status, metrics, tags = the_run(tmp_path, "allowed")
    assert status == "FINISHED" and metrics["lm_calls/failed"] > 0
    assert tags["memtrace.outcome"] == "finished_with_failed_calls"

    clean = run_cli(tmp_path, "run", stub.base_url)
    assert clean.returncode == 0, clean.stderr[-3000:]
    assert "Failed LM calls" not in clean.stdout
    status, metrics, tags = the_run(tmp_path)
    assert status == "FINISHED" and metrics["lm_calls/failed"] == 0 and tags["memtrace.outcome"] == "clean"


def test_optimize_with_failed_calls_marks_its_export_and_exits_3(stub, tmp_path):
    with FaultProxy(stub.base_url, PLAN) as proxy:
        done = run_cli(tmp_path, "optimize", proxy.base_url, "dataset.n_conversations=3", "loop.max_iterations=1",
                       "register_prompts=false")
        injected = proxy.count(FaultKind.RATE_LIMIT)
    assert injected > 0
    assert done.returncode == 3, done.stderr[-3000:]
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("memtrace optimize: finished with failed LM calls"), line
    assert "resume with" not in line  # it finished: nothing to resume
    assert "the export is marked" in line and "Failed LM calls:" in done.stdout
    exported = json.loads(next(tmp_path.glob("outputs/optimize/*/best_prompts.json")).read_text())
    assert exported["metrics"]["failed_lm_calls"] == injected
    status, metrics, tags = the_run(tmp_path)
    assert status == "FAILED" and metrics["lm_calls/failed"] == injected
    assert tags["memtrace.outcome"] == "finished_with_failed_calls"
    assert "test/final/failures/touched" in metrics
