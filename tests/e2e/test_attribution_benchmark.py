"""The attribution benchmark end to end: injected faults on the simulated world, the lineage attributor
scored against them, the bench command, and its MemTraceBench mode on graphs exported here.

Ground truth comes from the injection (the operation that executed the injected call or change, read
from the faulty run's graph), never from the attributor.
"""

from __future__ import annotations

import json
from functools import cache

import dspy
import pytest
from memtrace_loop.experiments.lab.bench import attribution_bench
from memtrace_loop.experiments.lab.benchmark.edits import injected_lm, wrong_answer
from memtrace_loop.experiments.lab.benchmark.injection import (
    FaultInjector,
    build_system_cases,
    perfect_prompts,
)
from memtrace_loop.experiments.lab.benchmark.scoring import FaultKind, score_attributor
from memtrace_loop.memory_systems.registry import SYSTEMS, build_memory_system, spec_of
from memtrace_loop.pipeline.analysis.attribution.lineage import LineageAttributor
from memtrace_loop.pipeline.analysis.attribution.records import Attribution, Tunable
from memtrace_loop.pipeline.analysis.judge import make_judge
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.backends.registry import backend_test_world
from memtrace_loop.pipeline.interop.exec_network import to_exec_network

from tests.support.sim import sim_dataset, sim_lm
from tests.support.tracking import InMemoryTracker

KNOB_FAULTS = {FaultKind.RETRIEVAL_MISS, FaultKind.TRIMMED_BUFFER, FaultKind.CHUNK_SPLIT}


@cache
def injected(system: str, n_conversations: int = 2, limit_per_kind: int = 10):
    return build_system_cases(
        system, sim_lm(), sim_dataset(seed=0, n_conversations=n_conversations),
        lambda cfg: build_memory_system(cfg, HashingEmbedder()), backend_test_world().perfect_instruction,
        limit_per_kind=limit_per_kind, workers=2,
    )


def test_the_engine_alters_only_the_first_targeted_call():
    lm, engine = injected_lm(sim_lm(), wrong_answer("Where does Alice live?"))
    answer = dspy.Predict("context, question -> answer")
    answer.set_lm(lm)
    context = "Alice lives in Rome."
    first = answer(context=context, question="Where does Alice live?").answer
    second = answer(context=context, question="Where does Alice live?").answer
    other = answer(context=context, question="Where did Alice move?").answer
    assert first == "It is not mentioned in the conversation."
    assert second != first and other != first
    assert len(engine.fired) == 1


def test_a_mem0_fault_changes_nothing_before_its_operation():
    """The faulty run equals the perfect run up to the injected operation (honest injection)."""
    lm = sim_lm()
    dataset = sim_dataset(seed=0, n_conversations=1)

    def build(extra):
        system = build_memory_system({"name": "mem0", **spec_of("mem0").generous_knobs, **extra}, HashingEmbedder())
        return system.with_prompts(perfect_prompts(system, backend_test_world().perfect_instruction))

    injector = FaultInjector("mem0", build({}), lm, dataset, build, workers=1)
    perfect = injector.perfect_run().graph_by_conversation[dataset.conversations[0].id]
    cases, _ = injector.build(limit_per_kind=1, kinds=[FaultKind.EXTRACTION_DROP, FaultKind.DELETION])
    assert {c.truth.kind for c in cases} == {FaultKind.EXTRACTION_DROP, FaultKind.DELETION}
    for case in cases:
        fault = case.graph.operation(case.truth.op)
        assert perfect.operation(fault.id).name == fault.name  # the same operation in the perfect run
        for op in case.graph.operations():
            if op.seq >= fault.seq:
                break
            twin = perfect.operation(op.id)
            assert (twin.name, twin.inputs, twin.outputs) == (op.name, op.inputs, op.outputs)
            values = [case.graph.variable(v).value for v in op.outputs]
            assert [perfect.variable(v).value for v in twin.outputs] == values
        changed = [perfect.variable(v).value != case.graph.variable(v).value for v in fault.outputs]
        assert any(changed), "the injected operation's output should differ from the perfect run's"


def test_injected_cases_on_long_context_are_decisive_and_their_truth_is_in_the_graph():
    cases, report = injected("long_context", 1, 3)
    assert report.perfect_correct >= 0.95 * report.questions
    assert {c.truth.kind for c in cases} == set(spec_of("long_context").fault_kinds)
    for case in cases:
        assert not case.case.correct
        op = case.graph.operation(case.truth.op)
        assert op.stage == case.truth.stage
        assert (case.truth.tunable == Tunable.KNOBS) == (case.truth.kind in KNOB_FAULTS)
        if case.truth.kind == FaultKind.TRIMMED_BUFFER:
            assert case.case.question.evidence[0] in op.meta["trimmed"]


@pytest.mark.slow
@pytest.mark.parametrize("system", list(SYSTEMS.compared()))
def test_every_fault_kind_is_injected_decisively_with_truth_read_from_the_graph(system):
    cases, report = injected(system)
    assert report.perfect_correct >= 0.95 * report.questions, "the perfect run should answer nearly everything"
    for kind in spec_of(system).fault_kinds:
        assert report.kept_by_kind[kind.value] >= 5, f"{system}: too few decisive {kind} injections: {report}"
    for case in cases:
        assert not case.case.correct
        op = case.graph.operation(case.truth.op)
        assert op.stage == case.truth.stage
        if case.truth.tunable == Tunable.PROMPT:
            assert op.prompt is not None


