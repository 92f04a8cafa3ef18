"""Feedback text for one stage's rewriter, built from attributed failures.

`feedback_for_attribution`, `feedback_without_attribution` (the baselines'), `feedback_for_other_stage`, and
`fold_feedback` (grouped by error type, representative blocks kept, the rest counted, under `max_chars`).
Pure functions; no LM, no choice of stages.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType

from memtrace_loop.pipeline.analysis.attribution.records import Attribution, Check
from memtrace_loop.pipeline.backends.text import long_letter_words
from memtrace_loop.pipeline.core.records import CaseResult

DIAGNOSIS_LABEL = "Diagnosis:"
ALTERNATIVES_LABEL = "Also rescued alone by repairing:"
# what a block says of the blamed operation after a replay check (nothing when unchecked)
CHECK_SUFFIX = MappingProxyType({
    Check.VERIFIED.value: " (confirmed by replay)",
    Check.REFUTED.value: " (not confirmed by replay)",
    Check.UNVERIFIABLE.value: " (unverifiable: no repair but the gold answer exists)",
})
JOINT_LABEL = "Joint cause: no single repair rescued this case; these operations needed repair together:"
UNATTRIBUTED = "Unattributed"
NO_ATTRIBUTION_DIAGNOSIS = (
    "the final answer was wrong; no attribution was made, so this failure is sent to every stage."
)
OTHER_STAGE_DIAGNOSIS = (  # the simulated rewriter recognises "traced to another stage" (pipeline.sim.symptoms)
    "this failure was traced to another stage, not this one: {stage}."
)
DEFAULT_PER_TYPE = 4

# Field lengths inside one block, so one huge answer or reason cannot crowd out the others.
_LIMITS = {"question": 300, "gold": 200, "answer": 300, "diagnosis": 900}


def clip(text: str, limit: int) -> str:
    """`text` on one line (whitespace collapsed), cut at a word boundary to at most `limit` chars."""
    text = " ".join(str(text).split())
    if len(text) <= limit:
        return text
    if limit <= 4:
        return text[:limit]
    head = text[: limit - 4]
    cut = head.rsplit(" ", 1)[0] if " " in head else head
    return cut + " ..."


@dataclass(frozen=True)
class FailureFeedback:
    """One failed case as a rewriter sees it."""

    question_id: str
    question: str
    gold: str
    answer: str
    error_type: str  # an ErrorType value, or UNATTRIBUTED
    op_name: str  # the blamed operation's name; "" when nothing was blamed
    diagnosis: str
    confidence: float = 0.0
    check: str = Check.UNCHECKED.value  # what a replay found (`Check`): verified, refuted, unchecked, unverifiable
    joint: tuple[str, ...] = ()  # the decisive set's operations in order, when one repair alone was not enough
    category: str = ""  # the question's category, e.g. "2 (temporal)"; "" when unknown
    alternatives: tuple[str, ...] = ()  # other single repairs that also rescued the case alone

    def render(self) -> str:
        if self.op_name:
            error = f"{self.error_type} at operation {self.op_name}{CHECK_SUFFIX.get(self.check, '')}"
        else:
            error = f"{self.error_type} (no operation blamed)"
        lines = [
            f"Question: {clip(self.question, _LIMITS['question'])}", f"Gold answer: {clip(self.gold, _LIMITS['gold'])}",
            f"System answered: {clip(self.answer, _LIMITS['answer']) or '(nothing)'}",
        ]
        if self.category:
            lines.append(f"Category: {self.category}")
        lines.append(f"Error: {error}")
        if len(self.joint) > 1:
            lines.append(f"{JOINT_LABEL} {', then '.join(self.joint)}")
        if self.alternatives:
            lines.append(f"{ALTERNATIVES_LABEL} {', '.join(self.alternatives)}")
        lines.append(f"{DIAGNOSIS_LABEL} {clip(self.diagnosis, _LIMITS['diagnosis'])}")
        return "\n".join(lines)


def category_text(case: CaseResult) -> str:
    """The question's category as a block shows it: "2 (temporal)"."""
    question = case.question
    return f"{question.category} ({question.category_name})"


def feedback_for_attribution(attribution: Attribution) -> FailureFeedback:
    """The block for one attributed failure; the diagnosis is the attribution's reason."""
    case = attribution.case
    return FailureFeedback(
        question_id=case.question.id, question=case.question.text, gold=case.question.gold, answer=case.prediction,
        error_type=attribution.error_type.value, op_name=attribution.op_name or attribution.op,
        diagnosis=attribution.reason or "(the attributor gave no reason)", confidence=attribution.confidence,
        check=attribution.check.value, joint=tuple(f"{f.op_name or f.op} ({f.stage})" for f in attribution.joint),
        alternatives=tuple(f"{f.op_name or f.op} ({f.stage}, {f.tunable.value})" for f in attribution.alternatives),
        category=category_text(case),
    )


