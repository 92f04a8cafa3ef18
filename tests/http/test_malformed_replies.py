"""Acceptance: an HTTP 200 without a usable completion is a failed attempt, never a silent 0%.

`memtrace run` (the Hydra app, in-process; `exit_code` and `one_line` are what the console script
returns and prints) behind the fault-injecting proxy: each shape-less 200 (not JSON, truncated, empty,
a JSON list, no `choices`, a choice without `message`, `content: null`, `content: ""` cut at
`max_tokens`) at 100% ends the run non-zero with the cause in one line and no FINISHED MLflow run;
`content: ""` cut at `max_tokens` after the check stops the run naming `lm.task.max_tokens`; at 5% of
the requests (seeded) the shapes that a retry can fix give the verdicts of a clean run, each injected
one counted as one retry. DSPy's response cache never serves a reply without an answer (an older
run's), and a key the model echoes reaches no file.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dspy
import pytest
from dspy.clients.cache import Cache
from hydra import compose, initialize_config_module
from memtrace_loop.experiments.lifecycle import exit_code, one_line
from memtrace_loop.experiments.run import run
from memtrace_loop.pipeline.backends.lm import configure_cache
from memtrace_loop.pipeline.backends.preflight import check_endpoints
from memtrace_loop.pipeline.backends.registry import build_lm
from memtrace_loop.pipeline.core.stop import EndpointUnusable, MaxTokensTooSmall, RunStopped, TooManyFailures
from mlflow.tracking import MlflowClient

from tests.support import isolate_llm_env
from tests.support.answering import ANSWER, answering_responder, ask, chat_calls
from tests.support.fault_proxy import SHAPELESS_KINDS, FaultKind, FaultPlan, FaultProxy
from tests.support.openai_server import OpenAIStubServer
from tests.support.store import fresh_store

KEY_ENV = "MEMTRACE_TEST_MALFORMED_KEY"
KEY = "sk-memtrace-ECHOED-5f0c1e2d3b4a69788"
QUICK = ("lm.task.timeout_s=2", "lm.task.num_retries=2", "lm.task.retry_after_cap_s=0.01", "lm.task.max_tokens=64")
# what the one line names, per shape: the retried ones end in the check as "no usable reply"
CAUSE = {kind: "malformed" for kind in SHAPELESS_KINDS} | {
    FaultKind.CONTENT_NULL: "empty_reply", FaultKind.EMPTY_AT_LENGTH: "lm.task.max_tokens=64"
}


def app_through(
    app: Callable[[Any], dict[str, Any]], api_base: str, work: Path, *overrides: str
) -> dict[str, Any]:
    """One `memtrace run` against `api_base`, in `work` with its own store and cache."""
    fresh_store(work / "mlflow.db")
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        cfg = compose("run", overrides=[
            "lm=openai", f"lm.task.api_base={api_base}", f"lm.task.api_key_env={KEY_ENV}", "lm.task.model=stub-model",
            f"tracking.uri=sqlite:///{work}/mlflow.db", f"cache_dir={work}/cache", f"hydra.run.dir={work}/out",
            "dataset.n_conversations=2", "dataset.sessions_per_conversation=3", "workers=2", *QUICK, *overrides,
        ])
    before = Path.cwd()
    os.chdir(work)
    try:
        return app(cfg)
    finally:
        os.chdir(before)


def statuses(work: Path) -> list[str]:
    client = MlflowClient(tracking_uri=f"sqlite:///{work}/mlflow.db")
    return [r.info.status for r in client.search_runs([e.experiment_id for e in client.search_experiments()])]


@pytest.fixture
def stub() -> Any:
    with OpenAIStubServer() as server:
        yield server


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)


@pytest.mark.parametrize("kind", SHAPELESS_KINDS, ids=str)
def test_each_shapeless_200_at_100_percent_ends_the_run_with_its_cause(
    kind: FaultKind, stub: OpenAIStubServer, tmp_path: Path
) -> None:
    with FaultProxy(stub.base_url, FaultPlan(**{kind.value: 1.0}, only_paths=("/chat/completions",))) as proxy:
        with pytest.raises(RunStopped) as caught:
            app_through(run, proxy.base_url, tmp_path)
        sent = proxy.count(kind)
    line = one_line(caught.value)
    assert exit_code(caught.value) != 0 and "\n" not in line
    assert CAUSE[kind] in line and "lm.task" in line, line
    expected = MaxTokensTooSmall if kind is FaultKind.EMPTY_AT_LENGTH else EndpointUnusable
    assert isinstance(caught.value, expected)
    assert sent == (1 if kind is FaultKind.EMPTY_AT_LENGTH else 3)  # cut at max_tokens: never retried
    assert "FINISHED" not in statuses(tmp_path)


def test_the_endpoint_check_asks_under_the_role_max_tokens(stub: OpenAIStubServer) -> None:
    config = {"backend": "openai", "model": "stub-model", "api_base": stub.base_url, "api_key_env": KEY_ENV}
    check_endpoints({"judge": build_lm({**config, "max_tokens": 64}, role="judge")})
    assert stub.requests[-1].json["max_completion_tokens"] == 64  # what the run will send, not 1
    stub.inject_body(json.dumps({"object": "chat.completion", "model": "stub-model", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": ""}, "finish_reason": "length"}]}).encode())
    with pytest.raises(MaxTokensTooSmall, match=r"^lm\.judge: 1 reply came back empty, cut at lm\.judge\.max_tokens="):
        check_endpoints({"judge": build_lm({**config, "max_tokens": 64}, role="judge")})


def forwarding_first(**rates: float) -> FaultPlan:
    """A plan whose first request (the endpoint check) is forwarded: the faults meet the run itself."""
    seed = next(s for s in range(200) if FaultPlan(seed=s, **rates).fault_at(0).kind is FaultKind.FORWARDED)
    return FaultPlan(seed=seed, only_paths=("/chat/completions",), **rates)


@pytest.mark.parametrize(
    ("rates", "stopped", "named"),
    [({"empty_at_length": 0.9}, MaxTokensTooSmall, "raise it, e.g. lm.task.max_tokens=256"),
     ({"content_null": 0.9}, TooManyFailures, "carries no answer")],
    ids=["length", "content_null"],
)
def test_empty_replies_during_the_run_stop_it(
    rates: dict[str, float], stopped: type[RunStopped], named: str, stub: OpenAIStubServer, tmp_path: Path
) -> None:
    with FaultProxy(stub.base_url, forwarding_first(**rates)) as proxy, pytest.raises(stopped) as caught:
        app_through(run, proxy.base_url, tmp_path, "lm.task.num_retries=1")
    assert named in str(caught.value) and statuses(tmp_path) == ["FAILED"]


RETRIABLE = {"non_json": 0.01, "truncated": 0.005, "empty_body": 0.005, "json_list": 0.01, "no_choices": 0.005,
             "no_message": 0.005, "content_null": 0.01}  # 5%; `empty_at_length` is never retried: not here


def verdicts(api_base: str, work: Path) -> tuple[dict[str, tuple[str, str]], dict[str, float]]:
    outcome = app_through(run, api_base, work, "lm.task.num_retries=10", "lm.task.timeout_s=60",
                          "dataset.n_conversations=1")  # no real timeouts
    rows = json.loads((Path(str(outcome["run_dir"])) / "artifacts" / "results.json").read_text())
    metrics = MlflowClient(tracking_uri=f"sqlite:///{work}/mlflow.db").get_run(str(outcome["run_id"])).data.metrics
    return {row["question_id"]: (row["prediction"], row["verdict"]) for row in rows}, metrics


@pytest.mark.slow
def test_five_percent_shapeless_replies_leave_every_verdict_unchanged(stub: OpenAIStubServer, tmp_path: Path) -> None:
    clean, _ = verdicts(stub.base_url, tmp_path / "clean")
    with FaultProxy(stub.base_url, FaultPlan(seed=24, only_paths=("/chat/completions",), **RETRIABLE)) as proxy:
        faulty, metrics = verdicts(proxy.base_url, tmp_path / "faulty")
        injected = {kind: proxy.count(kind) for kind in map(FaultKind, RETRIABLE)}
    assert len(clean) > 10 and faulty == clean
    assert injected[FaultKind.CONTENT_NULL] > 0 and sum(injected.values()) > injected[FaultKind.CONTENT_NULL]
    assert metrics["lm_retries/total"] == sum(injected.values())
    assert metrics["lm_retries/task/empty_reply"] == injected[FaultKind.CONTENT_NULL]


# ------------------------------------------------------------------------------ the response cache
EMPTY_COMPLETION = json.dumps({"object": "chat.completion", "model": "stub-model", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": ""}, "finish_reason": "stop"}]}).encode()


def test_a_cached_empty_reply_of_an_older_run_is_not_served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isolate_llm_env(monkeypatch, tmp_path)
    older_cache = Cache(enable_disk_cache=True, enable_memory_cache=False, disk_cache_dir=str(tmp_path / "cache"))
    monkeypatch.setattr(dspy, "cache", older_cache)
    with OpenAIStubServer(responder=answering_responder) as server:
        server.inject_body(EMPTY_COMPLETION)
        older = dspy.LM("openai/stub-model", api_base=server.base_url, api_key=KEY, temperature=0.0, max_tokens=None,
                        num_retries=0)  # DSPy's own engine, as an older version ran it: it caches what it gets
        with contextlib.suppress(Exception):
            ask(older)  # the empty reply is cached; DSPy's JSON fallback gets (and caches) an answer
        sent = len(chat_calls(server))
        configure_cache(tmp_path / "cache")
        lm = build_lm({"backend": "openai", "model": "stub-model", "api_base": server.base_url,
                       "api_key_env": KEY_ENV}, role="task")
        assert ask(lm).answer == ANSWER
        assert len(chat_calls(server)) == sent + 1  # the cached empty reply was a miss: asked again
        assert ask(lm).answer == ANSWER and len(chat_calls(server)) == sent + 1  # the good one is cached


def test_a_key_the_model_echoes_reaches_no_file(stub: OpenAIStubServer, tmp_path: Path) -> None:
    answer = stub.responder  # the simulated world's answers, the key echoed after each (a model repeating it)
    stub.responder = lambda messages: f"{answer(messages)}\n(authorization: Bearer {KEY})"
    outcome = app_through(run, stub.base_url, tmp_path, "dataset.n_conversations=1")
    assert outcome["run_id"] and list((tmp_path / "cache").rglob("*"))
    leaked = [path for path in tmp_path.rglob("*") if path.is_file() and KEY.encode() in path.read_bytes()]
    assert leaked == []