# The bar. Measured on main (seed 0, 2 conversations, 10 cases per kind): every system 100% on
# error type, stage and exact operation (see README). Earlier misses and their fixes: a decision that
# fanned out to several ADDs counted as a drop (mem0 update/deletion), the steering rule blamed
# expand_queries for a search that returned fewer than top_k units (evermemos retrieval_miss), and the
# injection dropped the fact from the events only while the narrative still stated it (no extraction
# error by the taxonomy; it now drops it from both writers).
@pytest.mark.slow
@pytest.mark.parametrize("system", list(SYSTEMS.compared()))
def test_lineage_reaches_the_bar_on_injected_faults(system):
    cases, _ = injected(system)
    score = score_attributor(LineageAttributor(), cases, system)
    detail = {k: (score.type_accuracy_by_kind[k], score.op_accuracy_by_kind[k]) for k in score.n_by_kind}
    assert score.error_type_accuracy >= 0.95, f"{system}: error type {score.error_type_accuracy:.3f} {detail}"
    assert score.op_accuracy >= 0.90, f"{system}: exact operation {score.op_accuracy:.3f} {detail}"


@pytest.mark.slow
@pytest.mark.parametrize("system", list(SYSTEMS.compared()))
def test_with_replay_verified_attributions_are_right(system):
    cases, _ = injected(system)
    lm = sim_lm()
    setting = attribution_bench.BenchSetting(system, attribution_bench.perfect_system(system, lm), make_judge(lm), lm)
    score = score_attributor(attribution_bench.BUILDER_BY_ATTRIBUTOR["lineage+replay"](setting), cases, system)
    assert score.verified > 0.5, f"{system}: replay verified only {score.verified:.3f}"
    assert score.verified_precision is not None and score.verified_precision >= 0.95, score.as_row()


def test_the_bench_command_prints_the_table_and_logs_it(capsys):
    code = attribution_bench.main(
        ["--systems", "long_context", "--conversations", "1", "--limit-per-kind", "2", "--attributors", "lineage"]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "trimmed_buffer" in out and "response_wrong" in out
    row = next(line for line in out.splitlines() if "long_context" in line and "lineage" in line)
    assert "1.0" in row
    cases, _ = injected("long_context", 1, 2)
    scores = [score_attributor(LineageAttributor(), cases, "long_context")]
    tracker = InMemoryTracker()
    run_id = attribution_bench.log_scores(tracker, scores, {"seed": 0})
    run = tracker.runs[run_id]
    assert run.metric("long_context.lineage.op_acc") == [(1.0, None)]
    assert "long_context" in run.text("attribution_benchmark.txt")


def test_memtracebench_mode_scores_exported_graphs_against_their_annotations(tmp_path, capsys):
    cases, _ = injected("long_context", 1, 2)
    for index, case in enumerate(cases):
        op = case.graph.operation(case.truth.op)
        truth = Attribution(
            case.case, op.id, op.name, op.stage, case.truth.error_type, "injected fault", 1.0, "truth",
            evidence=case.case.question.evidence,
        )
        (tmp_path / f"case{index}.json").write_text(json.dumps(to_exec_network(case.graph, [truth])))
    paths = attribution_bench.bench_paths(tmp_path)
    assert len(paths) == len(cases)
    (score,) = attribution_bench.score_memtracebench(paths, ["lineage"], sim_lm(), attribution_bench.Console())
    assert score.n == len(cases)
    assert score.error_type_accuracy == 1.0 and score.op_accuracy == 1.0  # lineage is exact on long_context

    # a label naming another operation is scored as a miss
    case = cases[0]
    other = next(o for o in case.graph.operations() if o.id != case.truth.op)
    wrong = Attribution(case.case, other.id, other.name, other.stage, case.truth.error_type, "x", 1.0, "truth",
                        evidence=case.case.question.evidence)
    (tmp_path / "case0.json").write_text(json.dumps(to_exec_network(case.graph, [wrong])))
    (score,) = attribution_bench.score_memtracebench(paths, ["lineage"], sim_lm(), attribution_bench.Console())
    assert score.op_accuracy == pytest.approx((len(cases) - 1) / len(cases))

    assert attribution_bench.main(["--memtracebench", str(tmp_path), "--attributors", "lineage"]) == 0
    assert "memtracebench" in capsys.readouterr().out


# The LLM walk on the simulated world (its verdicts come from the world's rule-based stand-in for the
# attributor's prompt). Measured (seed 0, 2 conversations, 10 per kind): long_context, mem0 and evermemos
# 1.00, rag 0.97 (one retrieval_miss blamed on respond). EverMemOS was 0.87 until the walk kept the needed
# information whole in every step and stopped spending its steps on one boundary decision per turn.
@pytest.mark.slow
@pytest.mark.parametrize("system", list(SYSTEMS.compared()))
def test_the_llm_walk_reaches_the_bar_on_injected_faults(system):
    cases, _ = injected(system)
    lm = sim_lm()
    setting = attribution_bench.BenchSetting(system, attribution_bench.perfect_system(system, lm), make_judge(lm), lm)
    score = score_attributor(attribution_bench.BUILDER_BY_ATTRIBUTOR["llm"](setting), cases, system)
    assert score.error_type_accuracy >= 0.95, score.as_row()
    assert score.op_accuracy >= 0.90, score.as_row()
    assert 0 < score.lm_calls_per_case <= 12
