"""Blame in MLflow's trace view: a real sim run, attributed by the lineage attributor, logged as question traces
into a real SQLite MLflow store under tmp_path and read back through MLflow's own API: one trace per answered
question up to the cap, linked to the run; each explained failure with its `blame` feedback (error type,
stage, op, reason); filtering by `tags.memtrace.blamed_stage` returns exactly those; spans bounded and on the
question's path; a secret in an answer masked; a logging failure only warns."""

from __future__ import annotations

import dataclasses
import logging
import re

import mlflow
import pytest
from memtrace_loop.experiments.config import TrackingConfig
from memtrace_loop.memory_systems.registry import build_memory_system
from memtrace_loop.pipeline.analysis.attribution.lineage import LineageAttributor
from memtrace_loop.pipeline.analysis.attribution.protocol import TracedRun, attribute_run
from memtrace_loop.pipeline.analysis.judge import make_judge
from memtrace_loop.pipeline.backends.embeddings import build_embedder
from memtrace_loop.pipeline.core.conventions import answer_name, verdict_name
from memtrace_loop.pipeline.core.redaction import REDACTED, redact
from memtrace_loop.pipeline.core.stop import Interrupted, StopToken
from memtrace_loop.pipeline.loop.runner import run_dataset
from memtrace_loop.pipeline.tracking.mlflow_tracker import MlflowTracker
from memtrace_loop.pipeline.tracking.traces import TraceLimits, log_question_traces, plan_run_traces
from mlflow.tracking import MlflowClient

from tests.support.sim import sim_dataset, sim_lm
from tests.support.store import fresh_store

# every test starts with a fresh, migrated MLflow store at tmp_path/mlflow.db (a copy of a template: tests/conftest.py)
pytestmark = pytest.mark.usefixtures("mlflow_db")

CAP = 40  # below the run's 61 answered questions
LIMITS = TraceLimits()
SPAN_TYPES = {"LLM", "RETRIEVER", "TOOL", "CHAIN"}


def traced_run(system_name: str, n_conversations: int = 2):
    lm = sim_lm()
    system = build_memory_system({"name": system_name}, build_embedder({}))
    system.set_lm(lm)
    data = sim_dataset(seed=0, n_conversations=n_conversations)
    result = run_dataset(system, make_judge(lm), data, workers=2)
    traced = TracedRun(result.results, result.graph_by_conversation, {c.id: c for c in data.conversations}, (5,))
    return result, attribute_run(LineageAttributor(), traced)


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    """A mem0 sim run attributed and logged with a cap below its number of answered questions; one word of a
    logged answer is configured as a secret."""
    tmp_path = tmp_path_factory.mktemp("traces")
    fresh_store(tmp_path / "mlflow.db")  # migrated already (a copy of the tests' template)
    result, attributions = traced_run("mem0")
    secret = next(w for case in result.results[:CAP] for w in re.findall(r"[A-Za-z]{6,}", case.prediction))
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    tracker = MlflowTracker(uri)
    experiment_id = tracker.open_experiment("traces")
    with tracker.start_run("run") as run_id:
        stored = log_question_traces(result, attributions, run_id=run_id, cap=CAP, secrets=[secret])
    traces = mlflow.search_traces(locations=[experiment_id], run_id=run_id, return_type="list")
    by_question = {t.info.tags["memtrace.question"]: t for t in traces}
    return result, attributions, run_id, experiment_id, stored, traces, by_question, secret, uri


@pytest.fixture
def store(logged):
    """The fixture's store as MLflow's current tracking URI (another test may have pointed MLflow elsewhere)."""
    mlflow.set_tracking_uri(logged[-1])
    return logged[:-1]


def test_the_store_holds_one_trace_per_answered_question_up_to_the_cap_linked_to_the_run(store):
    result, _, run_id, _, stored, traces, by_question, secret = store
    assert len(result.results) > CAP
    assert stored == len(traces) == CAP
    assert set(by_question) == {case.question.id for case in result.results[:CAP]}  # dataset order
    for case in result.results[:CAP]:
        trace = by_question[case.question.id]
        assert trace.info.request_metadata["mlflow.sourceRun"] == run_id
        assert trace.info.tags["memtrace.verdict"] == case.verdict
        assert trace.info.tags["memtrace.conversation"] == case.question.conversation_id
        root = trace.data.spans[0]
        assert root.parent_id is None and root.inputs["question"] == redact(case.question.text, [secret])
        assert root.outputs["gold"] == redact(case.question.gold, [secret]) and root.outputs["verdict"] == case.verdict


