"""`optimizer=gepa` and `gepa_blame` on the simulated world: the program, the metric, the blame selector and
feedback, memory reuse, seeds, resuming from GEPA's log_dir, and the call budget.

The task LM and judge are the sim stand-in; GEPA's reflection LM is the scripted one of
tests/support/reflection.py (it completes a stage's instruction with the sim world's rules for that stage).
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import dspy
import pytest
from memtrace_loop.memory_systems.mem0.system import Mem0Memory
from memtrace_loop.optimizers.base import OptimizationContext
from memtrace_loop.optimizers.feedback import feedback_for_attribution, feedback_for_other_stage
from memtrace_loop.optimizers.gepa import TABLE_FILE, GepaOptimizer, Settings
from memtrace_loop.optimizers.gepa_blame import (
    BlameComponentSelector,
    BlameMetric,
    BlameSource,
    GepaBlameOptimizer,
)
from memtrace_loop.optimizers.gepa_program import JudgeMetric, MemoryProgram, question_examples, save_program_state
from memtrace_loop.pipeline.analysis.attribution.lineage import LineageAttributor
from memtrace_loop.pipeline.analysis.blame import BlameTable
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.backends.registry import backend_test_world
from memtrace_loop.pipeline.data.locomo import split_by_conversation
from memtrace_loop.pipeline.loop.case_runner import LoopCaseRunner
from memtrace_loop.pipeline.loop.memory_cache import MemoryCache
from memtrace_loop.pipeline.loop.optimization import LoopSettings, OptimizationLoop, Splits
from memtrace_loop.pipeline.loop.runner import make_judge

from tests.support.reflection import reflection_lm
from tests.support.sim import sim_dataset, sim_lm

SMALL = Settings(max_metric_calls=100, num_threads=2, reflection_minibatch_size=3)


class CaseEvaluator:
    """The per-question half of the loop's `Evaluator` over a world (GEPA scores only per question)."""

    def __init__(self, world: World) -> None:
        self.world = world

    def evaluate(self, prompts, split="train", question_ids=None):
        raise NotImplementedError("GEPA scores per question")

    def questions(self, split):
        return self.world.cases.questions(split)

    def system(self, prompts):
        return self.world.system.with_prompts(prompts)

    def run_case(self, system, split, question_id):
        return self.world.cases.run_case(system, split, question_id)


class World:
    """A mem0 system on the stand-in, its train/dev split, and a case runner with a call counter."""

    def __init__(self, n_conversations: int = 4) -> None:
        self.lm = sim_lm()
        self.system = Mem0Memory(HashingEmbedder())
        self.system.set_lm(self.lm)
        self.judge = make_judge(self.lm)
        parts = split_by_conversation(sim_dataset(seed=0, n_conversations=n_conversations), (0.5, 0.25, 0.25), seed=0)
        self.train, self.dev = parts.train, parts.dev
        self.cache = MemoryCache()
        self.calls = 0
        self._lock = threading.Lock()
        self.cases = LoopCaseRunner(self.judge, {"train": self.train, "dev": self.dev}, self.cache, (5,), self._count)

    def _count(self, n: int) -> None:
        with self._lock:
            self.calls += n

    def program(self, system=None) -> MemoryProgram:
        split = {q.id: "train" for q in self.train.questions} | {q.id: "dev" for q in self.dev.questions}
        return MemoryProgram(system or self.system, self.cases, split)

    def perfect(self, stage: str) -> str:
        predictor = dict(self.system.named_predictors())[stage]
        signature = predictor.signature
        return backend_test_world().perfect_instruction(signature.instructions, signature.output_fields)

    def context(self, iteration: int = 1, budget=None) -> OptimizationContext:
        return OptimizationContext(
            iteration, self.system.prompt_set(), BlameTable(), (), (), evaluator=CaseEvaluator(self), budget=budget
        )

    def stage_rewrite(self):
        """A reflection that completes whichever stage's default instruction it is shown with its sim rules."""
        predictors = self.system.named_predictors()
        perfect_by_default = {p.signature.instructions.strip(): self.perfect(n) for n, p in predictors}
        return lambda current, _prompt: perfect_by_default.get(current.strip(), current + " Be precise.")


