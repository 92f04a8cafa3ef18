"""Attributions read back from attributions.json, and their blame table from blame.json.

A joint set comes back with the blamed error type; alternatives do not, so the saved table
(`BlameTable.from_rows`) is read as written. It neither attributes nor reads files.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from memtrace_loop.pipeline.analysis.attribution.records import (
    Attribution,
    AttributionCost,
    Check,
    ErrorType,
    Fault,
    Tunable,
)
from memtrace_loop.pipeline.core.records import CaseResult


def attributions_from_rows(rows: Iterable[Mapping[str, Any]], results: Sequence[CaseResult]) -> tuple[Attribution, ...]:
    case_by_question = {r.question.id: r for r in results}
    found = []
    for row in rows:
        case = case_by_question.get(str(row.get("question_id", "")))
        if case is None:
            continue
        error_type = ErrorType(str(row["error_type"]))
        tunable = Tunable(str(row.get("tunable", Tunable.PROMPT.value)))
        joint = tuple(
            Fault(str(op), str(name), str(stage), error_type, tunable, str(row.get("reason", "")))
            for op, name, stage in zip(
                row.get("joint", ()), row.get("joint_names", ()), row.get("joint_stages", ()), strict=False
            )
        )
        verified = row.get("verified")
        check = Check(str(row["check"])) if "check" in row else Check.of(None if verified is None else bool(verified))
        found.append(
            Attribution(
                case, str(row["op"]), str(row.get("op_name", "")), str(row["stage"]), error_type,
                str(row.get("reason", "")), float(row.get("confidence", 0.0)), str(row.get("method", "")),
                tunable, tuple(str(e) for e in row.get("evidence", ())), bool(row.get("pseudo_evidence", False)),
                check, joint=joint,
                cost=AttributionCost(
                    int(row.get("cost_lm_calls", 0)), int(row.get("prompt_tokens", 0)),
                    int(row.get("completion_tokens", 0)), int(row.get("replay_calls", 0)),
                    float(row.get("seconds", 0.0)),
                ),
            )
        )
    return tuple(found)