def test_a_wrong_answer_is_an_error_trace_and_the_state_filter_finds_exactly_the_failures(store):
    result, _, run_id, experiment_id, _, _, by_question, _ = store
    verdicts = {case.question.id: case.verdict for case in result.results[:CAP]}
    assert {"CORRECT"} < set(verdicts.values())  # both kinds are in the logged traces
    for question_id, trace in by_question.items():
        assert trace.info.state.value == ("OK" if verdicts[question_id] == "CORRECT" else "ERROR"), question_id
    failed = mlflow.search_traces(locations=[experiment_id], run_id=run_id, filter_string="trace.status = 'ERROR'",
                                  include_spans=False, return_type="list")
    assert {t.info.tags["memtrace.question"] for t in failed} == {q for q, v in verdicts.items() if v != "CORRECT"}


def test_each_explained_failure_has_its_blame_feedback_and_no_other_case_has_one(store):
    _, attributions, _, _, _, _, by_question, secret = store
    attribution_by_question = {a.question_id: a for a in attributions}
    explained = [q for q in by_question if q in attribution_by_question]
    assert len(explained) >= 5
    client = MlflowClient(mlflow.get_tracking_uri())
    for question_id, found in by_question.items():
        trace = client.get_trace(found.info.trace_id)  # assessments as the store holds them
        blames = [a for a in trace.info.assessments if a.name == "blame"]
        attribution = attribution_by_question.get(question_id)
        if attribution is None:
            assert blames == [] and "memtrace.blamed_stage" not in trace.info.tags
            continue
        (blame,) = blames
        assert blame.value == attribution.error_type.value
        assert blame.rationale == redact(attribution.reason, [secret])
        assert blame.metadata["stage"] == attribution.stage and blame.metadata["op"] == attribution.op
        assert blame.metadata["confidence"] == attribution.confidence
        assert blame.metadata["verified"] is None  # the lineage attributor does not replay
        assert blame.source.source_type == "CODE" and blame.source.source_id == "memtrace.lineage"
        assert trace.info.tags["memtrace.blamed_stage"] == attribution.stage
        assert trace.info.tags["memtrace.error_type"] == attribution.error_type.value
        (blamed_span,) = [s for s in trace.data.spans if s.attributes.get("memtrace.op") == attribution.op]
        assert blamed_span.attributes["memtrace.blamed"] is True
        assert blame.span_id == blamed_span.span_id  # the feedback sits on the blamed operation


def test_filtering_by_blamed_stage_returns_only_the_traces_blamed_on_it(store):
    _, attributions, run_id, experiment_id, _, _, by_question, _ = store
    expected_by_stage: dict[str, set[str]] = {}
    for attribution in attributions:
        if attribution.question_id in by_question:
            expected_by_stage.setdefault(attribution.stage, set()).add(attribution.question_id)
    assert len(expected_by_stage) >= 2  # the run blames more than one stage
    for stage, expected in expected_by_stage.items():
        found = mlflow.search_traces(locations=[experiment_id], run_id=run_id, return_type="list",
                                     filter_string=f"tags.memtrace.blamed_stage = '{stage}'")
        assert {t.info.tags["memtrace.question"] for t in found} == expected, stage
    wrong = mlflow.search_traces(locations=[experiment_id], run_id=run_id, return_type="list",
                                 filter_string="tags.memtrace.verdict = 'WRONG'", include_spans=False)
    assert {t.info.tags["memtrace.question"] for t in wrong} == {
        q for q, t in by_question.items() if t.info.tags["memtrace.verdict"] == "WRONG"}


def test_spans_are_the_operations_on_the_question_path_bounded_and_in_sequence(store):
    result, attributions, _, _, _, _, by_question, _ = store
    attribution_by_question = {a.question_id: a for a in attributions}
    for case in result.results[:CAP]:
        trace = by_question[case.question.id]
        graph = result.graph_by_conversation[case.question.conversation_id]
        root, children = trace.data.spans[0], trace.data.spans[1:]
        assert 3 <= len(children) <= LIMITS.max_spans
        assert all(s.parent_id == root.span_id for s in children)
        seqs = [s.attributes["memtrace.seq"] for s in sorted(children, key=lambda s: s.start_time_ns)]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        assert {s.span_type for s in children} <= SPAN_TYPES
        ops = {s.attributes["memtrace.op"] for s in children}
        judge = graph.producer(graph.latest(verdict_name(case.question.id)).id)
        answer = graph.producer(graph.latest(answer_name(case.question.id)).id)
        assert {judge.id, answer.id} <= ops  # the answer and its judging are always on the path
        allowed = set(graph.ancestors(graph.latest(verdict_name(case.question.id)).id))
        if case.question.id in attribution_by_question:
            attribution = attribution_by_question[case.question.id]
            allowed |= {attribution.op, *(f.op for f in (*attribution.suspects, *attribution.joint))}
        for turn_id in case.question.evidence:
            if f"turn:{turn_id}@1" in graph:
                allowed |= graph.descendants(f"turn:{turn_id}@1")
        for span in children:
            op = graph.operation(span.attributes["memtrace.op"])
            assert span.attributes["memtrace.stage"] == op.stage
            if op.prompt is not None:
                assert span.span_type == "LLM" and span.attributes["memtrace.prompt"] == op.prompt
            for value in (span.inputs or {}).values():
                assert len(str(value)) <= LIMITS.max_chars + 40
            assert op.id in allowed  # upstream of the verdict, a suspect, or on an evidence turn's path
        retrievals = [s for s in children if s.span_type == "RETRIEVER" and s.outputs and "retrieve" in s.name]
        assert retrievals and all("page_content" in doc for doc in retrievals[-1].outputs)


