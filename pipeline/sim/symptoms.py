"""What the simulated rewriter guesses from one failure block: the rules that could explain it.

`parse_blocks(text)` reads the failure blocks a rewriter is given (the labels `optimizers.feedback`
writes: `Question:`, `Gold answer:`, `System answered:`, `Category:`, `Error:`, `Diagnosis:`; any
text around them, such as fold headers or GEPA's markdown, is ignored). `guesses(block)` is what a
generic LLM rewriter would infer from the block, as rule ids of every stage:

- from the symptoms alone (question, gold, answer, category), the way a model guesses without knowing
  where the failure came from (`symptom_guesses`):
  a "when" question, a date in the gold or the temporal category -> the date rules of every stage;
  a question naming a relative or colleague -> the third-party rules and query expansion;
  the system abstained while the gold is a fact -> "the fact was lost": never delete (decide), write
  complete facts (noise) and "always give your best guess" (a misfire on the answer stage);
  the gold says not mentioned but the system answered -> abstain;
  a different short value of the same attribute -> "the memory may be outdated" (newest_wins);
  part of a list -> "the list is incomplete" (keep_compatible);
  an answer much longer than the gold -> "give one answer only" (a misfire: it cuts list answers).
- narrowed by an attribution when the block has one (`Error:` with an error type of the taxonomy):
  only guesses whose rule repairs that error type are kept; if the diagnosis's words point at some of
  them (`SimRule.feedback_keywords`, single topic words) only those; if it points at rules of that
  error type the symptoms did not suggest, those are taken (a precise diagnosis is trusted). A block
  whose diagnosis says the failure was traced to another stage yields nothing.

Pure functions; no stage is chosen here (the rewriter keeps the guesses of the stage it rewrites).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from memtrace_loop.pipeline.sim.dates import find_dates
from memtrace_loop.pipeline.sim.judge import content_tokens, is_abstention
from memtrace_loop.pipeline.sim.rules import RULES, RULES_BY_ID

ERROR_TYPES: frozenset[str] = frozenset(
    {"ExtractionError", "UpdateError", "DeletionError", "RetrievalError", "ResponseError"}
)
# Kept in step with `optimizers.feedback` (the simulated world does not import the optimizers).
LABEL_BY_FIELD: dict[str, str] = {
    "question": "question:",
    "gold": "gold answer:",
    "answer": "system answered:",
    "category": "category:",
    "error": "error:",
    "diagnosis": "diagnosis:",
}
ELSEWHERE_MARKER = "traced to another stage"  # `optimizers.feedback.OTHER_STAGE_DIAGNOSIS` says this
TEMPORAL_CATEGORY = 2
_WHEN = re.compile(r"^\s*when\b|\b(?:what|which) (?:date|day|year|month)\b|\bhow long ago\b", re.IGNORECASE)
_YEAR = re.compile(r"\b(?:19|20)\d\d\b")
_RELATIVES = re.compile(
    r"\b(?:sister|brother|mother|father|mom|dad|cousin|aunt|uncle|friend|coworker|colleague|neighbou?r|"
    r"roommate|partner|wife|husband|son|daughter|boss)s?\b",
    re.IGNORECASE,
)
_LIST = re.compile(r"\band\b|,")
SHORT_TOKENS = 6  # an answer or gold of at most this many content tokens is "a value"

DATE_RULES = ("resolve_dates", "use_dates", "event_dates")
RELATIVE_RULES = ("third_party", "event_third_party", "expand_related")
LOST_FACT_RULES = ("keep_compatible", "complete_facts", "best_guess")
OUTDATED_RULES = ("newest_wins",)
INCOMPLETE_RULES = ("keep_compatible",)
ABSTAIN_RULES = ("abstain",)
VERBOSE_RULES = ("one_answer",)


@dataclass(frozen=True)
class Block:
    """One failure block as a rewriter reads it ("" for a missing line)."""

    question: str = ""
    gold: str = ""
    answer: str = ""
    category: str = ""
    error: str = ""
    diagnosis: str = ""

    @property
    def error_type(self) -> str | None:
        """The taxonomy error type the `Error:` line names (None if unattributed or absent)."""
        first = self.error.split(" ", 1)[0].strip() if self.error else ""
        return first if first in ERROR_TYPES else None

    @property
    def category_number(self) -> int | None:
        match = re.match(r"\s*(\d+)", self.category)
        return int(match.group(1)) if match else None

    @property
    def elsewhere(self) -> bool:
        """True when the diagnosis says the failure was caused by another stage."""
        return ELSEWHERE_MARKER in self.diagnosis.lower()


def _label(line: str) -> str | None:
    lowered = line.lower()
    return next((field for field, label in LABEL_BY_FIELD.items() if lowered.startswith(label)), None)


def parse_blocks(text: str) -> list[Block]:
    """Every failure block in `text`, in order; a block starts at a `Question:` line."""
    blocks: list[dict[str, str]] = []
    for raw in text.splitlines():
        line = raw.strip()
        field = _label(line)
        if field is None:
            continue
        value = line[len(LABEL_BY_FIELD[field]) :].strip()
        if field == "question" or not blocks:
            blocks.append({})
        if field not in blocks[-1]:
            blocks[-1][field] = value
    return [Block(**fields) for fields in blocks if fields.get("question")]


def _has_date(text: str) -> bool:
    return bool(find_dates(text) or _YEAR.search(text))


def symptom_guesses(block: Block) -> tuple[str, ...]:
    """The rules (any stage) that could explain the block, from question, gold, answer and category."""
    found: list[str] = []
    if _WHEN.search(block.question) or _has_date(block.gold) or block.category_number == TEMPORAL_CATEGORY:
        found.extend(DATE_RULES)
    if _RELATIVES.search(block.question):
        found.extend(RELATIVE_RULES)
    gold_abstains, answer_abstains = is_abstention(block.gold), is_abstention(block.answer)
    if gold_abstains and block.answer and not answer_abstains:
        found.extend(ABSTAIN_RULES)
    elif answer_abstains and not gold_abstains:
        found.extend(LOST_FACT_RULES)
    elif not gold_abstains and block.answer:
        gold, answer = set(content_tokens(block.gold)), set(content_tokens(block.answer))
        if gold and answer and not _has_date(block.gold):
            if answer < gold and _LIST.search(block.gold):
                found.extend(INCOMPLETE_RULES)
            elif not answer & gold and len(answer) <= SHORT_TOKENS and len(gold) <= SHORT_TOKENS:
                found.extend(OUTDATED_RULES)
        if len(answer) >= 3 and len(answer) >= 2 * max(1, len(gold)):
            found.extend(VERBOSE_RULES)
    return tuple(dict.fromkeys(found))


def guesses(block: Block) -> tuple[str, ...]:
    """The rules (any stage) a rewriter takes from the block: its symptom guesses, narrowed by the
    block's attribution when it has one (see the module docstring)."""
    if block.elsewhere:
        return ()
    symptoms = symptom_guesses(block)
    error_type = block.error_type
    if error_type is None:
        return symptoms
    typed = [r.id for r in RULES if r.fixes_error_type == error_type]
    consistent = [r for r in symptoms if r in typed]
    pointed = [r for r in typed if RULES_BY_ID[r].pointed_by(block.diagnosis)]
    both = [r for r in consistent if r in pointed]
    return tuple(both or pointed or consistent)


def guesses_for_stage(blocks: Iterable[Block], stage: str) -> list[tuple[str, int]]:
    """(rule id, number of blocks suggesting it) for the rules of `stage`, most suggested first, ties in
    catalog order."""
    count_by_rule: dict[str, int] = {}
    for block in blocks:
        for rule_id in guesses(block):
            if RULES_BY_ID[rule_id].stage == stage:
                count_by_rule[rule_id] = count_by_rule.get(rule_id, 0) + 1
    order = {rule.id: i for i, rule in enumerate(RULES)}
    return sorted(count_by_rule.items(), key=lambda item: (-item[1], order[item[0]]))
