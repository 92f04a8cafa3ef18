"""Optimizers: feedback text and folding, the rewriter's length control, the attribution-guided and
uniform optimizers on the sim LM, the no-op baseline and the registry. Fixtures are built by hand."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import replace
from pathlib import Path

import dspy
import pytest
from dspy.utils import DummyLM
from memtrace_loop.conf import compared
from memtrace_loop.memory_systems.mem0.system import Mem0Memory
from memtrace_loop.memory_systems.signatures import AnswerQuestion, DecideUpdates, ExtractFacts
from memtrace_loop.optimizers.attribution_guided import AttributionGuidedOptimizer
from memtrace_loop.optimizers.base import OptimizationContext, OptimizerSpec, stage_signatures
from memtrace_loop.optimizers.feedback import (
    NO_ATTRIBUTION_DIAGNOSIS,
    OTHER_STAGE_DIAGNOSIS,
    feedback_for_attribution,
    feedback_for_other_stage,
    feedback_without_attribution,
    fold_feedback,
)
from memtrace_loop.optimizers.gepa import GepaBlameOptimizer
from memtrace_loop.optimizers.registry import OPTIMIZERS, NoOptimizer, build_optimizer
from memtrace_loop.optimizers.rewrite import (
    LONG_INSTRUCTION_GROWTH,
    InstructionRewriter,
    RewriteOutcome,
    length_budget,
)
from memtrace_loop.optimizers.uniform import UniformBlameOptimizer, UniformReasonsOptimizer, rotated
from memtrace_loop.pipeline.analysis.attribution.lineage import LineageAttributor
from memtrace_loop.pipeline.analysis.attribution.records import Attribution, Check, ErrorType, Fault, Tunable
from memtrace_loop.pipeline.analysis.blame import aggregate_blame
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.core.records import CaseResult, PromptSet, Question, Scores
from memtrace_loop.pipeline.sim.rules import rules_in

from tests.support.sim import sim_lm as stand_in_lm

PROMPTS = PromptSet(
    {"extract": ExtractFacts.instructions, "decide": DecideUpdates.instructions, "respond": AnswerQuestion.instructions}
)
SIGNATURES = {
    "extract": "turn -> facts",
    "decide": "existing_memories, new_facts -> actions",
    "respond": "context, question -> answer",
}
DATE_REASON = "turn D1:{n} says 'last Saturday' but facts:D1:{n}@1 lost the date, so memory never held when it was."


def case(qid: str, text: str = "When did Alice go hiking?", gold: str = "6 May 2023") -> CaseResult:
    return CaseResult(Question(qid, "c1", text, gold, 2), "Alice went hiking.", "WRONG", Scores(0.0, 0.2, 0.1))


def attribution(
    qid: str,
    stage: str,
    error: ErrorType,
    reason: str,
    op_name: str = "extract_facts",
    tunable: str = "prompt",
    confidence: float = 0.8,
    verified: bool | None = None,
) -> Attribution:
    return Attribution(
        case=case(qid), op=f"op{qid}", op_name=op_name, stage=stage, error_type=error, reason=reason,
        confidence=confidence, method="lineage", tunable=Tunable(tunable), check=Check.of(verified),
    )


def rewriter_of(lm: dspy.LM) -> InstructionRewriter:
    return InstructionRewriter(lm, 2000)


@pytest.fixture(scope="module")
def sim_lm() -> dspy.LM:
    return stand_in_lm()


def context(attributions: list[Attribution], iteration: int = 0, prompts: PromptSet = PROMPTS) -> OptimizationContext:
    return OptimizationContext(
        iteration=iteration,
        prompts=prompts,
        blame=aggregate_blame(attributions),
        attributions=tuple(attributions),
        failures=tuple(a.case for a in attributions),
    )


# ---------------------------------------------------------------------------------------------- feedback


def test_attributed_block_has_every_part() -> None:
    item = attribution("q1", "extract", ErrorType.EXTRACTION, "lost the\n  date of\tthe hike", verified=True)
    text = feedback_for_attribution(item).render()
    assert text.splitlines() == [
        "Question: When did Alice go hiking?",
        "Gold answer: 6 May 2023",
        "System answered: Alice went hiking.",
        "Category: 2 (temporal)",
        "Error: ExtractionError at operation extract_facts (confirmed by replay)",
        "Diagnosis: lost the date of the hike",
    ]


def test_joint_block_names_the_operations_in_order_and_single_causes_keep_their_text() -> None:
    single = attribution("q1", "extract", ErrorType.EXTRACTION, "lost the date", verified=True)
    joint = replace(
        single,
        check=Check.VERIFIED,
        joint=(
            Fault("op1", "extract_facts", "extract", ErrorType.EXTRACTION, Tunable.PROMPT, "lost the date"),
            Fault("op7", "decide_updates", "decide", ErrorType.UPDATE, Tunable.PROMPT, "overwrote the date"),
        ),
    )
    lines = feedback_for_attribution(joint).render().splitlines()
    assert lines[5] == (
        "Joint cause: no single repair rescued this case; these operations needed repair together: "
        "extract_facts (extract), then decide_updates (decide)"
    )
    assert lines[:5] + lines[6:] == feedback_for_attribution(single).render().splitlines()
    assert feedback_for_attribution(single).render() == "\n".join(
        [
            "Question: When did Alice go hiking?",
            "Gold answer: 6 May 2023",
            "System answered: Alice went hiking.",
            "Category: 2 (temporal)",
            "Error: ExtractionError at operation extract_facts (confirmed by replay)",
            "Diagnosis: lost the date",
        ]
    )


def test_unattributed_block_blames_nothing() -> None:
    text = feedback_without_attribution(case("q1")).render()
    assert text.splitlines()[-1] == (
        "Diagnosis: the final answer was wrong; no attribution was made, so this failure is sent to every stage."
    )
    assert "Error: Unattributed (no operation blamed)" in text
    assert "Category: 2 (temporal)" in text
    assert NO_ATTRIBUTION_DIAGNOSIS in text


def test_other_stage_block_keeps_the_facts_and_says_the_failure_was_elsewhere() -> None:
    item = attribution("q1", "extract", ErrorType.EXTRACTION, "lost the date", verified=True)
    text = feedback_for_other_stage(item).render()
    assert OTHER_STAGE_DIAGNOSIS.format(stage="extract") in text
    assert "lost the date" not in text and "Gold answer: 6 May 2023" in text and "Category: 2" in text


def many_blocks() -> list:
    items = [attribution(f"e{i:02d}", "extract", ErrorType.EXTRACTION, DATE_REASON.format(n=i)) for i in range(9)]
    items += [
        attribution(f"u{i}", "decide", ErrorType.UPDATE, "kept the old value", op_name="decide_updates")
        for i in range(3)
    ]
    return [feedback_for_attribution(a) for a in items]


def test_fold_counts_the_rest_and_groups_largest_first() -> None:
    text = fold_feedback(many_blocks(), 4000, per_type=2)
    assert text.startswith("ExtractionError (9 failures):")
    assert text.index("ExtractionError (9 failures):") < text.index("UpdateError (3 failures):")
    assert "... and 7 more ExtractionError cases like these." in text
    assert "... and 1 more UpdateError case like these." in text
    assert text.count("Question:") == 4
    assert len(text) <= 4000


@pytest.mark.parametrize("budget", [30, 120, 400, 900, 1500, 4000])
def test_fold_never_exceeds_the_budget(budget: int) -> None:
    text = fold_feedback(many_blocks(), budget)
    assert 0 < len(text) <= budget
    assert "ExtractionError" in text


def test_fold_is_deterministic_and_prefers_verified_then_confident() -> None:
    items = [
        attribution("q1", "extract", ErrorType.EXTRACTION, "the date was lost", confidence=0.9),
        attribution("q2", "extract", ErrorType.EXTRACTION, "the date was lost", confidence=0.5, verified=True),
        attribution("q3", "extract", ErrorType.EXTRACTION, "the date was lost", confidence=0.99, verified=False),
    ]
    blocks = [feedback_for_attribution(a) for a in items]
    shuffled = blocks[:]
    random.Random(3).shuffle(shuffled)
    text = fold_feedback(blocks, 4000, per_type=1)
    assert text == fold_feedback(shuffled, 4000, per_type=1)
    assert "(confirmed by replay)" in text and text.count("Question:") == 1


def test_fold_keeps_different_diagnoses_over_repeats() -> None:
    items = [attribution(f"d{i}", "extract", ErrorType.EXTRACTION, "the relative date was lost") for i in range(4)]
    items.append(attribution("z9", "extract", ErrorType.EXTRACTION, "facts about her sister were skipped"))
    text = fold_feedback([feedback_for_attribution(a) for a in items], 4000, per_type=2)
    assert "sister" in text and "... and 3 more ExtractionError cases like these." in text


def test_fold_edge_cases() -> None:
    assert fold_feedback([], 100) == ""
    with pytest.raises(ValueError):
        fold_feedback(many_blocks(), 0)


# ---------------------------------------------------------------------------------------------- rewriter


@pytest.mark.usefixtures("lm_history")  # reads `lm.history` (off in the test session)
def test_length_retry_then_short_enough() -> None:
    lm = DummyLM([{"new_instruction": "x " * 40}, {"new_instruction": "Keep dates."}])
    outcome = InstructionRewriter(lm, max_chars=30).rewrite("extract", "turn -> facts", "Extract.", "fb")
    assert outcome == RewriteOutcome("Keep dates.", None, length_retry=True)
    second = lm.history[-1]["messages"][-1]["content"]
    assert "x x x" in second.split("[[ ## current_instruction ## ]]")[1].split("[[ ## feedback ## ]]")[0]
    assert "over the budget of 30 characters" in second


def test_length_retry_still_too_long_is_rejected() -> None:
    lm = DummyLM([{"new_instruction": "a" * 50}, {"new_instruction": "b" * 40}])
    outcome = InstructionRewriter(lm, max_chars=30).rewrite("extract", "turn -> facts", "Extract.", "fb")
    assert outcome.instruction is None and outcome.length_retry
    assert "40 > 30" in outcome.error


def test_an_instruction_already_over_the_budget_may_grow_by_a_bounded_amount() -> None:
    """A library's own long prompt (the real mem0's hooks are 4-5k characters) is not refused at every
    rewrite: its budget is its own length plus LONG_INSTRUCTION_GROWTH; short ones keep `max_chars`."""
    long_current = "Extract facts. " * 300  # 4500 characters, over the 2000 default
    grown = long_current + "Resolve relative dates to absolute dates."
    lm = DummyLM([{"new_instruction": grown}])
    assert InstructionRewriter(lm, 2000).rewrite("s", "a -> b", long_current, "fb") == RewriteOutcome(grown.strip())
    too_long = DummyLM([{"new_instruction": long_current + "y" * 1100}] * 2)
    refused = InstructionRewriter(too_long, 2000).rewrite("s", "a -> b", long_current, "fb")
    assert refused.instruction is None and f"> {len(long_current) + LONG_INSTRUCTION_GROWTH}" in refused.error
    assert length_budget("short", 2000) == 2000


def test_short_first_draft_needs_no_retry() -> None:
    lm = DummyLM([{"new_instruction": "  Keep dates.  "}])
    assert InstructionRewriter(lm, 30).rewrite("s", "a -> b", "x", "fb") == RewriteOutcome("Keep dates.")


def test_lm_failures_become_errors() -> None:
    exhausted = InstructionRewriter(DummyLM([]), 30).rewrite("s", "a -> b", "x", "fb")
    assert exhausted.instruction is None and exhausted.error
    empty = InstructionRewriter(DummyLM([{"new_instruction": "   "}]), 30).rewrite("s", "a -> b", "x", "fb")
    assert empty.instruction is None and "empty" in empty.error
    with pytest.raises(ValueError):
        InstructionRewriter(DummyLM([]), 0)


# ---------------------------------------------------------------------------------------------- optimizers


def blamed() -> list[Attribution]:
    extract = [attribution(f"e{i}", "extract", ErrorType.EXTRACTION, DATE_REASON.format(n=i)) for i in range(4)]
    knobs = [
        attribution(f"r{i}", "retrieve", ErrorType.RETRIEVAL, "the memory ranked 14th", "retrieve_memories", "knobs")
        for i in range(3)
    ]
    decide = [
        attribution(f"u{i}", "decide", ErrorType.UPDATE, "kept the old value after Bob's new job", "decide_updates")
        for i in range(2)
    ]
    answer = [attribution("a0", "respond", ErrorType.RESPONSE, "answered without the date", "question_answering")]
    other = [attribution("s0", "summarize", ErrorType.EXTRACTION, "dropped the date", "summarize")]
    return extract + knobs + decide + answer + other


def test_attribution_optimizer_rewrites_prompt_stages_in_blame_order(sim_lm: dspy.LM) -> None:
    optimizer = AttributionGuidedOptimizer(rewriter_of(sim_lm), top_stages=2, signature_by_stage=SIGNATURES)
    ctx = context(blamed())
    assert optimizer.target_stages(ctx) == ("extract", "decide")
    candidates = optimizer.propose(ctx)
    assert [c.changed_stages for c in candidates] == [("extract",), ("decide",)]
    for candidate, rule in zip(candidates, ("resolve_dates", "newest_wins"), strict=True):
        (stage,) = candidate.changed_stages
        differing = [s for s in PROMPTS.stages() if candidate.prompts[s] != PROMPTS[s]]
        assert differing == [stage]
        assert rule in rules_in(candidate.prompts[stage])
        assert "retrieve" in candidate.rationale and "knobs" in candidate.rationale
        assert "summarize" in candidate.rationale
        assert "Diagnosis:" in candidate.feedback_by_stage[stage]
    assert "ExtractionError" in candidates[0].feedback_by_stage["extract"]
    assert "UpdateError" not in candidates[0].feedback_by_stage["extract"]


def test_attribution_optimizer_ignores_stages_without_a_prompt(sim_lm: dspy.LM) -> None:
    items = [attribution(f"s{i}", "summarize", ErrorType.EXTRACTION, "dropped the date", "summarize") for i in range(5)]
    items += blamed()
    optimizer = AttributionGuidedOptimizer(rewriter_of(sim_lm), top_stages=1, signature_by_stage=SIGNATURES)
    ctx = context(items)
    assert ctx.blame.prompt_stages()[0] == "summarize"
    assert optimizer.target_stages(ctx) == ("extract",)
    assert [c.changed_stages for c in optimizer.propose(ctx)] == [("extract",)]


def test_attribution_optimizer_skips_unchanged_rewrites(sim_lm: dspy.LM) -> None:
    unexplained = CaseResult(Question("a0", "c1", "Where does Alice work?", "Acme", 4), "Acme Corp", "WRONG",
                             Scores(0.0, 0.5, 0.5))  # no symptom any rule explains
    items = [replace(attribution("a0", "respond", ErrorType.RESPONSE, "the answer was unrelated", "question_answering"),
                     case=unexplained)]
    optimizer = AttributionGuidedOptimizer(rewriter_of(sim_lm), top_stages=3, signature_by_stage=SIGNATURES)
    assert optimizer.propose(context(items)) == []


class RecordingRewriter(InstructionRewriter):
    """Appends a marker and remembers which stages it was asked to rewrite and with what feedback."""

    def __init__(self) -> None:
        super().__init__(DummyLM([]), 2000)
        self.calls: list[tuple[str, str]] = []

    def rewrite(self, stage: str, signature: str, current: str, feedback: str) -> RewriteOutcome:
        self.calls.append((stage, feedback))
        return RewriteOutcome(current + " Be careful.")


def test_uniform_rotates_through_stages_and_sends_the_same_feedback() -> None:
    rewriter = RecordingRewriter()
    optimizer = UniformBlameOptimizer(rewriter, top_stages=2, signature_by_stage=SIGNATURES)
    seen = []
    for iteration in range(3):
        candidates = optimizer.propose(context(blamed(), iteration=iteration))
        seen.append(tuple(c.changed_stages[0] for c in candidates))
        assert all(len(c.changed_stages) == 1 for c in candidates)
    assert seen == [("decide", "extract"), ("respond", "decide"), ("extract", "respond")]
    feedbacks = {feedback for _, feedback in rewriter.calls}
    assert len(feedbacks) == 1
    (feedback,) = feedbacks
    assert NO_ATTRIBUTION_DIAGNOSIS in feedback and "lost the date" not in feedback
    assert "Unattributed (11 failures)" in feedback


def test_uniform_on_the_sim_world_guesses_from_symptoms_misfire_included(sim_lm: dspy.LM) -> None:
    """Every failure is a "when" question answered without a date: from the symptoms alone the rewriter
    adds the date rule of each stage that has one, and on the answer stage also the misfire
    `one_answer` (the answers were longer than the gold); the update stage has no date rule."""
    optimizer = UniformBlameOptimizer(rewriter_of(sim_lm), top_stages=3, signature_by_stage=SIGNATURES)
    candidates = optimizer.propose(context(blamed()))
    added = {c.changed_stages[0]: rules_in(c.prompts[c.changed_stages[0]]) for c in candidates}
    assert added == {"extract": {"resolve_dates"}, "respond": {"use_dates", "one_answer"}}


def test_uniform_reasons_rotates_like_uniform_with_the_attributed_feedback() -> None:
    uniform_rewriter, reasons_rewriter = RecordingRewriter(), RecordingRewriter()
    uniform = UniformBlameOptimizer(uniform_rewriter, top_stages=2, signature_by_stage=SIGNATURES)
    reasons = UniformReasonsOptimizer(reasons_rewriter, top_stages=2, signature_by_stage=SIGNATURES)
    for iteration in range(3):
        ctx = context(blamed(), iteration=iteration)
        assert [c.changed_stages for c in reasons.propose(ctx)] == [c.changed_stages for c in uniform.propose(ctx)]
    assert [stage for stage, _ in reasons_rewriter.calls] == [stage for stage, _ in uniform_rewriter.calls]
    (feedback,) = {feedback for _, feedback in reasons_rewriter.calls}
    assert "lost the date" in feedback and "kept the old value" in feedback  # the attributor's reasons
    assert NO_ATTRIBUTION_DIAGNOSIS not in feedback and "Unattributed" not in feedback
    assert feedback == fold_feedback([feedback_for_attribution(a) for a in blamed()], 4000)


def test_uniform_reasons_on_the_sim_world_narrows_by_the_attribution(sim_lm: dspy.LM) -> None:
    """The same reasons as attribution, sent to every stage: each stage takes only the guesses its own
    error types support, so the update stage gets the newest-value rule and the answer stage no misfire."""
    optimizer = UniformReasonsOptimizer(rewriter_of(sim_lm), top_stages=3, signature_by_stage=SIGNATURES)
    candidates = optimizer.propose(context(blamed()))
    added = {c.changed_stages[0]: rules_in(c.prompts[c.changed_stages[0]]) for c in candidates}
    assert added == {"extract": {"resolve_dates"}, "decide": {"newest_wins"}, "respond": {"use_dates"}}


def test_rotated() -> None:
    assert rotated(("a", "b", "c"), 0, 2) == ("a", "b")
    assert rotated(("a", "b", "c"), 1, 2) == ("c", "a")
    assert rotated(("a", "b"), 5, 4) == ("a", "b")
    assert rotated((), 1, 2) == ()


def test_none_proposes_nothing() -> None:
    assert list(NoOptimizer().propose(context(blamed()))) == []
    assert NoOptimizer().name == "none"


# ---------------------------------------------------------------------------------------------- registry


def test_registry_builds_each_optimizer(sim_lm: dspy.LM) -> None:
    attribution_opt = build_optimizer("attribution", sim_lm, {"top_stages": 3, "max_instruction_chars": 900})
    assert isinstance(attribution_opt, AttributionGuidedOptimizer) and attribution_opt.name == "attribution"
    assert attribution_opt.top_stages == 3 and attribution_opt.rewriter.max_chars == 900
    uniform_opt = build_optimizer("uniform", sim_lm, {"name": "uniform"})
    assert isinstance(uniform_opt, UniformBlameOptimizer) and uniform_opt.max_feedback_chars == 4000
    reasons_opt = build_optimizer("uniform_reasons", sim_lm, {"name": "uniform_reasons", "top_stages": 2})
    assert isinstance(reasons_opt, UniformReasonsOptimizer) and reasons_opt.name == "uniform_reasons"
    assert reasons_opt.top_stages == 2
    assert isinstance(build_optimizer("none", None, {}), NoOptimizer)


def test_registry_errors(sim_lm: dspy.LM) -> None:
    with pytest.raises(ValueError, match=r"unknown optimizer 'mipro'.*attribution.*uniform.*gepa.*none"):
        build_optimizer("mipro", sim_lm, {})
    with pytest.raises(ValueError, match="needs a rewriter LM"):
        build_optimizer("gepa_blame", None, {})
    with pytest.raises(ValueError, match="max_metric_calls"):
        build_optimizer("gepa", sim_lm, {"max_metric_calls": 0})
    with pytest.raises(ValueError, match="unknown keys"):
        build_optimizer("attribution", sim_lm, {"topstages": 2})
    with pytest.raises(ValueError, match="positive integer"):
        build_optimizer("uniform", sim_lm, {"top_stages": 0})
    with pytest.raises(ValueError, match="needs a rewriter LM"):
        build_optimizer("attribution", None, {})


def test_every_optimizer_module_exports_its_spec_and_the_sweep_is_generated_from_them() -> None:
    for name, spec in OPTIMIZERS.items():
        assert isinstance(spec, OptimizerSpec), name
        assert dataclasses.is_dataclass(spec.schema), name
    assert OPTIMIZERS.compared() == OPTIMIZERS.names  # every optimizer of today is compared
    assert compared("optimizer") == ",".join(OPTIMIZERS.compared())  # ${memtrace.compared:optimizer}
    with pytest.raises(ValueError, match="no registry for group"):
        compared("nothing")


def test_what_is_fixed_is_given_once_at_build(sim_lm: dspy.LM, tmp_path: Path) -> None:
    system = Mem0Memory(HashingEmbedder())
    optimizer = build_optimizer("attribution", sim_lm, {}, system=system)
    assert isinstance(optimizer, AttributionGuidedOptimizer)
    assert dict(optimizer.signature_by_stage) == dict(stage_signatures(system))
    assert "extract" in optimizer.signature_by_stage and "->" in optimizer.signature_by_stage["extract"]
    assert optimizer.knob_fields_by_stage == system.knob_fields_by_stage
    attributor = LineageAttributor()
    gepa = build_optimizer("gepa_blame", sim_lm, {}, attributor=attributor, work_dir=tmp_path)
    assert isinstance(gepa, GepaBlameOptimizer) and gepa.attributor is attributor
    assert gepa.log_dir() == tmp_path / "gepa_blame"
