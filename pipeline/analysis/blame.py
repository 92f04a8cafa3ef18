"""Why cases failed, and how much each stage is to blame.

`Attribution` is the verdict on one failed case: the earliest decisive faulty operation, its stage,
one of five error types, a reason that cites the variables involved, and whether the blame lands on a
prompt or on a stage's non-prompt knobs. `aggregate_blame` folds attributions into a `BlameTable`
(count, share, error types and example cases per stage), the input of every optimizer and a logged
artifact of every iteration. Pure records and functions: finding attributions is
`pipeline.analysis.attribution`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from memtrace_loop.pipeline.core.records import CaseResult


class Tunable(StrEnum):
    """What an optimizer can change to fix a blamed stage: its prompt, or its non-prompt knobs."""

    PROMPT = "prompt"
    KNOBS = "knobs"


class ErrorType(StrEnum):
    EXTRACTION = "ExtractionError"
    UPDATE = "UpdateError"
    DELETION = "DeletionError"
    RETRIEVAL = "RetrievalError"
    RESPONSE = "ResponseError"


@dataclass(frozen=True)
class Attribution:
    """Why one case failed. `op` is the blamed operation's id in the case's conversation graph;
    `stage` the stage whose prompt it used, or — when `tunable` is `Tunable.KNOBS` — the non-LLM stage whose
    settings (e.g. top_k) are to blame. `evidence` lists the turn ids the analysis started from."""

    case: CaseResult
    op: str
    op_name: str
    stage: str
    error_type: ErrorType
    reason: str
    confidence: float
    method: str
    tunable: Tunable = Tunable.PROMPT
    evidence: tuple[str, ...] = ()
    pseudo_evidence: bool = False
    verified: bool | None = None  # set by a replay check; None when not checked

    @property
    def question_id(self) -> str:
        return self.case.question.id


@dataclass(frozen=True)
class StageBlame:
    stage: str
    tunable: Tunable
    count: int
    share: float
    count_by_error_type: Mapping[str, int]
    example_question_ids: tuple[str, ...]


@dataclass(frozen=True)
class BlameTable:
    """Blame per stage, most blamed first (ties by stage name)."""

    rows: tuple[StageBlame, ...] = ()
    total: int = 0
    by_stage: Mapping[str, StageBlame] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_stage", MappingProxyType({row.stage: row for row in self.rows}))

    def prompt_stages(self) -> tuple[str, ...]:
        """Stages with a tunable prompt, most blamed first."""
        return tuple(row.stage for row in self.rows if row.tunable == Tunable.PROMPT)

    def as_rows(self) -> list[dict[str, object]]:
        """Plain rows for tables and MLflow artifacts."""
        return [
            {
                "stage": row.stage,
                "tunable": row.tunable.value,
                "count": row.count,
                "share": round(row.share, 4),
                **{f"n_{kind}": n for kind, n in row.count_by_error_type.items()},
                "examples": ", ".join(row.example_question_ids),
            }
            for row in self.rows
        ]


def aggregate_blame(attributions: Iterable[Attribution], max_examples: int = 5) -> BlameTable:
    """Per-stage counts, shares, error types and example cases of a set of attributions."""
    items: Sequence[Attribution] = list(attributions)
    total = len(items)
    stages: dict[str, list[Attribution]] = {}
    for item in items:
        stages.setdefault(item.stage, []).append(item)
    rows = []
    for stage, members in stages.items():
        types = Counter(a.error_type.value for a in members)
        rows.append(
            StageBlame(
                stage=stage,
                tunable=members[0].tunable,
                count=len(members),
                share=len(members) / total if total else 0.0,
                count_by_error_type=MappingProxyType({t.value: types.get(t.value, 0) for t in ErrorType if t in types}),
                example_question_ids=tuple(a.question_id for a in members[:max_examples]),
            )
        )
    rows.sort(key=lambda row: (-row.count, row.stage))
    return BlameTable(tuple(rows), total)


def uniform_blame(cases: Iterable[CaseResult], stages: Sequence[str], max_examples: int = 5) -> BlameTable:
    """The no-attribution baseline: every failure is blamed on every prompt stage equally."""
    failed = [c for c in cases if not c.correct]
    rows = tuple(
        StageBlame(
            stage=stage,
            tunable=Tunable.PROMPT,
            count=len(failed),
            share=1.0 / len(stages) if stages else 0.0,
            count_by_error_type=MappingProxyType({}),
            example_question_ids=tuple(c.question.id for c in failed[:max_examples]),
        )
        for stage in stages
    )
    return BlameTable(rows, len(failed))
