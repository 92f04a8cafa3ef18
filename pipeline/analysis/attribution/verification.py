"""Replay verification: does repairing the blamed stage, the way a fixed stage could, rescue the case?

Within `max_replays`: the blamed repair alone (`verified`, with other-kind `alternatives`), else each other
suspect alone, else the smallest joint set up to `max_joint`; else `refuted`, or `unverifiable` when no
repair exists. `attribute_run` may sample the checked failures per blamed stage. It finds no attributions
and does not aggregate blame.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import dspy
from memtrace_loop.memory_systems.base import MemorySystem, ReplayUnsupportedError, RestoredUnit
from memtrace_loop.pipeline.analysis.attribution.protocol import Attributor, TracedRun, attributed_cases
from memtrace_loop.pipeline.analysis.attribution.records import Attribution, Check, Fault
from memtrace_loop.pipeline.analysis.attribution.repairs import (
    Repair,
    RepairPlan,
    answer_fault,
    answer_repairable,
    plan_repair,
    reader_faults,
    retrieval_knob_fault,
    steering_fault,
    swappable,
)
from memtrace_loop.pipeline.analysis.attribution.replay import Replayer
from memtrace_loop.pipeline.analysis.attribution.settings import ReplayConfig
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.records import CaseResult, Conversation

logger = logging.getLogger(__name__)


@dataclass
class _Spend:
    """One `verify` call's replays, LLM calls and stage re-calls by operation (ids repeat across iterations)."""

    replays: int = 0
    calls: int = 0
    reruns: dict[str, tuple[RestoredUnit, ...]] = field(default_factory=dict)


class Verifier:
    """Checks attributions by replay (see the module docstring)."""

    def __init__(self, system: MemorySystem, judge: dspy.Predict, settings: ReplayConfig | None = None) -> None:
        self.replayer = Replayer(system, judge)
        self.system = system
        self.settings = settings or ReplayConfig()

    def verify(self, graph: ExecutionGraph, attribution: Attribution) -> Attribution:
        """`attribution` with its `check` (and, where needed, the blame moved, `joint` or `alternatives` set)."""
        spend = _Spend()
        try:
            return self._verify(graph, attribution, spend)
        except ReplayUnsupportedError as error:
            logger.info("replay cannot check %s: %s", attribution.question_id, error)
            return _checked(attribution, Check.UNVERIFIABLE, spend)

    def _verify(self, graph: ExecutionGraph, attribution: Attribution, spend: _Spend) -> Attribution:
        self.replayer.restored(graph)  # raises ReplayUnsupportedError early for a system without replay
        named = next((s for s in attribution.suspects if s.op == attribution.op), None)
        primary = named or _primary(graph, attribution)
        plans = self._plans(graph, attribution, primary)
        first = plans[0] if plans and plans[0].fault == primary and self._alone(graph, attribution, plans[0]) else None
        tried = None if first is None else self._rescues(graph, attribution, (first,), spend)
        if tried and first is not None:
            rest = [p for p in plans[1:] if self._alone(graph, attribution, p)]
            rescuing = self._alternatives(graph, attribution, first, rest, spend)
            return _checked(dataclasses.replace(attribution, alternatives=rescuing), Check.VERIFIED, spend)
        others = [p for p in plans if p is not first and p.fault != primary and self._alone(graph, attribution, p)]
        reserve = JOINT_RESERVE if len(plans) > 1 else 0
        for plan in others:
            if self._exhausted(spend, reserve):
                break
            if self._rescues(graph, attribution, (plan,), spend):
                return _checked(_reblamed(attribution, plan.fault, primary), Check.VERIFIED, spend)
        for subset in self._subsets(plans):
            if self._exhausted(spend):
                break
            if self._rescues(graph, attribution, subset, spend):
                return _checked(_joint(attribution, tuple(p.fault for p in subset)), Check.VERIFIED, spend)
        return _checked(attribution, Check.UNVERIFIABLE if tried is None else Check.REFUTED, spend)

    @staticmethod
    def _alone(graph: ExecutionGraph, attribution: Attribution, plan: RepairPlan) -> bool:
        """Whether `plan` is a repair on its own: an answer repair only when the recorded context has a line
        carrying the evidence, a swap only of a unit in memory when the search ran."""
        if plan.kind == Repair.SWAP:
            return any(swappable(graph, unit, plan.fault.op) for unit in plan.missed)
        return plan.kind != Repair.ANSWER or answer_repairable(graph, attribution, plan.fault)

    def _plans(self, graph: ExecutionGraph, attribution: Attribution, primary: Fault) -> list[RepairPlan]:
        """The repairs to try: the blamed operation's, then the other suspects' and the extra faults' in pipeline
        order (faults without a repair left out)."""
        faults = [primary, *sorted((s for s in attribution.suspects if s.op != primary.op), key=lambda f: f.seq)]
        extra = [
            answer_fault(graph, attribution), *reader_faults(self.system, graph, attribution),
            steering_fault(self.system, graph, attribution, primary),
            retrieval_knob_fault(self.system, graph, attribution),
        ]
        faults += [f for f in extra if f is not None and all((f.op, f.tunable) != (g.op, g.tunable) for g in faults)]
        return [plan for fault in faults if (plan := plan_repair(self.system, graph, fault)) is not None]

    def _alternatives(
        self, graph: ExecutionGraph, attribution: Attribution, first: RepairPlan, rest: list[RepairPlan], spend: _Spend
    ) -> tuple[Fault, ...]:
        """The other single repairs of another kind (knob beside prompt) that also rescue alone."""
        found = []
        for plan in rest:
            if plan.fault.tunable == first.fault.tunable or plan.fault.stage == first.fault.stage:
                continue
            if self._exhausted(spend):
                break
            if self._rescues(graph, attribution, (plan,), spend):
                found.append(plan.fault)
        return tuple(found)

    def _subsets(self, plans: list[RepairPlan]) -> Iterator[tuple[RepairPlan, ...]]:
        """Sets of 2 up to `max_joint` repairs, smallest first: those with the blamed one first, then those
        repairing distinct stages, then by `_PATH_RANK` and pipeline order; each in pipeline order."""
        order = [(_PATH_RANK.get(p.kind, 2), i) for i, p in enumerate(plans)]
        for size in range(2, min(self.settings.max_joint, len(plans)) + 1):
            combos = itertools.combinations(range(len(plans)), size)
            chosen = sorted(combos, key=lambda c: (c[0] != 0, _overlap(plans, c), [order[i] for i in c]))
            for combo in chosen:
                yield tuple(sorted((plans[i] for i in combo), key=lambda p: p.fault.seq))

    def _rescues(
        self, graph: ExecutionGraph, attribution: Attribution, plans: tuple[RepairPlan, ...], spend: _Spend
    ) -> bool | None:
        """Whether repairing `plans` together rescues the case (None: the system cannot make one of them)."""
        try:
            outcome = self.replayer.replay(graph, attribution, plans, spend.reruns)
        except ReplayUnsupportedError as error:
            logger.info("replay of %s cannot make a repair: %s", attribution.question_id, error)
            return None
        spend.replays += 1
        spend.calls += outcome.calls
        return outcome.rescued

    def _exhausted(self, spend: _Spend, reserve: int = 0) -> bool:
        """Whether the case's replays are spent (`reserve`: kept back for the joint sets)."""
        return spend.replays >= self.settings.max_replays - reserve


