"""Reading attributions back from the rows `run_logging.attribution_rows` wrote (attributions.json), and
their blame table from the rows `BlameTable.as_rows` wrote (blame.json).

`attributions_from_rows(rows, results)` rebuilds one `Attribution` per row whose question is among
`results` (the judged cases of the same run); rows naming other questions are skipped. The joint
decisive set comes back with the blamed operation's error type (the rows keep only the operations,
names and stages of its members); the alternatives (other single repairs that also rescued a case) do
not come back, so a blame table recomputed from these attributions can differ from the one made with
them: `BlameTable.from_rows(rows, total)` reads that table as it was written. It neither attributes nor reads files.
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


def attributions_from_rows(
    rows: Iterable[Mapping[str, Any]], results: Sequence[CaseResult]
) -> tuple[Attribution, ...]:
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
