"""MemTraceBench labels (`data.annotations`): parsed into `BenchAnnotation`s and scored.

`score_attributions` gives error-type and exact op-id accuracy, non-memory labels dropped by default.
It reads no graph.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

from memtrace_loop.pipeline.analysis.attribution.records import ErrorType
from memtrace_loop.pipeline.core.graph import EMPTY
from memtrace_loop.pipeline.data.locomo import DataError, validate_record
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator

NON_MEMORY_LABELS: tuple[str, ...] = ("AnnotationError", "JudgeError")


class ExecNetworkError(DataError):
    """An ExecNetwork document that cannot be read: names the source, the record and the field."""


def parse_error_label(label: str) -> tuple[str, ErrorType | None]:
    """`"extraction_error"` -> ("ExtractionError", ErrorType.EXTRACTION); `"JudgeError"` -> ("JudgeError", None)."""
    key = re.sub(r"[^a-z]", "", str(label).lower()).removesuffix("error")
    aliases = {"extract": "extraction", "delete": "deletion", "retrieve": "retrieval", "respond": "response"}
    key = aliases.get(key, key)
    for error_type in ErrorType:
        if error_type.value.lower().removesuffix("error") == key:
            return error_type.value, error_type
    for other in NON_MEMORY_LABELS:
        if other.lower().removesuffix("error") == key:
            return other, None
    raise ValueError(f"unknown error type {label!r}; expected one of {[t.value for t in ErrorType]} "
                     f"or {list(NON_MEMORY_LABELS)}")


@dataclass(frozen=True, slots=True)
class BenchAnnotation:
    """One MemTraceBench label: the failed query, the blamed operation and the error type."""

    query_id: str
    final_error_type: str
    final_op_id: str | None = None
    query: str = ""
    golden_answers: tuple[str, ...] = ()
    prediction: str = ""
    source_evidence_ids: tuple[str, ...] = ()
    reason: str = ""
    error_type: ErrorType | None = None
    extra: Mapping[str, Any] = field(default_factory=lambda: EMPTY)

    @property
    def is_memory_error(self) -> bool:
        return self.error_type is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.extra, "query_id": self.query_id, "query": self.query, "golden_answers": list(self.golden_answers),
            "prediction": self.prediction, "source_evidence_ids": list(self.source_evidence_ids),
            "final_error_type": self.final_error_type, "final_op_id": self.final_op_id, "reason": self.reason,
        }


class _RawAnnotation(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)
    query_id: str
    final_error_type: str
    final_op_id: str | None = None
    query: str = ""
    golden_answers: list[str] = []
    prediction: str | None = None
    source_evidence_ids: list[str] = []
    reason: str | None = Field(None, validation_alias=AliasChoices("reason", "final_reason", "explanation",
                                                                  "rationale", "analysis"))

    @field_validator("golden_answers", "source_evidence_ids", mode="before")
    @classmethod
    def _as_list(cls, value: Any) -> Any:
        if isinstance(value, (str, int, float)):
            return [str(value)]
        return [str(v) for v in value] if isinstance(value, list) else value


def parse_annotation(item: object, source: str, record: str) -> BenchAnnotation:
    raw = validate_record(_RawAnnotation, item, source, record, error_type=ExecNetworkError)
    try:
        label, error_type = parse_error_label(raw.final_error_type)
    except ValueError as error:
        raise ExecNetworkError(source, str(error), record, "final_error_type") from error
    return BenchAnnotation(
        raw.query_id, label, raw.final_op_id, raw.query, tuple(raw.golden_answers), raw.prediction or "",
        tuple(raw.source_evidence_ids), raw.reason or "", error_type, MappingProxyType(dict(raw.model_extra or {})),
    )


class AttributionScore(NamedTuple):
    type_accuracy: float
    op_accuracy: float
    n: int


def score_attributions(
    predicted: Mapping[str, tuple[ErrorType | str, str | None]], annotations: Iterable[BenchAnnotation],
    include_non_memory: bool = False,
) -> AttributionScore:
    """Error-type accuracy and exact op-id accuracy of `predicted` (query_id -> (error type, op id)) over the
    annotations; non-memory labels are dropped unless `include_non_memory`."""
    scored = [a for a in annotations if include_non_memory or a.is_memory_error]
    type_hits = op_hits = 0
    for annotation in scored:
        guess = predicted.get(annotation.query_id)
        if guess is None:
            continue
        error_type, op_id = guess
        try:
            label = parse_error_label(str(error_type))[0]
        except ValueError:
            label = str(error_type)
        type_hits += label == annotation.final_error_type
        op_hits += op_id is not None and op_id == annotation.final_op_id
    n = len(scored)
    return AttributionScore(type_hits / n if n else 0.0, op_hits / n if n else 0.0, n)


