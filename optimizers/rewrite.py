"""Rewriting one stage's instruction from feedback, under a length budget (`InstructionRewriter`).

A draft over `length_budget` is sent back once for a shorter one, then rejected (never cut); every failure
is a `RewriteOutcome` with an error. `RewritingOptimizer.rewrite_stage` wraps a rewrite. It chooses no stages.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Self

import dspy
from memtrace_loop.optimizers.base import Candidate, OptimizerSetup
from memtrace_loop.optimizers.settings import DEFAULT_MAX_INSTRUCTION_CHARS, RewriteSettings
from memtrace_loop.pipeline.core.config import ConfigError
from memtrace_loop.pipeline.core.records import PromptSet

logger = logging.getLogger(__name__)

# An instruction that already starts longer than the budget (the real mem0's hooks are 4-5k characters) may
# grow by this much per rewrite instead of being refused every rewrite.
LONG_INSTRUCTION_GROWTH = 1000


def length_budget(current: str, max_chars: int) -> int:
    """The most characters a rewrite of `current` may have: `max_chars`, or, for an instruction already
    longer than that, its own length plus `LONG_INSTRUCTION_GROWTH`.

    >>> length_budget("x" * 300, 2000), length_budget("x" * 4200, 2000)
    (2000, 5200)
    """
    return max_chars if len(current) <= max_chars else len(current) + LONG_INSTRUCTION_GROWTH


class RewriteInstruction(dspy.Signature):
    """You improve the instruction (the prompt) of one stage of an LLM memory system that remembers
    long conversations and answers questions about them. You are given the stage's name, what it reads
    and writes, its current instruction, and feedback on failed questions that were traced back to
    this stage: each with the question, the gold answer, the system's answer, the error type at the
    blamed operation, and a diagnosis of what information was lost, where and why.

    Write the complete new instruction for this stage:
    - keep everything in the current instruction that still applies; do not drop working rules;
    - add general rules that would have prevented these kinds of failures, stated so they apply to
      any conversation; never copy case-specific names, facts, dates or answers from the feedback;
    - only address failures this stage can fix with its inputs and outputs;
    - do not change the stage's input or output format;
    - stay within max_chars characters; be concise and merge overlapping rules.
    Return only the instruction text, with no preamble or commentary."""

    stage_name: str = dspy.InputField(desc="the stage's name in the memory system")
    stage_signature: str = dspy.InputField(desc="what the stage reads and writes, as 'inputs -> outputs'")
    current_instruction: str = dspy.InputField(desc="the stage's instruction now")
    feedback: str = dspy.InputField(desc="failures attributed to this stage, with diagnoses")
    max_chars: int = dspy.InputField(desc="the most characters the new instruction may have")
    new_instruction: str = dspy.OutputField(desc="the complete improved instruction, plain text")


@dataclass(frozen=True)
class RewriteOutcome:
    """The result of one rewrite: the new instruction, or None with the error that prevented it."""

    instruction: str | None
    error: str | None = None
    length_retry: bool = False

    @property
    def ok(self) -> bool:
        return self.instruction is not None


def shorten_note(draft_chars: int, max_chars: int) -> str:
    """The note prepended to the feedback when a draft is over the length budget."""
    return (
        f"NOTE: the current instruction above is a draft of {draft_chars} characters, over the budget of "
        f"{max_chars} characters. Rewrite it to at most {max_chars} characters: keep every rule it states "
        "that addresses the failures below, merge overlapping rules and remove redundant wording."
    )


class InstructionRewriter:
    """Rewrites one stage's instruction with the rewriter LM, keeping it within `max_chars`."""

    def __init__(self, lm: dspy.BaseLM, max_chars: int = DEFAULT_MAX_INSTRUCTION_CHARS) -> None:
        if max_chars <= 0:
            raise ValueError(f"max_chars must be positive, got {max_chars}")
        self.lm = lm
        self.max_chars = max_chars

    def _draft(
        self, stage: str, signature: str, current: str, feedback: str, budget: int
    ) -> tuple[str | None, str | None]:
        """(instruction, None) or (None, error)."""
        try:
            prediction = dspy.Predict(RewriteInstruction)(
                lm=self.lm, stage_name=stage, stage_signature=signature, current_instruction=current, feedback=feedback,
                max_chars=budget,
            )
            text = str(prediction.new_instruction or "").strip()
        except Exception as exc:  # an LM, adapter or parse failure must not stop the loop
            logger.warning("rewrite of stage %s failed: %s: %s", stage, type(exc).__name__, exc)
            return None, f"{type(exc).__name__}: {' '.join(str(exc).split())[:500]}"
        if not text:
            return None, "the rewriter returned an empty instruction"
        return text, None

    def rewrite(self, stage: str, signature: str, current: str, feedback: str) -> RewriteOutcome:
        """A new instruction for `stage` from `feedback`, or an outcome with the error. Never raises."""
        budget = length_budget(current, self.max_chars)
        draft, error = self._draft(stage, signature, current, feedback, budget)
        if draft is None:
            return RewriteOutcome(None, error)
        if len(draft) <= budget:
            return RewriteOutcome(draft)
        note = shorten_note(len(draft), budget)
        shorter, error = self._draft(stage, signature, draft, f"{note}\n\n{feedback}", budget)
        if shorter is None:
            return RewriteOutcome(None, f"shortening an over-long draft failed: {error}", length_retry=True)
        if len(shorter) <= budget:
            return RewriteOutcome(shorter, length_retry=True)
        return RewriteOutcome(
            None, f"instruction over budget after one retry: {len(shorter)} > {budget} characters", length_retry=True,
        )


