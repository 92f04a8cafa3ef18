"""A diagnostic summary of one evaluation's failures: groups, representative cases, a written analysis.

`group_failures` groups attributions by (stage, error type) with deterministic representative cases;
`diagnose` adds the `DiagnoseFailures` analysis on the LM passed in. `Diagnosis.to_dict` / `markdown` are
diagnosis.json / .md. A failing LM is recorded (`ok`, `error`), never raised; `RunStopped` is not caught.
It neither attributes nor logs.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import dspy
from memtrace_loop.pipeline.analysis.attribution.records import Attribution

logger = logging.getLogger(__name__)

MAX_CASES = 3  # representative cases per group
MAX_FIELD_CHARS = 300  # one case's question / gold / answer / reason, as shown to the LM
TABLE_HEADER = "| stage | error type | failures | share |"
NO_ANALYSIS = "The written analysis is missing"
ELLIPSIS = " \u2026"  # ends a text clipped after a whole word


@dataclass(frozen=True)
class FailureCase:
    """One representative failure: what was asked, expected and answered, and why it failed."""

    question_id: str
    question: str
    gold: str
    answer: str
    reason: str
    confidence: float
    op_name: str = ""
    verified: bool | None = None
    check: str = "unchecked"  # the replay check's state (`Check`)

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "confidence": round(self.confidence, 4)}


@dataclass(frozen=True)
class FailureGroup:
    """The failures blamed on one stage with one error type."""

    stage: str
    error_type: str
    count: int
    share: float  # of the grouped failures
    cases: tuple[FailureCase, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "share": round(self.share, 4), "cases": [c.to_dict() for c in self.cases]}


@dataclass(frozen=True)
class Diagnosis:
    """Failures grouped by (stage, error type) with representative cases and a written analysis."""

    groups: tuple[FailureGroup, ...] = ()
    analysis: str = ""
    ok: bool = True
    failures: int = 0
    error: str = ""

    def headline(self) -> str:
        """The analysis, or a sentence saying why there is none."""
        if not self.groups:
            return "No attributed failures: nothing to diagnose."
        if self.ok and self.analysis:
            return self.analysis
        return f"{NO_ANALYSIS}{f' ({self.error})' if self.error else ''}; the groups below are complete."

    def to_dict(self) -> dict[str, Any]:
        return {
            "failures": self.failures, "ok": self.ok, "analysis": self.analysis, "error": self.error,
            "groups": [group.to_dict() for group in self.groups],
        }

    def markdown(self) -> str:
        """diagnosis.md: the analysis, the group table and the representative cases."""
        lines = ["# Diagnosis", "", self.headline(), ""]
        if self.groups:
            lines += ["## Failures by stage and error type", "", failure_table(self.groups), "",
                      "## Representative cases", ""]
            for group in self.groups:
                lines += [f"### {group.stage} / {group.error_type} ({group.count})", ""]
                lines += [f"- **{c.question_id}** {_md(c.question)} — gold: {_md(c.gold)}; answer: {_md(c.answer)}; "
                          f"why: {_md(c.reason)}" for c in group.cases]
                lines.append("")
        return "\n".join(lines)


def _md(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _sentence_ends(text: str) -> list[int]:
    """The positions after each `.`, `!` or `?` of `text` outside quotes, not an ellipsis, before a space."""
    ends, quoted = [], False
    for i, char in enumerate(text):
        if char == '"':
            quoted = not quoted
        elif (char in ".!?" and not quoted and text[i + 1: i + 2] == " " and text[i - 1: i] not in (".", "")):
            ends.append(i + 1)
    return ends


def clip(text: str, limit: int = MAX_FIELD_CHARS) -> str:
    """`text` with whitespace folded, at most `limit` characters, never cut inside a word: its whole leading
    sentences when they keep at least half of it, else its whole leading words and `ELLIPSIS` (then a closing
    quote when the cut fell inside a quotation, so the ellipsis stays inside it)."""
    flat = " ".join(str(text).split())
    if len(flat) <= limit:
        return flat
    ends = [end for end in _sentence_ends(flat) if end <= limit]
    if ends and ends[-1] >= limit // 2:
        return flat[: ends[-1]]
    cut = limit - len(ELLIPSIS) - 1  # room for a closing quote
    head = flat[:cut] if flat[cut] == " " or " " not in flat[:cut] else flat[:cut].rsplit(" ", 1)[0]
    head = head.rstrip(" ,;:")
    return head + ELLIPSIS + ('"' if head.count('"') % 2 else "")


def _case(attribution: Attribution) -> FailureCase:
    case = attribution.case
    return FailureCase(
        question_id=attribution.question_id, question=case.question.text, gold=case.question.gold,
        answer=case.prediction, reason=attribution.reason, confidence=attribution.confidence,
        op_name=attribution.op_name, verified=attribution.verified, check=attribution.check.value,
    )


def group_failures(attributions: Iterable[Attribution], max_cases: int = MAX_CASES) -> tuple[FailureGroup, ...]:
    """Attributions grouped by (stage, error type), most failures first, each with its `max_cases` most
    confident cases (ties by question id)."""
    members_by_key: dict[tuple[str, str], list[Attribution]] = {}
    items = list(attributions)
    for item in items:
        members_by_key.setdefault((item.stage, item.error_type.value), []).append(item)
    total = len(items)
    groups = [
        FailureGroup(
            stage=stage, error_type=error_type, count=len(members), share=len(members) / total,
            cases=tuple(_case(a) for a in sorted(members, key=lambda a: (-a.confidence, a.question_id))[:max_cases]),
        )
        for (stage, error_type), members in members_by_key.items()
    ]
    groups.sort(key=lambda g: (-g.count, g.stage, g.error_type))
    return tuple(groups)


def failure_table(groups: Iterable[FailureGroup]) -> str:
    """The groups as a Markdown table (the `failure_table` input of `DiagnoseFailures`)."""
    rows = [TABLE_HEADER, "|---|---|---|---|"]
    rows += [f"| {g.stage} | {g.error_type} | {g.count} | {100 * g.share:.0f}% |" for g in groups]
    return "\n".join(rows)


def case_lines(groups: Iterable[FailureGroup]) -> str:
    """The representative cases, one line each, tagged with their group (the `representative_cases` input)."""
    return "\n".join(
        f"[{g.stage} / {g.error_type}] {c.question_id}: question \"{clip(c.question)}\"; gold \"{clip(c.gold)}\"; "
        f"answer \"{clip(c.answer)}\"; reason: {clip(c.reason)}"
        for g in groups for c in g.cases
    )


class DiagnoseFailures(dspy.Signature):
    """You review the failures of a memory system on a question-answering benchmark. Each failure was
    traced to the stage of the system where the needed information was lost, with an error type:
    ExtractionError (never stored), UpdateError (overwritten or degraded by an update), DeletionError
    (deleted), RetrievalError (stored but not retrieved), ResponseError (retrieved, yet answered wrongly).
    From the table of failures per stage and error type and the representative cases, write a short
    analysis (3 to 5 sentences): which stage and error type cause most failures and how many, what the
    cases show goes wrong there (cite one case), and what to fix first. Use only what is given."""

    failure_table: str = dspy.InputField(desc="failures per (stage, error type): count and share")
    representative_cases: str = dspy.InputField(desc="a few cases per group: question, gold, answer, reason")
    analysis: str = dspy.OutputField(desc="a short written analysis, plain text")


def write_analysis(groups: tuple[FailureGroup, ...], lm: dspy.BaseLM) -> tuple[str, str]:
    """(analysis, error): the LM's analysis of `groups`, or "" and why it is missing."""
    program = dspy.Predict(DiagnoseFailures)
    program.set_lm(lm)
    try:
        prediction = program(failure_table=failure_table(groups), representative_cases=case_lines(groups))
    except Exception as exc:  # a failing call or an unparsable reply: recorded, the groups still stand
        logger.warning("diagnosis: the analysis LM call failed: %s: %s", type(exc).__name__, exc)
        return "", f"{type(exc).__name__}: {clip(str(exc), 200)}"
    text = prediction.get("analysis")
    if not isinstance(text, str) or not text.strip():
        return "", f"the LM gave no analysis ({text!r:.80})"
    return text.strip(), ""