def test_a_secret_in_an_answer_is_masked_in_every_trace(store):
    result, _, _, _, _, traces, by_question, secret = store
    carrier = next(c for c in result.results[:CAP] if secret in c.prediction)
    root = by_question[carrier.question.id].data.spans[0]
    assert root.outputs["answer"] == carrier.prediction.replace(secret, REDACTED)
    for trace in traces:
        assert secret not in trace.to_json()


def test_fewer_answered_questions_than_the_cap_give_one_trace_each(store, tmp_path):
    result, attributions, *_ = store
    small = dataclasses.replace(result, results=result.results[:5])
    tracker = MlflowTracker(f"sqlite:///{tmp_path}/mlflow.db")
    experiment_id = tracker.open_experiment("small")
    with tracker.start_run("small") as run_id:
        assert log_question_traces(small, attributions, run_id=run_id, cap=200) == 5
        assert log_question_traces(small, attributions, run_id=run_id, cap=0) == 0
    found = mlflow.search_traces(locations=[experiment_id], run_id=run_id, return_type="list", include_spans=False)
    assert sorted(t.info.tags["memtrace.question"] for t in found) == sorted(c.question.id for c in small.results)


def test_a_logging_failure_warns_and_returns_instead_of_failing_the_run(store, tmp_path, caplog):
    result, attributions, *_ = store
    MlflowTracker(f"sqlite:///{tmp_path}/mlflow.db").open_experiment("broken")
    with caplog.at_level(logging.WARNING, logger="memtrace_loop.pipeline.tracking.traces"):
        assert log_question_traces(result, attributions, run_id="0" * 32, cap=3) == 0
    assert "could not log the question traces" in caplog.text


@pytest.mark.parametrize("system_name", ["long_context", "rag", "evermemos"])
def test_every_system_plans_bounded_traces_that_hold_the_answer_path(system_name):
    result, attributions = traced_run(system_name, n_conversations=1)
    limits = TraceLimits(max_spans=12)
    plans = plan_run_traces(result, attributions, cap=1000, limits=limits)
    assert len(plans) == len(result.results)
    attribution_by_question = {a.question_id: a for a in attributions}
    for plan in plans:
        assert 2 <= len(plan.spans) <= limits.max_spans
        assert [s.seq for s in plan.spans] == sorted(s.seq for s in plan.spans)
        assert {s.span_type for s in plan.spans} <= SPAN_TYPES
        attribution = attribution_by_question.get(plan.question_id)
        assert (plan.blame is not None) == (attribution is not None)
        if attribution is not None:
            assert attribution.op in {s.op for s in plan.spans}


def test_trace_settings_default_on_with_a_cap_and_refuse_a_negative_cap():
    config = TrackingConfig(uri="sqlite:///x.db")
    assert config.traces is True and config.max_traces == 100
    with pytest.raises(ValueError, match="max_traces"):
        TrackingConfig(uri="sqlite:///x.db", max_traces=-1)


def test_a_requested_stop_interrupts_trace_logging(store, tmp_path):
    result, attributions, *_ = store
    tracker = MlflowTracker(f"sqlite:///{tmp_path}/mlflow.db")
    experiment_id = tracker.open_experiment("stopped")
    token = StopToken()
    token.request()
    with pytest.raises(Interrupted), tracker.start_run("stopped") as run_id:
        log_question_traces(result, attributions, run_id=run_id, cap=5, stop=token)
    assert mlflow.search_traces(locations=[experiment_id], run_id=run_id, return_type="list") == []
    assert MlflowClient(f"sqlite:///{tmp_path}/mlflow.db").get_run(run_id).info.status == "KILLED"
