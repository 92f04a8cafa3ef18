"""An optimization loop on the simulated world logged into a real SQLite MLflow store, read back through
MLflow's own client: each iteration's nested run spans the iteration's work (not only the logging after
it), each iteration's train failures are MLflow traces linked to its nested run (capped, state ERROR,
with their blame), and the log names the iteration's dev accuracy before and after it, as the tables
and charts (which show "before") say."""

from __future__ import annotations

import logging
import re
import time

import mlflow
import pytest
from memtrace_loop.experiments.console import loop_tables
from memtrace_loop.memory_systems.mem0.system import Mem0Memory
from memtrace_loop.optimizers.registry import build_optimizer
from memtrace_loop.pipeline.analysis.judge import make_judge
from memtrace_loop.pipeline.backends.call_count import CallLedger
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.backends.lm import LMSet
from memtrace_loop.pipeline.data.splits import split_by_conversation
from memtrace_loop.pipeline.loop.optimization import IterationRecord, LoopResult, LoopSettings, OptimizationLoop
from memtrace_loop.pipeline.tracking.loop_observer import TrackingLoopObserver
from memtrace_loop.pipeline.tracking.mlflow_tracker import MlflowTracker
from memtrace_loop.pipeline.tracking.plots import DEV_LABEL, IterationScore, scores_figure
from memtrace_loop.pipeline.tracking.traces import FailureTraces
from mlflow.tracking import MlflowClient
from rich.console import Console

from tests.support.sim import sim_dataset, sim_lm
from tests.support.store import fresh_store

pytestmark = pytest.mark.slow  # a whole loop (one iteration after the baseline) and its traces: seconds

CAP = 3  # traces per iteration: below each iteration's train failures


class Clock:
    """A `LoopObserver` that notes when each iteration's work ended (its observers are called) or, put
    after the tracking observer, when the next one's work begins."""

    def __init__(self) -> None:
        self.at: dict[int, float] = {}

    def on_iteration(self, record: IterationRecord) -> None:
        self.at[record.iteration] = time.time()

    def on_finish(self, result: LoopResult) -> None:
        pass


@pytest.fixture(scope="module")
def tracked(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("loop-tracking")
    uri = fresh_store(tmp_path / "mlflow.db")
    calls = CallLedger()
    lms = calls.counted(LMSet(*(sim_lm(),) * 4))
    system = Mem0Memory(HashingEmbedder())
    system.set_lm(lms.task)
    parts = split_by_conversation(sim_dataset(seed=0, n_conversations=4), (0.5, 0.25, 0.25), seed=0)
    tracker = MlflowTracker(uri)
    experiment_id = tracker.open_experiment("loop-tracking")
    ended, begun = Clock(), Clock()
    logger = logging.getLogger("memtrace_loop.pipeline.loop.optimization")
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = records.append  # type: ignore[method-assign]
    logger.addHandler(handler)
    previous_level = logger.level
    logger.setLevel(logging.INFO)
    try:
        with tracker.start_run("optimize") as parent_id:
            observer = TrackingLoopObserver(tracker, "mem0", (), traces=FailureTraces(CAP))
            loop_started = time.time()
            loop = OptimizationLoop(
                system, make_judge(lms.judge), build_optimizer("attribution", lms.rewriter, system=system),
                parts, LoopSettings(max_iterations=1, patience=2, workers=2),
                observers=[ended, observer, begun], calls=calls,
            )
            result = loop.run()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous_level)
    client = MlflowClient(uri)
    children = client.search_runs([experiment_id], f"tags.mlflow.parentRunId = '{parent_id}'")
    by_iteration = {int(run.data.tags["memtrace.iteration"]): run for run in children}
    mlflow.set_tracking_uri(uri)
    return result, by_iteration, experiment_id, loop_started, ended.at, begun.at, records, uri


def test_each_nested_run_spans_its_iteration_s_work(tracked):
    result, by_iteration, _, loop_started, ended, begun, _, _ = tracked
    assert sorted(by_iteration) == [r.iteration for r in result.iterations] == [0, 1]
    for iteration, run in by_iteration.items():
        work_began = loop_started if iteration == 0 else begun[iteration - 1]  # after the last one's logging
        work_ended = ended[iteration]  # the loop hands the finished iteration to its observers
        assert work_ended - work_began > 0.05  # real work: evaluations, attribution, candidates
        assert run.info.start_time <= work_began * 1000, iteration  # ms since the epoch
        assert run.info.end_time >= work_ended * 1000, iteration
    total = sum(run.info.end_time - run.info.start_time for run in by_iteration.values()) / 1000
    assert total >= ended[1] - loop_started  # the nested runs cover the loop's iterations


def test_each_iteration_logs_its_train_failures_as_error_traces_linked_to_its_nested_run(tracked):
    result, by_iteration, experiment_id, *_ = tracked
    for record in result.iterations:
        run_id = by_iteration[record.iteration].info.run_id
        traces = mlflow.search_traces(locations=[experiment_id], run_id=run_id, return_type="list")
        excluded = set(record.train.report.excluded_categories)
        failures = [c for c in record.train.results if not c.correct and c.question.category not in excluded]
        assert len(failures) > CAP
        assert [t.info.tags["memtrace.question"] for t in traces] != []
        assert sorted(t.info.tags["memtrace.question"] for t in traces) == sorted(c.question.id for c in failures[:CAP])
        assert all(t.info.state.value == "ERROR" for t in traces)
        assert all(t.info.request_metadata["mlflow.sourceRun"] == run_id for t in traces)
        attributed = {a.question_id for a in record.attributions}
        blamed = {t.info.tags["memtrace.question"] for t in traces if "memtrace.blamed_stage" in t.info.tags}
        assert blamed == attributed & {c.question.id for c in failures[:CAP]}
        if record.iteration:  # iteration 0 is the baseline: evaluated, not attributed
            assert blamed


def test_the_log_says_dev_before_and_after_and_tables_and_charts_say_before(tracked):
    result, *_, records, _ = tracked
    # the formatted message: a SecretFilter an earlier app left on a handler rewrites `msg` and `args` in place
    said = [re.match(r"iteration (\d+): dev", r.getMessage()) for r in records]
    lines = {int(m.group(1)): m.string for m in said if m is not None}
    for record in result.iterations[1:]:
        before = record.dev.report.overall.judge_accuracy
        after = record.accepted.dev_accuracy if record.accepted is not None else before
        assert f"iteration {record.iteration}: dev before {before:.3f} -> after {after:.3f}" in lines[record.iteration]
    # the tables and the score chart show the iteration's starting prompt set: "before"
    history = {s.iteration: s for s in result.history}
    assert history[1].dev_accuracy == result.iterations[1].dev.report.overall.judge_accuracy
    console = Console(width=200, record=True)
    for table in loop_tables(result, "mem0"):
        console.print(table)
    assert "dev before %" in console.export_text()
    figure = scores_figure([IterationScore(s.iteration, s.dev_accuracy, *s.dev_ci) for s in result.history])
    assert DEV_LABEL in figure.axes[0].get_legend_handles_labels()[1] and "start" in DEV_LABEL