def feedback_for_other_stage(attribution: Attribution) -> FailureFeedback:
    """The block for a stage the attribution did not blame: the same facts and error, and a diagnosis
    that says the failure was traced to the blamed stage instead."""
    stages = ", ".join(dict.fromkeys(c.stage for c in attribution.causes())) or attribution.stage
    diagnosis = OTHER_STAGE_DIAGNOSIS.format(stage=stages)
    return replace(feedback_for_attribution(attribution), diagnosis=diagnosis, joint=())


def feedback_without_attribution(case: CaseResult) -> FailureFeedback:
    """The no-attribution baseline's block: the failure's facts and a diagnosis that blames nothing."""
    return FailureFeedback(
        question_id=case.question.id, question=case.question.text, gold=case.question.gold, answer=case.prediction,
        error_type=UNATTRIBUTED, op_name="", diagnosis=NO_ATTRIBUTION_DIAGNOSIS, category=category_text(case),
    )


def _rank_key(block: FailureFeedback) -> tuple[int, float, str]:
    verified_rank = {Check.VERIFIED.value: 0, Check.REFUTED.value: 2}.get(block.check, 1)
    return (verified_rank, -block.confidence, block.question_id)


def _words(block: FailureFeedback) -> frozenset[str]:
    return frozenset(long_letter_words(f"{block.diagnosis} {block.question}"))


def representative(blocks: Iterable[FailureFeedback], limit: int | None = None) -> list[FailureFeedback]:
    """All blocks, most informative first: greedily the one adding the most new words, ties and the rest by (verified,
    confidence, question id)."""
    remaining = sorted(blocks, key=_rank_key)
    words = {id(b): _words(b) for b in remaining}
    seen: set[str] = set()
    ordered: list[FailureFeedback] = []
    while remaining and (limit is None or len(ordered) < limit):
        best = max(range(len(remaining)), key=lambda i: (len(words[id(remaining[i])] - seen), -i))
        chosen = remaining.pop(best)
        seen |= words[id(chosen)]
        ordered.append(chosen)
    return ordered + remaining


def _group(blocks: Sequence[FailureFeedback], per_type: int) -> list[tuple[str, list[FailureFeedback]]]:
    groups: dict[str, list[FailureFeedback]] = {}
    for block in blocks:
        groups.setdefault(block.error_type, []).append(block)
    ordered = sorted(groups.items(), key=lambda item: (-len(item[1]), item[0]))
    return [(kind, representative(members, per_type)) for kind, members in ordered]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _render(groups: list[tuple[str, list[FailureFeedback]]], shown: dict[str, list[str]]) -> str:
    sections = []
    for kind, members in groups:
        parts = [f"{kind} ({_plural(len(members), 'failure')}):", *shown[kind]]
        rest = len(members) - len(shown[kind])
        if rest and shown[kind]:
            parts.append(f"... and {rest} more {kind} {'case' if rest == 1 else 'cases'} like these.")
        elif rest:
            parts.append(f"... {_plural(rest, kind + ' case')} not shown.")
        sections.append("\n\n".join(parts))
    return "\n\n".join(sections)


def fold_feedback(blocks: Iterable[FailureFeedback], max_chars: int, per_type: int = DEFAULT_PER_TYPE) -> str:
    """Many failure blocks as one text of at most `max_chars` characters (deterministic)."""
    if max_chars <= 0:
        raise ValueError(f"max_chars must be positive, got {max_chars}")
    items = list(blocks)
    if not items:
        return ""
    groups = _group(items, per_type)
    shown: dict[str, list[str]] = {kind: [] for kind, _ in groups}
    text = _render(groups, shown)
    if len(text) > max_chars:
        summary = "; ".join(f"{kind}: {_plural(len(members), 'failure')}" for kind, members in groups)
        return clip(summary, max_chars)
    for round_index in range(per_type):
        for kind, members in groups:
            if round_index >= len(members) or len(shown[kind]) != round_index:
                continue  # group exhausted, or an earlier block of it did not fit
            shown[kind].append(members[round_index].render())
            attempt = _render(groups, shown)
            if len(attempt) <= max_chars:
                text = attempt
            else:
                shown[kind].pop()
    return text
