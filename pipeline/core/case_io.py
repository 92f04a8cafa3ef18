"""Judged cases (`CaseResult`) as JSON and back, equal to the originals.

A malformed document is a `ValueError` naming the source and the case. It touches no files and no graphs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from memtrace_loop.pipeline.core.records import CaseResult, Question, Scores

CASES_FORMAT = "memtrace-cases/1"


def case_to_dict(case: CaseResult) -> dict[str, Any]:
    q = case.question
    return {
        "question": {
            "id": q.id, "conversation_id": q.conversation_id, "text": q.text, "gold": q.gold,
            "category": q.category, "evidence": list(q.evidence), "category_label": q.category_label,
        },
        "prediction": case.prediction,
        "verdict": case.verdict,
        "scores": {"judge": case.scores.judge, "f1": case.scores.f1, "bleu1": case.scores.bleu1},
        "error": case.error,
    }


def case_from_dict(data: Any) -> CaseResult:
    q = data["question"]
    question = Question(
        id=str(q["id"]), conversation_id=str(q["conversation_id"]), text=str(q["text"]), gold=str(q["gold"]),
        category=int(q["category"]), evidence=tuple(str(e) for e in q.get("evidence", ())),
        category_label=str(q.get("category_label", "")),
    )
    s = data["scores"]
    return CaseResult(
        question=question, prediction=str(data["prediction"]), verdict=str(data["verdict"]),
        scores=Scores(judge=float(s["judge"]), f1=float(s["f1"]), bleu1=float(s["bleu1"])),
        error=None if data.get("error") is None else str(data["error"]),
    )


def cases_to_json(results: Iterable[CaseResult]) -> str:
    cases = [case_to_dict(r) for r in results]
    return json.dumps({"format": CASES_FORMAT, "cases": cases}, ensure_ascii=False, indent=1)


def cases_from_json(text: str, source: str = "<cases>") -> tuple[CaseResult, ...]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{source}: not JSON ({exc})") from exc
    if not isinstance(data, dict) or data.get("format") != CASES_FORMAT or not isinstance(data.get("cases"), list):
        raise ValueError(f"{source}: not a {CASES_FORMAT} file")
    found = []
    for index, item in enumerate(data["cases"]):
        try:
            found.append(case_from_dict(item))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{source}: case {index} is malformed ({exc!r})") from exc
    return tuple(found)
