"""Attributors scored on failures whose one true cause is known (the attribution benchmark).

`score_attributor` runs an attributor on every `BenchCase` and folds, per system, the error-type, stage
and exact-operation accuracy, within one hop (adjacent operations), unattributed and verified shares,
verified precision (exact op, or stage and type right), calls and milliseconds per case. The cases
come from `experiments.lab.benchmark.injection`.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from memtrace_loop.memory_systems.spec import FaultKind
from memtrace_loop.pipeline.analysis.attribution.protocol import Attributor
from memtrace_loop.pipeline.analysis.attribution.records import Attribution, ErrorType, Tunable
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.records import CaseResult, Conversation


@dataclass(frozen=True)
class InjectedFault:
    """The ground truth of one case: the injected fault and the operation that carried it out."""

    question_id: str
    system: str
    kind: FaultKind
    op: str
    stage: str
    error_type: ErrorType
    tunable: Tunable = Tunable.PROMPT


@dataclass(frozen=True)
class BenchCase:
    """A failed case whose one cause is known: its graph, judged result, conversation and truth."""

    graph: ExecutionGraph
    case: CaseResult
    conversation: Conversation | None
    truth: InjectedFault


@dataclass(frozen=True)
class CaseScore:
    """One attributor's verdict on one case, compared with the truth."""

    truth: InjectedFault
    attribution: Attribution | None
    error_type_ok: bool
    stage_ok: bool
    op_ok: bool
    within_one_hop: bool
    milliseconds: float
    lm_calls: int

    @property
    def verified(self) -> bool:
        return self.attribution is not None and self.attribution.verified is True

    @property
    def right(self) -> bool:
        """Right for verified precision: the exact operation, or both stage and error type."""
        return self.op_ok or (self.stage_ok and self.error_type_ok)


@dataclass(frozen=True)
class AttributorScore:
    """An attributor's scores on the cases of one system (shares in [0, 1])."""

    system: str
    attributor: str
    n: int
    error_type_accuracy: float
    stage_accuracy: float
    op_accuracy: float
    within_one_hop: float
    unattributed: float
    verified: float
    verified_precision: float | None
    lm_calls_per_case: float
    ms_per_case: float
    op_accuracy_by_kind: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    type_accuracy_by_kind: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    n_by_kind: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))

    def as_row(self) -> dict[str, object]:
        """Plain row for tables and MLflow (shares rounded to 4 places, costs to 3)."""
        shares = ("error_type_acc", "stage_acc", "op_acc", "op_within_1_hop", "unattributed", "verified")
        values = (self.error_type_accuracy, self.stage_accuracy, self.op_accuracy, self.within_one_hop,
                  self.unattributed, self.verified)
        return {
            "system": self.system, "attributor": self.attributor, "n": self.n,
            **{name: round(value, 4) for name, value in zip(shares, values, strict=True)},
            "verified_precision": None if self.verified_precision is None else round(self.verified_precision, 4),
            "lm_calls_per_case": round(self.lm_calls_per_case, 3), "ms_per_case": round(self.ms_per_case, 3),
        }

    def metrics(self) -> dict[str, float]:
        """The numeric part of `as_row`, for a metrics log."""
        return {k: float(v) for k, v in self.as_row().items() if isinstance(v, int | float)}


def adjacent(graph: ExecutionGraph, first: str, second: str) -> bool:
    """True when the operations are equal or one produces a variable the other consumes."""
    if first == second:
        return True
    if first not in graph or second not in graph:
        return False
    a, b = graph.operation(first), graph.operation(second)
    return bool(set(a.outputs) & set(b.inputs) or set(b.outputs) & set(a.inputs))


def compare(case: BenchCase, attribution: Attribution | None, milliseconds: float = 0.0) -> CaseScore:
    """Score one attribution (or None) against the case's truth. Pure."""
    truth = case.truth
    if attribution is None:
        return CaseScore(truth, None, False, False, False, False, milliseconds, 0)
    return CaseScore(
        truth, attribution, attribution.error_type == truth.error_type, attribution.stage == truth.stage,
        attribution.op == truth.op, adjacent(case.graph, attribution.op, truth.op), milliseconds,
        attribution.cost.lm_calls + attribution.cost.replay_calls,
    )


def attribute_cases(
    attributor: Attributor, cases: Iterable[BenchCase], clock: Callable[[], float] = time.perf_counter,
    on_case: Callable[[BenchCase], None] | None = None,
) -> tuple[CaseScore, ...]:
    """Run `attributor` on every case (timing each call with `clock`) and compare with the truth."""
    scores = []
    for case in cases:
        started = clock()
        attribution = attributor.attribute(case.graph, case.case, case.conversation)
        scores.append(compare(case, attribution, 1e3 * (clock() - started)))
        if on_case is not None:
            on_case(case)
    return tuple(scores)


def _share(flags: Iterable[bool]) -> float:
    values = list(flags)
    return sum(values) / len(values) if values else 0.0


def summarize(system: str, attributor: str, scores: Sequence[CaseScore]) -> AttributorScore:
    """Fold case scores into an `AttributorScore`. Pure; an empty list scores 0.0 everywhere."""
    n = len(scores)
    verified = [s for s in scores if s.verified]
    kinds = Counter(s.truth.kind.value for s in scores)

    def by_kind(ok: Callable[[CaseScore], bool]) -> Mapping[str, float]:
        return MappingProxyType({k: _share(ok(s) for s in scores if s.truth.kind.value == k) for k in kinds})

    return AttributorScore(
        system, attributor, n, _share(s.error_type_ok for s in scores), _share(s.stage_ok for s in scores),
        _share(s.op_ok for s in scores), _share(s.within_one_hop for s in scores),
        _share(s.attribution is None for s in scores), len(verified) / n if n else 0.0,
        _share(s.right for s in verified) if verified else None,
        sum(s.lm_calls for s in scores) / n if n else 0.0, sum(s.milliseconds for s in scores) / n if n else 0.0,
        op_accuracy_by_kind=by_kind(lambda s: s.op_ok), type_accuracy_by_kind=by_kind(lambda s: s.error_type_ok),
        n_by_kind=MappingProxyType(dict(kinds)),
    )


def score_attributor(
    attributor: Attributor, cases: Sequence[BenchCase], system: str, clock: Callable[[], float] = time.perf_counter,
    on_case: Callable[[BenchCase], None] | None = None,
) -> AttributorScore:
    """`summarize` of `attribute_cases` for the cases of one system."""
    return summarize(system, attributor.name, attribute_cases(attributor, cases, clock, on_case))