@pytest.fixture(scope="module")
def world() -> World:
    return World()


def _stage_ops(graph, stages) -> int:
    return sum(1 for op in graph.operations() if op.stage in stages and op.usage.calls)


def test_the_programs_components_are_the_systems_stage_prompts(world):
    program = world.program()
    components = {name: p.signature.instructions for name, p in program.named_predictors()}
    assert components == dict(world.system.prompt_set().instruction_by_stage)
    copy = program.deepcopy()  # what GEPA's build_program mutates: the original stays as it was
    dict(copy.named_predictors())["respond"].signature = (
        dict(copy.named_predictors())["respond"].signature.with_instructions("changed")
    )
    assert program.system.prompt_set() == world.system.prompt_set()
    assert copy.system.prompt_set()["respond"] == "changed"


def test_an_answer_only_candidate_reanswers_without_reingesting():
    w = World()
    question = next(q for q in w.train.questions if q.category != 5)
    first = w.program()(question_id=question.id, question=question.text).traced
    assert not first.memory_reused and first.lm_calls_made > 10  # the conversation was ingested
    answer_only = w.system.with_prompts(w.system.prompt_set().with_instruction("respond", w.perfect("respond")))
    again = w.program(answer_only)(question_id=question.id, question=question.text).traced
    assert again.memory_reused
    assert again.lm_calls_made == _stage_ops(again.graph, {"respond", "judge"})  # answering and judging only
    assert again.lm_calls_made <= 2
    new_extract = w.system.with_prompts(w.system.prompt_set().with_instruction("extract", w.perfect("extract")))
    rebuilt = w.program(new_extract)(question_id=question.id, question=question.text).traced
    assert not rebuilt.memory_reused and rebuilt.lm_calls_made > 10


def test_one_conversation_is_ingested_once_by_parallel_questions_and_the_trace_has_its_construction():
    w = World()
    conversation = w.train.conversations[0].id
    questions = [q for q in w.train.questions if q.conversation_id == conversation][:6]
    program = w.program()

    def run(q):
        with dspy.context(trace=[]):
            pred = program(question_id=q.id, question=q.text)
            return pred.traced, [name for name, p in program.named_predictors() for t in dspy.settings.trace
                                 if t[0] is p]

    with ThreadPoolExecutor(4) as pool:
        outcomes = list(pool.map(run, questions))
    assert w.cache.stats().misses == 1 and w.cache.stats().hits == len(questions) - 1
    assert sum(not traced.memory_reused for traced, _ in outcomes) == 1
    for traced, stages in outcomes:  # built or reused: the construction calls are in every trace
        assert stages.count("extract") == len(traced.conversation.turns)
        assert "decide" in stages and stages[-1] == "respond"


def test_the_metric_score_is_the_judges_and_its_feedback_holds_the_gold(world):
    program, metric = world.program(), JudgeMetric()
    seen = set()
    for question in world.train.questions[:12]:
        example = question_examples([question])[0]
        pred = program(**example.inputs())
        out = metric(example, pred, None, None, None)
        assert out.score == pred.traced.case.scores.judge
        assert f"Gold answer: {question.gold}" in out.feedback and "Diagnosis: the judge graded" in out.feedback
        assert ("CORRECT" in out.feedback) == pred.traced.case.correct
        seen.add(out.score)
    assert seen == {0.0, 1.0}


def _known_cause_world(stage: str) -> tuple[World, Mem0Memory]:
    """Every stage complete except `stage`: the sim world plants every failure at `stage`."""
    w = World()
    prompts = w.system.prompt_set()
    for other in prompts.stages():
        if other != stage:
            prompts = prompts.with_instruction(other, w.perfect(other))
    return w, w.system.with_prompts(prompts)


