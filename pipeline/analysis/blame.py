"""How much each stage is to blame: `aggregate_blame` folds attributions into a `BlameTable`.

The table (count, share, error types, examples per stage, ranked by weight then verified rescues) is every
optimizer's input and a logged artifact; `uniform_blame` is the baseline's. Pure records and functions.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from memtrace_loop.pipeline.analysis.attribution.records import Attribution, Check, ErrorType, Fault, Tunable
from memtrace_loop.pipeline.core.records import CaseResult

# How much one attribution counts: verified above unchecked (and unverifiable), refuted least; without
# verification every weight is equal, so the ranking is the plain count.
WEIGHT_BY_CHECK: Mapping[Check, float] = MappingProxyType(
    {Check.VERIFIED: 1.0, Check.UNCHECKED: 0.5, Check.UNVERIFIABLE: 0.5, Check.REFUTED: 0.2}
)
CHECK_COUNTS = ("verified", "refuted", "unverifiable", "verified_alone")  # a row's replay tallies


@dataclass(frozen=True)
class StageBlame:
    stage: str
    tunable: Tunable
    count: int
    share: float  # of the total blame weight
    count_by_error_type: Mapping[str, int]
    example_question_ids: tuple[str, ...]
    weight: float = 0.0
    verified: int = 0  # attributions naming this stage that a replay confirmed
    refuted: int = 0  # ... and that a replay did not confirm
    unverifiable: int = 0  # ... and for which no repair but the gold answer exists
    verified_alone: int = 0  # ... that a replay confirmed with no joint partner: its repair alone rescued

    def rank_key(self) -> tuple[float, int, int, str]:
        """The table's order: by weight, then verified-alone rescues, then failures naming it, then name."""
        return (-round(self.weight, 9), -self.verified_alone, -self.count, self.stage)


@dataclass(frozen=True)
class BlameTable:
    """Blame per stage, most blamed first (`StageBlame.rank_key`)."""

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
                "weight": round(row.weight, 4),
                **{name: getattr(row, name) for name in CHECK_COUNTS},
                **{f"n_{kind}": n for kind, n in row.count_by_error_type.items()},
                "examples": ", ".join(row.example_question_ids),
            }
            for row in self.rows
        ]

    @classmethod
    def from_rows(cls, rows: Iterable[Mapping[str, object]], total: int | None = None) -> BlameTable:
        """The table `as_rows` wrote, rows in their order (shares as rounded there, examples as listed);
        `total` defaults to the rows' counts summed. Rows written before weights read the count as weight,
        and a missing check column as 0.

        >>> BlameTable.from_rows([{"stage": "extract", "tunable": "prompt", "count": 2, "share": 1.0}]).rows[0].weight
        2.0
        """
        stages = tuple(_row_blame(row) for row in rows)
        return cls(stages, sum(row.count for row in stages) if total is None else total)


def _row_blame(row: Mapping[str, object]) -> StageBlame:
    counts = {key: int(str(row.get(key, 0))) for key in ("count", *CHECK_COUNTS)}
    return StageBlame(
        stage=str(row["stage"]),
        tunable=Tunable(str(row["tunable"])),
        share=float(str(row["share"])),
        count_by_error_type=MappingProxyType(
            {k.removeprefix("n_"): int(str(v)) for k, v in row.items() if k.startswith("n_")}
        ),
        example_question_ids=tuple(q for q in str(row.get("examples", "")).split(", ") if q),
        weight=float(str(row.get("weight", counts["count"]))),
        **counts,
    )


def aggregate_blame(attributions: Iterable[Attribution], max_examples: int = 5) -> BlameTable:
    """Per-stage counts, weights, shares, error types and example cases of a set of attributions."""
    items: Sequence[Attribution] = list(attributions)
    members_by_stage: dict[str, list[tuple[Attribution, Fault]]] = {}
    for item in items:
        causes = item.causes()
        for cause in {c.stage: c for c in causes}.values():
            members_by_stage.setdefault(cause.stage, []).append((item, cause))
    weight_by_stage = {
        stage: sum(
            WEIGHT_BY_CHECK[a.check] * sum(1 for c in a.causes() if c.stage == stage) / len(a.causes())
            for a, _ in members
        )
        for stage, members in members_by_stage.items()
    }
    total_weight = sum(weight_by_stage.values())
    rows = []
    for stage, members in members_by_stage.items():
        types = Counter(cause.error_type.value for _, cause in members)
        rows.append(
            StageBlame(
                stage=stage, tunable=members[0][1].tunable, count=len(members),
                share=weight_by_stage[stage] / total_weight if total_weight else 0.0,
                count_by_error_type=MappingProxyType({t.value: types.get(t.value, 0) for t in ErrorType if t in types}),
                example_question_ids=tuple(a.question_id for a, _ in members[:max_examples]),
                weight=weight_by_stage[stage], verified=sum(1 for a, _ in members if a.verified is True),
                refuted=sum(1 for a, _ in members if a.verified is False),
                unverifiable=sum(1 for a, _ in members if a.check == Check.UNVERIFIABLE),
                verified_alone=sum(1 for a, _ in members if a.verified is True and not a.joint),
            )
        )
    rows.sort(key=StageBlame.rank_key)
    return BlameTable(tuple(rows), len(items))


def uniform_blame(cases: Iterable[CaseResult], stages: Sequence[str], max_examples: int = 5) -> BlameTable:
    """The no-attribution baseline: every failure is blamed on every prompt stage equally."""
    failed = [c for c in cases if not c.correct]
    rows = tuple(
        StageBlame(
            stage=stage, tunable=Tunable.PROMPT, count=len(failed), share=1.0 / len(stages) if stages else 0.0,
            count_by_error_type=MappingProxyType({}),
            example_question_ids=tuple(c.question.id for c in failed[:max_examples]),
        )
        for stage in stages
    )
    return BlameTable(rows, len(failed))
