"""The rule catalog of the simulated world.

A `SimRule` is one competence the stand-in LM shows at one stage *only when the stage's instruction
states it*. `sentence` is what a rewriter adds to an instruction; `patterns` (case-insensitive, all
must match) detect the rule in any instruction, so a paraphrase that keeps the key phrases counts too;
`feedback_keywords` are single generic topic words (never phrases of the attributor's reason templates;
a test guards that) through which a diagnosis narrows the rewriter's guesses (`pipeline.sim.rewriter`);
`fixes_error_type` is the error type a missing rule produces under the taxonomy of REFERENCE.md section 2
(for a misfire: the error type of the stage it lands on). `effect` says whether the rule is a real fix,
a MISFIRE (a rule a generic rewriter plausibly adds from a symptom and that the stand-in obeys to its
cost: `one_answer` drops all but one item of a list answer, `best_guess` never abstains) or NOISE (a
sentence with no behaviour, costing only instruction length).

Stages are named by their role in the stand-in (`extract`, `decide`, `answer`); which output fields
dispatch to a stage, and the stages' pipeline order, are the stage table's (`pipeline.sim.stages`). A
memory system may give its predictor another attribute name (the answer predictor is `respond`).
Pure data and functions.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from types import MappingProxyType


class RuleEffect(StrEnum):
    FIX = "fix"  # the competence a planted question needs
    MISFIRE = "misfire"  # plausible from a symptom, obeyed by the stand-in, and harmful
    NOISE = "noise"  # plausible from a symptom, no behaviour: costs only instruction length


@dataclass(frozen=True)
class SimRule:
    id: str
    stage: str
    sentence: str
    patterns: tuple[str, ...]
    feedback_keywords: tuple[str, ...]
    fixes_error_type: str
    effect: RuleEffect = RuleEffect.FIX

    def stated_in(self, instruction: str) -> bool:
        return all(_compiled(p).search(instruction) for p in self.patterns)

    def pointed_by(self, feedback: str) -> bool:
        """True when a keyword occurs in `feedback` starting at a word boundary ("date" matches
        "dates" but not "update"; "delet" matches "deleted")."""
        lowered = feedback.lower()
        return any(_keyword(k).search(lowered) for k in self.feedback_keywords)


@cache
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


@cache
def _keyword(keyword: str) -> re.Pattern[str]:
    return re.compile(r"(?<![a-z0-9])" + re.escape(keyword.lower()))


def _kw(text: str) -> tuple[str, ...]:
    return tuple(word.strip() for word in text.split("|"))


RULES: tuple[SimRule, ...] = (
    SimRule(
        id="resolve_dates",
        stage="extract",
        sentence=(
            "Resolve relative dates such as 'last Saturday', 'yesterday' or 'two days ago' to absolute "
            "dates using the session date, and keep every date in the fact."
        ),
        patterns=(r"\brelative (?:dates?|times?|expressions?)\b", r"\babsolute dates?\b"),
        feedback_keywords=_kw(
            "date | dates | day | relative | temporal | yesterday | ago"
        ),
        fixes_error_type="ExtractionError",
    ),
    SimRule(
        id="third_party",
        stage="extract",
        sentence=(
            "Also extract facts about other people the speaker mentions (family, friends, coworkers), "
            "naming that person as the subject."
        ),
        patterns=(r"\bother (?:people|persons?)\b", r"\bmention"),
        feedback_keywords=_kw(
            "person | people | family | sister | brother | cousin | friend | coworker | neighbor | aunt | uncle | "
            "roommate | someone"
        ),
        fixes_error_type="ExtractionError",
    ),
    SimRule(
        id="newest_wins",
        stage="decide",
        sentence=(
            "When a new fact contradicts an existing memory about the same thing, UPDATE that memory "
            "to the newest value."
        ),
        patterns=(r"\bcontradict", r"\b(?:newest|latest|most recent)\b"),
        feedback_keywords=_kw(
            "contradict | newest | latest | outdated | stale | changed | old | moved"
        ),
        fixes_error_type="UpdateError",
    ),
    SimRule(
        id="keep_compatible",
        stage="decide",
        sentence=(
            "Never DELETE or overwrite a memory because of a new fact that can also be true, such as a "
            "second hobby or a second pet; ADD the new fact instead."
        ),
        patterns=(r"\bnever delete\b", r"\b(?:also be true|compatible|both be true)\b"),
        feedback_keywords=_kw(
            "delet | removed | compatible | second | both"
        ),
        fixes_error_type="DeletionError",
    ),
    SimRule(
        id="use_dates",
        stage="answer",
        sentence=(
            "When the question asks when something happened, answer with the date stated in the memory, "
            "resolving relative dates against the memory's time."
        ),
        patterns=(r"\basks? when\b", r"\bdates?\b"),
        feedback_keywords=_kw(
            "date | dates | when | temporal | timestamp | day"
        ),
        fixes_error_type="ResponseError",
    ),
    SimRule(
        id="abstain",
        stage="answer",
        sentence=("If the memories do not contain the answer, say that it is not mentioned in the conversation."),
        patterns=(r"\bdo(?:es)? not contain\b", r"\bnot mentioned\b"),
        feedback_keywords=_kw(
            "mentioned | abstain | unanswerable | hallucinat | adversarial"
        ),
        fixes_error_type="ResponseError",
    ),
    # ------------------------------------------------------------------ EverMemOS-style stages
    SimRule(
        id="event_dates",
        stage="write_events",
        sentence=(
            "Give every event the calendar date on which it happened: for 'yesterday', 'last Friday' or "
            "'three days ago', count back from the day the turn was said and write that day into the event."
        ),
        patterns=(r"\bcalendar dates?\b", r"\bcount(?:ing)? back\b"),
        feedback_keywords=_kw(
            "date | dates | day | relative | ago"
        ),
        fixes_error_type="ExtractionError",
    ),
    SimRule(
        id="event_third_party",
        stage="write_events",
        sentence=(
            "Also write events about anyone else a speaker talks about (relatives, friends, coworkers), "
            "with that person as the subject."
        ),
        patterns=(r"\banyone else\b", r"\btalks? about\b"),
        feedback_keywords=_kw(
            "person | people | someone | family | sister | brother | cousin | friend | coworker"
        ),
        fixes_error_type="ExtractionError",
    ),
    SimRule(
        id="expand_related",
        stage="expand_queries",
        sentence=(
            "When a question names someone only by relation (such as a sister or a coworker) and a retrieved "
            "memory gives that person's name, add the same question asked about that person by name."
        ),
        patterns=(r"\bby relation\b", r"\bby name\b"),
        feedback_keywords=_kw(
            "retriev | search | ranked | relation | hop"
        ),
        fixes_error_type="RetrievalError",
    ),
    # ------------------------------------------------------------------ misfires and noise
    SimRule(
        id="one_answer",
        stage="answer",
        sentence="Give one answer only: the single item that fits best, never a list of several.",
        patterns=(r"\bone answer only\b", r"\bnever a list\b"),
        feedback_keywords=(),
        fixes_error_type="ResponseError",
        effect=RuleEffect.MISFIRE,
    ),
    SimRule(
        id="best_guess",
        stage="answer",
        sentence="Never say that you do not know; always give your best guess from the memories.",
        patterns=(r"\bbest guess\b", r"\bnever say\b"),
        feedback_keywords=(),
        fixes_error_type="ResponseError",
        effect=RuleEffect.MISFIRE,
    ),
    SimRule(
        id="complete_facts",
        stage="extract",
        sentence="Write each fact as a complete sentence that can be understood on its own.",
        patterns=(r"\bcomplete sentence\b", r"\bon its own\b"),
        feedback_keywords=(),
        fixes_error_type="ExtractionError",
        effect=RuleEffect.NOISE,
    ),
)
RULES_BY_ID: MappingProxyType[str, SimRule] = MappingProxyType({rule.id: rule for rule in RULES})


def rules_in(instruction: str) -> frozenset[str]:
    """The ids of all rules whose patterns all match the instruction."""
    return frozenset(rule.id for rule in RULES if rule.stated_in(instruction))


def rules_for_stage(stage: str, effects: Iterable[RuleEffect] = (RuleEffect.FIX,)) -> tuple[SimRule, ...]:
    """The rules of `stage` with one of `effects` (by default the real fixes: misfires and noise left out)."""
    wanted = frozenset(effects)
    return tuple(rule for rule in RULES if rule.stage == stage and rule.effect in wanted)


def rules_pointed_by(feedback: str, stage: str | None = None) -> tuple[SimRule, ...]:
    """The rules (of `stage`, if given) whose feedback keywords occur in `feedback`."""
    return tuple(r for r in RULES if (stage is None or r.stage == stage) and r.pointed_by(feedback))


def with_rules(instruction: str, rule_ids: Iterable[str], catalog: Iterable[SimRule] = RULES) -> str:
    """`instruction` with the sentence of every listed rule (of `catalog`) it does not state yet appended."""
    by_id = {rule.id: rule for rule in catalog}
    present = {rule_id for rule_id, rule in by_id.items() if rule.stated_in(instruction)}
    added = [by_id[r].sentence for r in rule_ids if r not in present]
    return " ".join([instruction.strip(), *added]).strip()