def diagnose(attributions: Iterable[Attribution], lm: dspy.BaseLM | None, max_cases: int = MAX_CASES) -> Diagnosis:
    """Group `attributions` and, when there is any failure and an LM, ask it for the written analysis (one LM call)."""
    items = list(attributions)
    groups = group_failures(items, max_cases)
    if not groups:
        return Diagnosis(failures=0)
    if lm is None:
        return Diagnosis(groups, "", ok=False, failures=len(items), error="no LM was given for the analysis")
    analysis, error = write_analysis(groups, lm)
    return Diagnosis(groups, analysis, ok=not error, failures=len(items), error=error)


def diagnosis_from_dict(data: Mapping[str, Any]) -> Diagnosis:
    """A `Diagnosis` read back from `to_dict()` (diagnosis.json)."""
    return Diagnosis(
        groups=tuple(
            FailureGroup(
                stage=str(g["stage"]), error_type=str(g["error_type"]), count=int(g["count"]), share=float(g["share"]),
                cases=tuple(FailureCase(**c) for c in g.get("cases", ())),
            )
            for g in data.get("groups", ())
        ),
        analysis=str(data.get("analysis", "")), ok=bool(data.get("ok", True)), failures=int(data.get("failures", 0)),
        error=str(data.get("error", "")),
    )
