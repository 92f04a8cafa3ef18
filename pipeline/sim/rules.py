"""The rule catalog of the simulated world.

A `SimRule` is one competence the stand-in LM shows at one stage *only when the stage's instruction
states it*. `sentence` is what a rewriter adds to an instruction; `patterns` (case-insensitive, all
must match) detect the rule in any instruction, so a paraphrase that keeps the key phrases counts too;
`feedback_keywords` are the words that, present in attribution feedback, point at the rule (the
simulated rewriter may only add a rule the feedback points at); `fixes_error_type` is the error type a
missing rule produces under the taxonomy of REFERENCE.md section 2.

Stages are named by their role in the stand-in (`extract`, `decide`, `answer`), which is how the
stand-in dispatches requests (by output field: `facts`, `actions`, `answer`); a memory system may give
its predictor another attribute name (Mem0's answer predictor is `respond`). Pure data and functions.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType

STAGE_ORDER: tuple[str, ...] = (
    "extract",
    "decide",
    "answer",
    # EverMemOS-style stages (pipeline.sim.evermemos_handlers), in their own pipeline order
    "detect_boundary",
    "write_events",
    "write_episode",
    "check_sufficiency",
    "expand_queries",
)
STAGE_OUTPUTS: MappingProxyType[str, frozenset[str]] = MappingProxyType(
    {
        "extract": frozenset({"facts"}),
        "decide": frozenset({"actions"}),
        "answer": frozenset({"answer"}),
        "judge": frozenset({"label"}),
        "detect_boundary": frozenset({"starts_new_episode"}),
        "write_events": frozenset({"events"}),
        "write_episode": frozenset({"title", "narrative"}),
        "check_sufficiency": frozenset({"sufficient"}),
        "expand_queries": frozenset({"queries"}),
    }
)


@dataclass(frozen=True)
class SimRule:
    id: str
    stage: str
    sentence: str
    patterns: tuple[str, ...]
    feedback_keywords: tuple[str, ...]
    fixes_error_type: str

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
            "date | relative | absolute | temporal | when did | when it happened | time of the event | "
            "yesterday | days ago | last week"
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
            "third party | third-party | other person | other people | someone else | family | "
            "sister | brother | cousin | friend | coworker | neighbor | aunt | uncle | roommate"
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
            "contradict | newest | latest | most recent | outdated | out of date | stale | changed | "
            "new value | old value | no longer | kept the old | ignored the new | new job | moved"
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
        feedback_keywords=_kw("delet | removed | compatible | also be true | second hobby | second pet | second"),
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
        feedback_keywords=_kw("date | when | temporal | time of the event | timestamp | which day"),
        fixes_error_type="ResponseError",
    ),
    SimRule(
        id="abstain",
        stage="answer",
        sentence=("If the memories do not contain the answer, say that it is not mentioned in the conversation."),
        patterns=(r"\bdo(?:es)? not contain\b", r"\bnot mentioned\b"),
        feedback_keywords=_kw(
            "not mentioned | never mentioned | never said | abstain | unanswerable | hallucinat | "
            "other speaker | adversarial | wrong person | not in the conversation | no such"
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
        feedback_keywords=_kw("relative date | date the answer needs | session date | date | when it happened"),
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
        feedback_keywords=_kw("another person | other person | not the speaker | third party | third-party | "
                              "someone else"),
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
        feedback_keywords=_kw("did not retrieve | not retrieved | retriev | multi-hop | related person | by name"),
        fixes_error_type="RetrievalError",
    ),
)
RULES_BY_ID: MappingProxyType[str, SimRule] = MappingProxyType({rule.id: rule for rule in RULES})


def rules_in(instruction: str) -> frozenset[str]:
    """The ids of all rules whose patterns all match the instruction."""
    return frozenset(rule.id for rule in RULES if rule.stated_in(instruction))


def rules_for_stage(stage: str) -> tuple[SimRule, ...]:
    return tuple(rule for rule in RULES if rule.stage == stage)


def stage_for_outputs(output_fields: Iterable[str]) -> str | None:
    """The stand-in stage a signature with these output fields is dispatched to (None if unknown)."""
    key = frozenset(output_fields) - {"reasoning"}
    return next((stage for stage, fields in STAGE_OUTPUTS.items() if fields == key), None)


def rules_pointed_by(feedback: str, stage: str | None = None) -> tuple[SimRule, ...]:
    """The rules (of `stage`, if given) whose feedback keywords occur in `feedback`."""
    return tuple(r for r in RULES if (stage is None or r.stage == stage) and r.pointed_by(feedback))


def with_rules(instruction: str, rule_ids: Iterable[str]) -> str:
    """`instruction` with the sentence of every listed rule it does not state yet appended."""
    present = rules_in(instruction)
    added = [RULES_BY_ID[r].sentence for r in rule_ids if r not in present]
    return " ".join([instruction.strip(), *added]).strip()


def expected_cause(needs: Iterable[str], present: Iterable[str] = ()) -> tuple[str | None, str | None]:
    """(error type, stage) a question needing `needs` is expected to fail with when only the rules in
    `present` are stated: the earliest stage, in pipeline order, with a needed rule missing; within
    that stage the first missing rule in catalog order. (None, None) if nothing is missing."""
    missing = [RULES_BY_ID[r] for r in needs if r not in set(present)]
    if not missing:
        return None, None
    first = min(missing, key=lambda r: (STAGE_ORDER.index(r.stage), RULES.index(r)))
    return first.fixes_error_type, first.stage
