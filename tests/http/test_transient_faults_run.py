"""Acceptance: `memtrace run` and `optimize` behind the fault-injecting proxy give the verdicts of a
fault-free run.

With 20% of the chat requests failing transiently (429, 500/502/503, timeouts) and 5% answered with a
malformed 200 body (not JSON, truncated, empty), every logical call eventually succeeds through the
project's retry loop, so every question gets the prediction and verdict of a clean run; every injected
fault costs exactly one retry, counted per role in the run's MLflow metrics (`lm_retries/*`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_module
from memtrace_loop.experiments.optimize import optimize
from memtrace_loop.experiments.run import run
from memtrace_loop.pipeline.core.stop import TooManyFailures
from mlflow.tracking import MlflowClient

from tests.support.fault_proxy import FaultKind, FaultPlan, FaultProxy
from tests.support.openai_server import OpenAIStubServer
from tests.support.store import fresh_store

pytestmark = pytest.mark.slow

KEY_ENV = "MEMTRACE_TEST_FAULTS_KEY"
TRANSIENT = (FaultKind.RATE_LIMIT, FaultKind.SERVER_ERROR, FaultKind.TIMEOUT)
MALFORMED = (FaultKind.NON_JSON, FaultKind.TRUNCATED, FaultKind.EMPTY_BODY)
PLAN = FaultPlan(
    seed=10, rate_limit=0.07, server_error=0.07, timeout=0.06, non_json=0.02, truncated=0.015, empty_body=0.015,
    retry_after="0", stall_s=4.0, only_paths=("/chat/completions",),
)
# the optimization (four times the run's requests) meets every kind but few timeouts: each costs timeout_s
OPTIMIZE_PLAN = dataclasses.replace(PLAN, timeout=0.02)


def app_through(
    app: Callable[[Any], dict[str, Any]], config: str, api_base: str, work: Path, *overrides: str
) -> tuple[dict[str, Any], dict[str, float]]:
    """One `memtrace <config>` against `api_base`, run in `work` with its own store and cache: its
    outcome and its MLflow metrics."""
    fresh_store(work / "mlflow.db")  # a migrated store (a copy of the tests' template)
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        cfg = compose(config, overrides=[
            "lm=openai", f"lm.task.api_base={api_base}", f"lm.task.api_key_env={KEY_ENV}", "lm.task.model=stub-model",
            f"tracking.uri=sqlite:///{work}/mlflow.db", f"cache_dir={work}/cache", *overrides,  # no shared cache
        ])
    before = Path.cwd()
    os.chdir(work)
    try:
        outcome = app(cfg)
    finally:
        os.chdir(before)
    metrics = MlflowClient(tracking_uri=f"sqlite:///{work}/mlflow.db").get_run(str(outcome["run_id"])).data.metrics
    return outcome, metrics


# backoff 1, 2, 4 s capped: a quick test
QUICK_RETRIES = ("lm.task.timeout_s=2", "lm.task.num_retries=10", "lm.task.retry_after_cap_s=0.2")


def run_through(api_base: str, tmp_path: Path, name: str) -> tuple[dict[str, tuple[str, str]], dict[str, float]]:
    """One `memtrace run` against `api_base`: {question id: (prediction, verdict)} and its metrics."""
    outcome, metrics = app_through(run, "run", api_base, tmp_path / name, *QUICK_RETRIES,
                                   "dataset.n_conversations=2", "dataset.sessions_per_conversation=3", "workers=4")
    rows = json.loads((Path(str(outcome["run_dir"])) / "artifacts" / "results.json").read_text())
    return {row["question_id"]: (row["prediction"], row["verdict"]) for row in rows}, metrics


def test_transient_faults_and_malformed_bodies_leave_every_verdict_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-test-faults")
    with OpenAIStubServer() as stub:
        clean, clean_metrics = run_through(stub.base_url, tmp_path, "clean")
        with FaultProxy(stub.base_url, PLAN) as proxy:
            faulty, metrics = run_through(proxy.base_url, tmp_path, "faulty")
            injected = {kind: proxy.count(kind) for kind in (*TRANSIENT, *MALFORMED)}

    assert len(clean) > 10
    assert faulty == clean  # same prediction and verdict for every question
    assert metrics["eval/traced/failed_operations"] == clean_metrics["eval/traced/failed_operations"] == 0
    assert all(injected[kind] > 0 for kind in TRANSIENT) and sum(injected[kind] for kind in MALFORMED) > 0
    # every injected fault cost exactly one retry of the role that met it, and the clean run none
    assert metrics["lm_retries/total"] == sum(injected.values()) > 0
    assert clean_metrics["lm_retries/total"] == 0

    def retries(cause: str) -> float:
        return sum(value for name, value in metrics.items() if name.startswith("lm_retries/") and name.endswith(cause))

    assert retries("/rate_limited") == injected[FaultKind.RATE_LIMIT]
    assert retries("/server_error") == injected[FaultKind.SERVER_ERROR]
    assert retries("/timeout") == injected[FaultKind.TIMEOUT]
    assert retries("/malformed") == sum(injected[kind] for kind in MALFORMED)


def optimize_through(api_base: str, tmp_path: Path, name: str) -> tuple[dict[str, Any], dict[str, float]]:
    """One `memtrace optimize` (one iteration) against `api_base`: its result and its metrics."""
    work = tmp_path / name
    return app_through(optimize, "optimize", api_base, work, *QUICK_RETRIES, "dataset.n_conversations=4",
                       "dataset.sessions_per_conversation=3", "workers=4", "loop.max_iterations=1",
                       "register_prompts=false", f"hydra.run.dir={work}/out")


def verdicts(evaluation: Any) -> dict[str, tuple[str, str]]:
    return {r.question.id: (r.prediction, r.verdict) for r in evaluation.results}


def test_optimize_behind_transient_faults_ends_where_a_clean_optimize_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-test-faults")
    with OpenAIStubServer() as stub:
        clean, clean_metrics = optimize_through(stub.base_url, tmp_path, "clean")
        with FaultProxy(stub.base_url, OPTIMIZE_PLAN) as proxy:
            faulty, metrics = optimize_through(proxy.base_url, tmp_path, "faulty")
            injected = {kind: proxy.count(kind) for kind in (*TRANSIENT, *MALFORMED)}

    for split in ("test_start", "dev_final", "test_final"):
        assert verdicts(getattr(faulty["result"], split)) == verdicts(getattr(clean["result"], split)), split
    assert faulty["result"].final_prompts == clean["result"].final_prompts
    assert all(count > 0 for count in injected.values()), injected
    assert metrics["lm_retries/total"] == sum(injected.values()) and clean_metrics["lm_retries/total"] == 0


def test_a_run_whose_calls_mostly_fail_stops_with_too_many_failures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-test-faults")
    seed = next(s for s in range(100) if FaultPlan(seed=s, server_error=0.7).fault_at(0).kind is FaultKind.FORWARDED)
    plan = FaultPlan(seed=seed, server_error=0.7, only_paths=("/chat/completions",))  # the preflight passes
    work = tmp_path / "failing"
    with OpenAIStubServer() as stub, FaultProxy(stub.base_url, plan) as proxy:
        with pytest.raises(TooManyFailures, match=r"LM calls failed .*more than the allowed 50%") as caught:
            app_through(run, "run", proxy.base_url, work, "lm.task.num_retries=0", "dataset.n_conversations=2",
                        "workers=2", "max_failed_share=0.5")
        sent = len(proxy.requests)
    assert caught.value.total >= 20 and caught.value.failed > caught.value.total / 2
    assert sent < 20 + 2 * 4  # stopped soon after the bound was passed (calls in flight on 2 workers)
    client = MlflowClient(tracking_uri=f"sqlite:///{work}/mlflow.db")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert [r.info.status for r in runs] == ["FAILED"]