JOINT_RESERVE = 2  # replays of a case kept for joint sets when single repairs did not rescue it
# a partner of the blamed repair: the search's repairs, then the answer's, then other construction repairs (2)
_PATH_RANK = {Repair.WIDEN: 0, Repair.STEER: 0, Repair.SWAP: 0, Repair.ANSWER: 1}


def _overlap(plans: Sequence[RepairPlan], combo: tuple[int, ...]) -> int:
    """How many members of `combo` repair a stage another member already repairs."""
    stages = [plans[i].fault.stage for i in combo]
    return len(stages) - len(set(stages))


def _primary(graph: ExecutionGraph, attribution: Attribution) -> Fault:
    """The blamed operation as a fault, at its place in the pipeline (its sequence number)."""
    seq = graph.operation(attribution.op).seq if attribution.op in graph else 0
    return dataclasses.replace(attribution.primary(), seq=seq)


def _checked(attribution: Attribution, check: Check, spend: _Spend) -> Attribution:
    cost = dataclasses.replace(attribution.cost, replay_calls=attribution.cost.replay_calls + spend.calls)
    return dataclasses.replace(attribution, check=check, cost=cost)


def _reblamed(attribution: Attribution, fault: Fault, primary: Fault) -> Attribution:
    return dataclasses.replace(
        attribution, op=fault.op, op_name=fault.op_name, stage=fault.stage, error_type=fault.error_type,
        tunable=fault.tunable,
        reason=f"{fault.reason} (Replay: repairing {primary.op_name} ({primary.op}) alone did not rescue the "
        f"case; repairing {fault.op_name} ({fault.op}) did.)",
    )


def _joint(attribution: Attribution, faults: tuple[Fault, ...]) -> Attribution:
    first = faults[0]
    named = ", then ".join(f"{f.op_name} ({f.op}, {f.stage})" for f in faults)
    return dataclasses.replace(
        attribution, op=first.op, op_name=first.op_name, stage=first.stage, error_type=first.error_type,
        tunable=first.tunable, joint=faults,
        reason=f"{attribution.reason} (Replay: no single repair rescued the case; repairing {named} together did.)",
    )


class VerifyingAttributor:
    """Another attributor's verdicts, each checked by replay."""

    def __init__(self, inner: Attributor, verifier: Verifier) -> None:
        self.inner = inner
        self.verifier = verifier
        self.name = f"{inner.name}+replay"

    def attribute(
        self, graph: ExecutionGraph, case: CaseResult, conversation: Conversation | None = None
    ) -> Attribution | None:
        found = self.inner.attribute(graph, case, conversation)
        return None if found is None else self.verifier.verify(graph, found)

    def attribute_run(
        self, run: TracedRun, on_case: Callable[[CaseResult], None] | None = None, max_checked: int | None = None
    ) -> tuple[Attribution, ...]:
        """Every failure attributed by the inner attributor; `verification_sample` of them checked."""
        found = attributed_cases(self.inner, run, on_case)
        chosen = verification_sample([a.stage for _, a in found], max_checked)
        return tuple(self.verifier.verify(g, a) if i in chosen else a for i, (g, a) in enumerate(found))


def verification_sample(stages: Sequence[str], limit: int | None) -> frozenset[int]:
    """Indices of at most `limit` of the attributions blaming `stages` to check: one from each blamed
    stage in turn (stages by number of blames, then name; each stage's in order), until `limit` (None:
    all).

    >>> sorted(verification_sample("xxxyz", 3)), sorted(verification_sample("xxxyz", 4))
    ([0, 3, 4], [0, 1, 3, 4])
    """
    if limit is None or limit >= len(stages):
        return frozenset(range(len(stages)))
    counts = Counter(stages)
    order = sorted(counts, key=lambda s: (-counts[s], s))
    queues = [[i for i, s in enumerate(stages) if s == stage] for stage in order]
    chosen: list[int] = []
    for turn in itertools.zip_longest(*queues):
        chosen.extend(i for i in turn if i is not None)
    return frozenset(chosen[:limit])
