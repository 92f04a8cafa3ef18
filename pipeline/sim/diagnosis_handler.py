"""The simulated world's answer to the diagnostic summary request (`DiagnoseFailures`): a short analysis.

Rule-based, deterministic and fair: it reads only the request text a real LLM would see — the Markdown
table of failures per (stage, error type) and the representative case lines — and writes what a careful
reader of them would: the most blamed stage and error type with its count and share, the total, the
runner-up group, one cited case of the top group (question, gold, answer, reason), and what to fix first.
A table it cannot read gives a sentence saying so (never an exception). It does no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from memtrace_loop.pipeline.sim.protocol import StageRequest

_ROW = re.compile(
    r"^\|\s*(?P<stage>[^|]+?)\s*\|\s*(?P<error>[A-Za-z]+)\s*\|\s*(?P<count>\d+)\s*\|\s*(?P<share>[\d.]+)%\s*\|$"
)
_CASE = re.compile(r'^\[(?P<stage>[^/\]]+?) / (?P<error>[A-Za-z]+)\]\s*(?P<qid>.+?):\s*(?P<rest>question ".*)$')
_FIELD = re.compile(r'(?P<name>question|gold|answer) "(?P<value>[^"]*)"')
_REASON = re.compile(r"reason:\s*(?P<reason>.*)$")
_ELLIPSIS = "\u2026"  # how the request marks a text shortened after a whole word

_FIX_BY_ERROR = {
    "ExtractionError": "make its instruction keep every stated fact (dates and third parties included)",
    "UpdateError": "make its update rules keep the information an older memory held",
    "DeletionError": "make it delete only what a newer fact really contradicts",
    "RetrievalError": "retrieve more or better-matching memories",
    "ResponseError": "make the answer use the retrieved context (dates, lists, abstaining only when absent)",
}


@dataclass(frozen=True)
class _Row:
    stage: str
    error: str
    count: int
    share: float


def _rows(table: str) -> list[_Row]:
    rows = []
    for line in table.splitlines():
        match = _ROW.match(line.strip())
        if match and match.group("stage") != "stage":
            rows.append(_Row(match.group("stage"), match.group("error"), int(match.group("count")),
                             float(match.group("share"))))
    return rows


def _example(cases: str, top: _Row) -> str:
    for line in cases.splitlines():
        match = _CASE.match(line.strip())
        if match is None or (match.group("stage"), match.group("error")) != (top.stage, top.error):
            continue
        rest = match.group("rest")
        reason = _REASON.search(rest)
        shown = rest[: reason.start()] if reason else rest  # a reason may quote an "answer" of its own
        values: dict[str, str] = {}
        for field in _FIELD.finditer(shown):
            values.setdefault(field.group("name"), field.group("value"))
        said = reason.group("reason").strip() if reason else ""
        clipped = said.rstrip('"').endswith(_ELLIPSIS)  # a shortened reason is quoted, its ellipsis inside
        because = f" The trace says: \u201c{said}\u201d." if clipped else (
            f" The trace says: {said.rstrip('.')}." if said else "")
        return (f" For example, {match.group('qid').strip()} asked \"{values.get('question', '?')}\" (gold "
                f"\"{values.get('gold', '?')}\") and got \"{values.get('answer', '?')}\".{because}")
    return ""


def diagnose_failures(request: StageRequest) -> dict[str, Any]:
    """A short analysis of the failure table and the representative cases of the request."""
    rows = _rows(request.inputs.get("failure_table", ""))
    if not rows:
        return {"analysis": "The failure table holds no rows I can read, so I cannot say where the failures come from."}
    top = max(rows, key=lambda r: r.count)  # the first of the most frequent (the table's own order)
    total = sum(r.count for r in rows)
    text = (f"Most failures are blamed on the {top.stage} stage with {top.error}: {top.count} of {total} "
            f"attributed failures ({top.share:.0f}%).")
    others = [r for r in rows if r is not top]
    if others:
        second = max(others, key=lambda r: r.count)
        text += f" Next is {second.stage} with {second.error} ({second.count})."
    text += _example(request.inputs.get("representative_cases", ""), top)
    fix = _FIX_BY_ERROR.get(top.error, "look at its operations on the failed cases")
    text += f" Fix the {top.stage} stage first: {fix}."
    return {"analysis": text}


HANDLERS: Mapping[frozenset[str], Callable[[StageRequest], dict[str, Any]]] = MappingProxyType(
    {frozenset({"analysis"}): diagnose_failures}
)
