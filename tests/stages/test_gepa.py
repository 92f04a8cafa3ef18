"""`optimizer=gepa` and `gepa_blame` on the simulated world: the program, the metric, the blame selector and
feedback, memory reuse. GEPA's searches (seeds, the call budget, resuming from its log_dir, the loop) are in
tests/e2e/test_gepa_loop.py.

The task LM and judge are the sim stand-in; GEPA's reflection LM is the scripted one of
tests/support/reflection.py (it completes a stage's instruction with the sim world's rules for that stage).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import dspy
import pytest
from memtrace_loop.memory_systems.mem0.system import Mem0Memory
from memtrace_loop.optimizers.feedback import feedback_for_attribution, feedback_for_other_stage
from memtrace_loop.optimizers.gepa import (
    BlameComponentSelector,
    BlameMetric,
    BlameSource,
)
from memtrace_loop.optimizers.gepa_program import JudgeMetric, question_examples
from memtrace_loop.pipeline.analysis.attribution.lineage import LineageAttributor

from tests.support.gepa_world import World


@pytest.fixture(scope="module")
def world() -> World:
    return World()


def _stage_ops(graph, stages) -> int:
    return sum(1 for op in graph.operations() if op.stage in stages and op.usage.calls)


def _made_calls(graph, stages) -> int:
    """The calls of `stages`' operations that reached the LM (not served by a cache or the run's replies)."""
    return sum(op.usage.calls - op.usage.cached_calls for op in graph.operations() if op.stage in stages)


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
    # answering and judging only (a judge request identical to the first one's is reused, not made)
    assert again.lm_calls_made == _made_calls(again.graph, {"respond", "judge"}) >= 1
    assert _stage_ops(again.graph, {"respond", "judge"}) == 2
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