class RewritingOptimizer:
    """What the rewriting optimizers share: one rewriter, how many stages per iteration, a feedback budget, the
    system's stage signatures and knob fields (fixed at build), and one stage's rewrite as a candidate."""

    def __init__(
        self, rewriter: InstructionRewriter, top_stages: int = 2, max_feedback_chars: int = 4000,
        signature_by_stage: Mapping[str, str] | None = None,
        knob_fields_by_stage: Mapping[str, tuple[str, ...]] | None = None,
    ) -> None:
        if top_stages <= 0 or max_feedback_chars <= 0:
            raise ValueError("top_stages and max_feedback_chars must be positive")
        self.rewriter = rewriter
        self.top_stages = top_stages
        self.max_feedback_chars = max_feedback_chars
        # stage -> "inputs -> outputs" (what the rewriter is told each stage reads and writes)
        self.signature_by_stage: Mapping[str, str] = MappingProxyType(dict(signature_by_stage or {}))
        # the system's non-LLM construction stages -> their knob fields (`optimizers.knobs`)
        self.knob_fields_by_stage: Mapping[str, tuple[str, ...]] = MappingProxyType(dict(knob_fields_by_stage or {}))

    @classmethod
    def from_setup(cls, name: str, setup: OptimizerSetup) -> Self:
        """The optimizer from its `RewriteSettings`, rewriter LM and system (a missing LM is a ConfigError)."""
        settings: RewriteSettings = setup.settings
        if setup.rewriter_lm is None:
            raise ConfigError(f"optimizer {name!r} needs a rewriter LM")
        rewriter = InstructionRewriter(setup.rewriter_lm, max_chars=settings.max_instruction_chars)
        return cls(
            rewriter, settings.top_stages, settings.max_feedback_chars, setup.signature_by_stage,
            setup.knob_fields_by_stage,
        )

    def rewrite_stage(
        self, prompts: PromptSet, stage: str, feedback: str, why: str, note: str = ""
    ) -> Candidate | None:
        """`prompts` with `stage` rewritten from `feedback`, or None (logged) when the rewrite failed or changed
        nothing but whitespace; the rationale is `why`, the length change ("412 -> 598 chars", plus a note when
        the budget forced a second draft), then `note`."""
        current = prompts[stage]
        outcome = self.rewriter.rewrite(stage, self.signature_by_stage.get(stage, ""), current, feedback)
        if outcome.instruction is None or outcome.instruction.split() == current.split():
            logger.info("no candidate for stage %s: %s", stage, outcome.error or "the rewrite changed nothing")
            return None
        shortened = ", shortened to fit the length budget" if outcome.length_retry else ""
        length = f"{len(current)} -> {len(outcome.instruction)} chars{shortened}"
        return Candidate(
            prompts=prompts.with_instruction(stage, outcome.instruction), changed_stages=(stage,),
            rationale=f"{why} ({length}). {note}".strip(),
            feedback_by_stage=MappingProxyType({stage: feedback}),
        )
