"""`optimizer=gepa` and `gepa_blame` searching on the simulated world (moved from tests/stages/test_gepa.py: each
test runs GEPA's search or the loop, seconds each): seeds, the call budget, resuming from GEPA's log_dir, one
GEPA run across the loop's iterations, and the final prompts loaded as a DSPy program giving the loop's test
numbers.

The task LM and judge are the sim stand-in; GEPA's reflection LM is the scripted one of
tests/support/reflection.py (it completes a stage's instruction with the sim world's rules for that stage).
"""

from __future__ import annotations

import json
from dataclasses import replace

import dspy
import pytest
from memtrace_loop.memory_systems.mem0.system import Mem0Memory
from memtrace_loop.optimizers.gepa import (
    TABLE_FILE,
    GepaBlameOptimizer,
    GepaOptimizer,
)
from memtrace_loop.optimizers.gepa_program import JudgeMetric, MemoryProgram, question_examples, save_program_state
from memtrace_loop.pipeline.analysis.attribution.lineage import LineageAttributor
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.data.splits import split_by_conversation
from memtrace_loop.pipeline.loop.optimization import LoopSettings, OptimizationLoop
from memtrace_loop.pipeline.loop.runner import LoopCaseRunner, MemoryCache

from tests.support.gepa_world import SMALL, World
from tests.support.reflection import reflection_lm
from tests.support.sim import sim_dataset

pytestmark = pytest.mark.slow  # whole loops and runs: out of `make test-fast`


def _table(candidates) -> dict:
    return dict(candidates[0].tables[TABLE_FILE]) if candidates else {}


def test_a_seed_gives_the_same_candidates(tmp_path):
    def once(name: str):
        w = World()
        lm, _ = reflection_lm(w.stage_rewrite())
        optimizer = GepaBlameOptimizer(lm, replace(SMALL, max_metric_calls=40), LineageAttributor(), tmp_path / name)
        candidates = optimizer.propose(w.context())
        return [c.prompts for c in candidates], _table(candidates)

    first, second = once("a"), once("b")
    assert first == second and first[0]  # GEPA found candidates, and the same ones


class CountdownBudget:
    """A `CallBudget` over a world's counted calls: `limit` LM calls in all."""

    def __init__(self, world: World, limit: int) -> None:
        self.world, self.limit = world, limit

    def spent(self) -> int:
        return self.world.calls

    def remaining(self) -> int | None:
        return self.limit - self.world.calls


def test_gepa_stops_at_the_call_budget(tmp_path):
    w = World()
    lm, engine = reflection_lm(w.stage_rewrite())
    optimizer = GepaOptimizer(lm, SMALL)
    budget = CountdownBudget(w, 0)
    optimizer.propose(w.context(budget=budget))  # nothing left: GEPA does not start
    assert w.calls == 0 and not engine.prompts
    w2 = World()
    unlimited = GepaOptimizer(lm, SMALL).propose(w2.context())  # stopped by its own max_metric_calls
    budget = CountdownBudget(w, w2.calls // 3)
    capped = optimizer.propose(w.context(budget=budget))
    assert budget.remaining() <= 0  # it ran up to the budget ...
    assert w.calls < w2.calls  # ... and stopped there, unlike the unlimited run
    assert len(_table(capped).get("candidate", [])) <= len(_table(unlimited).get("candidate", []))


def test_an_interrupted_gepa_run_resumes_from_its_log_dir(tmp_path):
    def optimizer_and_world(work_dir):
        w = World()
        lm, engine = reflection_lm(w.stage_rewrite())
        return GepaOptimizer(lm, SMALL, work_dir=work_dir), w, engine

    optimizer, w, full_engine = optimizer_and_world(tmp_path / "full")
    full = optimizer.propose(w.context())

    optimizer, w, cut_engine = optimizer_and_world(tmp_path / "cut")
    budget = CountdownBudget(w, 250)  # "interrupted": stopped part way
    optimizer.propose(w.context(budget=budget))
    assert (tmp_path / "cut" / "gepa" / "gepa_state.bin").exists()
    assert 0 < len(cut_engine.prompts) < len(full_engine.prompts)
    optimizer, w, engine = optimizer_and_world(tmp_path / "cut")
    resumed = optimizer.propose(w.context())
    assert [c.prompts for c in resumed] == [c.prompts for c in full] and full
    assert _table(resumed) == _table(full)
    # it continued where the cut run stopped: the reflections done before were not done again
    assert len(cut_engine.prompts) + len(engine.prompts) == len(full_engine.prompts)


def test_the_final_prompts_load_as_a_dspy_program_and_dspy_evaluate_gives_the_loops_test_numbers(tmp_path):
    w = World(n_conversations=4)
    lm, _ = reflection_lm(w.stage_rewrite())
    parts = split_by_conversation(sim_dataset(seed=0, n_conversations=4), (0.5, 0.25, 0.25), seed=0)
    loop = OptimizationLoop(
        w.system, w.judge, GepaOptimizer(lm, SMALL), parts,
        LoopSettings(max_iterations=1, workers=2), calls=w.ledger,
    )
    result = loop.run()
    assert result.final_prompts != result.start_prompts  # GEPA's candidate was accepted

    path = save_program_state(w.system, result.final_prompts, tmp_path / "program.json")
    program = MemoryProgram(Mem0Memory(HashingEmbedder()))
    program.load(str(path))  # as a DSPy user would: the state holds prompts, the LM is set after
    program.set_lm(w.lm)
    assert program.system.prompt_set() == result.final_prompts

    cases = LoopCaseRunner(w.judge, {"test": parts.test}, MemoryCache())
    program.cases = cases
    program.split_by_question = {q.id: "test" for q in parts.test.questions}
    evaluate = dspy.Evaluate(devset=question_examples(cases.questions("test")), metric=JudgeMetric(), num_threads=2)
    evaluated = evaluate(program)
    accuracy = result.test_final.report.overall.judge_accuracy
    scores = [float(score.score) for _, _, score in evaluated.results]
    assert sum(scores) / len(scores) == pytest.approx(accuracy, abs=1e-12)
    assert evaluated.score == round(100 * accuracy, 2)  # dspy.Evaluate's own (rounded) percentage


def test_one_gepa_run_spans_the_loop_iterations(tmp_path):
    w = World()
    lm, engine = reflection_lm(w.stage_rewrite())
    optimizer = GepaOptimizer(lm, SMALL, work_dir=tmp_path)
    first = optimizer.propose(w.context(iteration=1))
    reflections = len(engine.prompts)
    second = optimizer.propose(w.context(iteration=2))
    one = json.loads((tmp_path / "gepa" / "iteration-1-gepa_candidates.json").read_text())
    two = json.loads((tmp_path / "gepa" / "iteration-2-gepa_candidates.json").read_text())
    assert first and two["dev_score"][: len(one["dev_score"])] == one["dev_score"]  # the same pool, extended
    assert len(engine.prompts) > reflections  # it searched on, from where it stopped
    assert not {c.prompts.digest() for c in first} & {c.prompts.digest() for c in second}  # none sent twice