@pytest.mark.parametrize("stage", ["decide", "respond"])
def test_the_blame_selector_picks_the_stage_that_caused_the_failures(stage):
    w, system = _known_cause_world(stage)
    program = w.program(system)
    preds = [program(**e.inputs()) for e in question_examples(w.cases.questions("train"))]
    failed = [{"prediction": p, "score": 0.0} for p in preds if not p.traced.case.correct]
    assert len(failed) >= 3
    selector = BlameComponentSelector(BlameSource(LineageAttributor()))
    candidate = dict(system.prompt_set().instruction_by_stage)
    assert selector(None, failed, [0.0] * len(failed), 0, candidate) == [stage]  # round robin would say extract
    assert selector.choices == [(stage, "blame")]


def test_gepa_blame_tells_other_stages_the_failure_was_not_theirs():
    w, system = _known_cause_world("respond")
    program = w.program(system)
    source = BlameSource(LineageAttributor())
    metric = BlameMetric(source)
    checked = 0
    for example in question_examples(w.cases.questions("train")):
        pred = program(**example.inputs())
        attribution = source.attribution(pred)
        if attribution is None or attribution.stage != "respond":
            continue
        blamed = metric(example, pred, None, "respond", None)
        other = metric(example, pred, None, "extract", None)
        assert blamed.feedback == feedback_for_attribution(attribution).render()
        assert other.feedback == feedback_for_other_stage(attribution).render()
        assert "traced to another stage, not this one: respond" in other.feedback
        assert f"Gold answer: {example.gold}" in other.feedback
        assert blamed.score == other.score == pred.traced.case.scores.judge
        checked += 1
    assert checked >= 2


def _table(candidates) -> dict:
    return dict(candidates[0].tables[TABLE_FILE]) if candidates else {}


@pytest.mark.slow
def test_a_seed_gives_the_same_candidates(tmp_path):
    def once(name: str):
        w = World()
        lm, _ = reflection_lm(w.stage_rewrite())
        optimizer = GepaBlameOptimizer(lm, SMALL, LineageAttributor(), tmp_path / name)
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


@pytest.mark.slow
def test_gepa_stops_at_the_call_budget(tmp_path):
    w = World()
    lm, engine = reflection_lm(w.stage_rewrite())
    optimizer = GepaOptimizer(lm, replace(SMALL, max_metric_calls=400))
    budget = CountdownBudget(w, 0)
    optimizer.propose(w.context(budget=budget))  # nothing left: GEPA does not start
    assert w.calls == 0 and not engine.prompts
    w2 = World()
    unlimited = GepaOptimizer(lm, replace(SMALL, max_metric_calls=400)).propose(w2.context())
    budget = CountdownBudget(w, w2.calls // 3)
    capped = optimizer.propose(w.context(budget=budget))
    assert budget.remaining() <= 0  # it ran up to the budget ...
    assert w.calls < w2.calls  # ... and stopped there, unlike the unlimited run
    assert len(_table(capped).get("candidate", [])) <= len(_table(unlimited).get("candidate", []))


@pytest.mark.slow
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


@pytest.mark.slow
def test_the_final_prompts_load_as_a_dspy_program_and_dspy_evaluate_gives_the_loops_test_numbers(tmp_path):
    w = World(n_conversations=4)
    lm, _ = reflection_lm(w.stage_rewrite())
    parts = split_by_conversation(sim_dataset(seed=0, n_conversations=4), (0.5, 0.25, 0.25), seed=0)
    loop = OptimizationLoop(
        w.system, w.judge, GepaOptimizer(lm, SMALL), Splits(parts.train, parts.dev, parts.test),
        LoopSettings(max_iterations=1, workers=2),
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


@pytest.mark.slow
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
