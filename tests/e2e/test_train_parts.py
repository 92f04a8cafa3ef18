"""`loop.train_conversations`: the loop evaluates and attributes each incumbent on a part of train, the next
conversations of a seeded order after each accepted candidate, resumes on the same parts, and still improves."""

from __future__ import annotations

from dataclasses import replace

import pytest
from memtrace_loop.memory_systems.mem0.system import Mem0Memory
from memtrace_loop.optimizers.registry import build_optimizer
from memtrace_loop.pipeline.analysis.judge import make_judge
from memtrace_loop.pipeline.backends.call_count import CallLedger
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.backends.lm import LMSet
from memtrace_loop.pipeline.data.splits import Split, split_by_conversation, train_part
from memtrace_loop.pipeline.loop.checkpoint import read_checkpoint
from memtrace_loop.pipeline.loop.optimization import LoopResult, LoopSettings, OptimizationLoop

from tests.support.loops import Interrupted, StopAfter
from tests.support.sim import sim_dataset, sim_lm

pytestmark = pytest.mark.slow

SETTINGS = LoopSettings(max_iterations=5, patience=2, min_gain=0.02, max_candidates=2, workers=2)


def splits() -> Split:
    parts = split_by_conversation(sim_dataset(seed=0, n_conversations=8), (0.5, 0.25, 0.25), seed=0)
    return parts


def make_loop(settings: LoopSettings, **kwargs) -> OptimizationLoop:
    calls = CallLedger()
    lms = calls.counted(LMSet(*(sim_lm(reuse_calls=False),) * 4))
    system = Mem0Memory(HashingEmbedder())
    system.set_lm(lms.task)
    optimizer = build_optimizer("attribution", lms.rewriter, system=system)
    return OptimizationLoop(system, make_judge(lms.judge), optimizer, splits(), settings, calls=calls, **kwargs)


@pytest.fixture(scope="module")
def runs() -> dict[int, LoopResult]:
    return {k: make_loop(replace(SETTINGS, train_conversations=k)).run() for k in (0, 1)}


def train_ids(record) -> list[str]:
    return sorted(record.train.graph_by_conversation)


def test_each_incumbent_is_read_on_the_next_train_conversation(runs) -> None:
    result = runs[1]
    train = splits().scored(SETTINGS.exclude_categories).train
    accepted = 0
    for record in result.iterations:
        expected = [c.id for c in train_part(train, 1, accepted, SETTINGS.seed).conversations]
        assert train_ids(record) == expected, f"iteration {record.iteration}"
        assert {case.question.conversation_id for case in record.train.results} == set(expected)
        accepted += record.accepted is not None
    assert accepted >= 2  # the part moved on at least twice
    assert len({tuple(train_ids(r)) for r in result.iterations}) > 1


def test_reading_one_train_conversation_costs_fewer_calls_and_still_improves(runs) -> None:
    whole, part = runs[0], runs[1]
    assert len(train_ids(whole.iterations[0])) == 4
    assert part.iterations[0].budget_spent < whole.iterations[0].budget_spent
    gain = part.test_final.report.overall.judge_accuracy - part.test_start.report.overall.judge_accuracy
    assert gain > 0.1


def test_a_resumed_run_reads_the_same_parts_and_ends_the_same(runs, tmp_path) -> None:
    settings = replace(SETTINGS, train_conversations=1)
    checkpoint = tmp_path / "checkpoint.json"
    with pytest.raises(Interrupted):
        make_loop(settings, checkpoint=checkpoint, observers=[StopAfter(3)], config_digest="cfg").run()
    resumed = make_loop(settings, checkpoint=checkpoint, config_digest="cfg").run(
        resume=read_checkpoint(checkpoint, "cfg"))
    assert resumed.final_prompts == runs[1].final_prompts
    assert [train_ids(r) for r in resumed.iterations] == [train_ids(r) for r in runs[1].iterations[3:]]
    assert resumed.test_final.results == runs[1].test_final.results
