"""Judged cases (`CaseResult`) as JSON and back, equal to the originals.

A malformed document is a `ValueError` naming the source and the case. It touches no files and no graphs.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable

import pydantic
from memtrace_loop.pipeline.core.records import CaseResult

CASES_FORMAT = "memtrace-cases/1"


_CASE = pydantic.TypeAdapter(CaseResult)


def cases_to_json(results: Iterable[CaseResult]) -> str:
    cases = [dataclasses.asdict(r) for r in results]
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
            found.append(_CASE.validate_python(item))
        except (TypeError, ValueError) as exc:  # a pydantic.ValidationError is a ValueError
            raise ValueError(f"{source}: case {index} is malformed ({exc!r})") from exc
    return tuple(found)
