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
class Fault:
    """One operation found faulty on the path of the information a case needed. `restore` names the
    graph variables that hold what it lost (an evidence turn, a unit's old version, a memory the search
    missed): what a replay puts back to test whether repairing this operation alone rescues the case."""

    op: str
    op_name: str
    stage: str
    error_type: ErrorType
    tunable: Tunable
    reason: str
    restore: tuple[str, ...] = ()
    seq: int = 0


@dataclass(frozen=True)
class AttributionCost:
    """What finding (and checking) one attribution spent: LM calls and tokens, replayed calls, time."""

    lm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    replay_calls: int = 0
    seconds: float = 0.0


@dataclass(frozen=True)
class Attribution:
    """Why one case failed. `op` is the blamed operation's id in the case's conversation graph;
    `stage` the stage whose prompt it used, or — when `tunable` is `Tunable.KNOBS` — the non-LLM stage whose
    settings (e.g. top_k) are to blame. `evidence` lists the turn ids the analysis started from.

    `suspects` are every fault the attributor found on the information's path, earliest first (the
    blamed one among them); a replay check tries them. `joint` is the decisive error set when no single
    repair rescued the case but these together did (in order; the blamed operation is the first); blame
    splits over it. `verified` is True when a replay with the blamed operation(s) repaired answered
    correctly, False when it did not, None when not checked."""

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
    suspects: tuple[Fault, ...] = ()
    joint: tuple[Fault, ...] = ()
    cost: AttributionCost = AttributionCost()

    @property
    def question_id(self) -> str:
        return self.case.question.id

    def primary(self) -> Fault:
        """The blamed operation as a `Fault`."""
        return Fault(self.op, self.op_name, self.stage, self.error_type, self.tunable, self.reason)

    def causes(self) -> tuple[Fault, ...]:
        """The operations the blame goes to: the joint set when there is one, else the blamed operation."""
        return self.joint or (self.primary(),)


# How much one attribution counts in the blame table: a replay-confirmed blame above an unchecked one,
# a refuted one (its repair did not rescue the case) least. Without verification every weight is equal,
# so the ranking is the plain count.
WEIGHT_BY_VERIFIED: Mapping[bool | None, float] = MappingProxyType({True: 1.0, None: 0.5, False: 0.2})


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


@dataclass(frozen=True)
class BlameTable:
    """Blame per stage, most blamed (by weight) first (ties by stage name)."""

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
                "verified": row.verified,
                "refuted": row.refuted,
                **{f"n_{kind}": n for kind, n in row.count_by_error_type.items()},
                "examples": ", ".join(row.example_question_ids),
            }
            for row in self.rows
        ]


def aggregate_blame(attributions: Iterable[Attribution], max_examples: int = 5) -> BlameTable:
    """Per-stage counts, weights, shares, error types and example cases of a set of attributions.

    Each attribution carries `WEIGHT_BY_VERIFIED[verified]`, split evenly over its causes (its joint
    decisive set, or the blamed operation alone); a stage's share is its part of the total weight."""
    items: Sequence[Attribution] = list(attributions)
    members_by_stage: dict[str, list[tuple[Attribution, Fault]]] = {}
    for item in items:
        causes = item.causes()
        for cause in {c.stage: c for c in causes}.values():
            members_by_stage.setdefault(cause.stage, []).append((item, cause))
    weight_by_stage = {
        stage: sum(
            WEIGHT_BY_VERIFIED[a.verified] * sum(1 for c in a.causes() if c.stage == stage) / len(a.causes())
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
                stage=stage,
                tunable=members[0][1].tunable,
                count=len(members),
                share=weight_by_stage[stage] / total_weight if total_weight else 0.0,
                count_by_error_type=MappingProxyType({t.value: types.get(t.value, 0) for t in ErrorType if t in types}),
                example_question_ids=tuple(a.question_id for a, _ in members[:max_examples]),
                weight=weight_by_stage[stage],
                verified=sum(1 for a, _ in members if a.verified is True),
                refuted=sum(1 for a, _ in members if a.verified is False),
            )
        )
    rows.sort(key=lambda row: (-round(row.weight, 9), -row.count, row.stage))
    return BlameTable(tuple(rows), len(items))


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
