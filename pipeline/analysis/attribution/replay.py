"""Replay verification: would repairing the blamed operation alone have rescued the case?

For a blamed operation the replay repairs what it produced and re-runs only what lies downstream of
it, on the memory rebuilt from the graph (`MemorySystem.restore`, no LLM call) and with the prompts
the graph recorded:

- Extraction / Update / Deletion: the lost information (the evidence turn, the overwritten or
  deleted unit) is put back in memory; retrieval, answer and judge run again. When the blame is on
  the knobs of a non-LLM construction stage (chunking, trimming) of a system whose construction makes
  no LLM call, the memory is instead built again from the graph's turns with that stage's knobs at
  their defaults ("change the blamed knob alone"; still no LLM call before retrieval).
- Retrieval blamed on the `top_k` knob: `top_k` is raised just enough to reach the unit the cut left
  out; retrieval, answer and judge run again.
- Retrieval blamed on a steering prompt (query expansion, sufficiency check): the search runs again
  with the steering output replaced by the missed unit's text as a query (`retrieve_steered`; the
  most favourable query there is), then answer and judge. A system without a steering step, or a
  search without a `top_k`: the missed unit is put into the retrieved context; answer and judge.
- Response: the answer is replaced by the gold answer; only the judge runs (this rules out a judge
  error, nothing more: the answer step is the last step, so its repair always rescues).

The attribution comes back with `verified=True` when the repaired run is judged correct. When the
blamed operation's repair alone does not rescue the case, the other suspects the attributor found on
the information's path are tried alone (a later one that rescues alone is the decisive fault and
takes the blame), then the earliest suspects together, up to `max_joint` (the decisive error set:
`joint`, in order). If nothing rescues the case, `verified=False`. LLM calls spent are counted in
`cost.replay_calls`; every replay traces into a buffer that is never committed, so the graph is not
changed. A system that cannot rebuild its memory leaves `verified=None`.

This module does not find attributions (the attributors do) and does not aggregate blame.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import dspy
from memtrace_loop.memory_systems.answering import AnswerOutcome, conversation_from_graph, respond
from memtrace_loop.memory_systems.base import MemorySystem, ReplayUnsupportedError, RestoredUnit
from memtrace_loop.memory_systems.stages import StageRepair
from memtrace_loop.pipeline.analysis.attribution.protocol import Attributor
from memtrace_loop.pipeline.analysis.attribution.records import Attribution, Check, ErrorType, Fault, Tunable
from memtrace_loop.pipeline.analysis.evaluation import judge_answer
from memtrace_loop.pipeline.core.config import require
from memtrace_loop.pipeline.core.conventions import (
    MEMORY_KINDS,
    NEAR_MISSES,
    VarKind,
    answer_name,
    kind_of,
    prompt_name,
    query_name,
    retrieved_name,
)
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.records import CaseResult, Conversation, PromptSet
from memtrace_loop.pipeline.core.tracing import Tracer

logger = logging.getLogger(__name__)

CONSTRUCTION_ERRORS = frozenset({ErrorType.EXTRACTION, ErrorType.UPDATE, ErrorType.DELETION})


class Repair(StrEnum):
    """How a fault's output is repaired in a replay."""

    MEMORY = "memory"  # put the lost information back into memory
    REBUILD = "rebuild"  # build memory again with the blamed non-LLM stage's knobs at their defaults
    WIDEN = "widen"  # raise top_k to reach the unit the cut left out
    STEER = "steer"  # search again with the steering step's output replaced by a query for the missed unit
    CONTEXT = "context"  # put the missed unit into the retrieved context
    ANSWER = "answer"  # replace the answer by the gold answer


@dataclass(frozen=True)
class ReplaySettings:
    max_joint: int = 3  # the largest decisive error set tried when no single repair rescues a case

    def __post_init__(self) -> None:
        if self.max_joint < 1:
            raise ValueError(f"replay.max_joint must be at least 1, got {self.max_joint}")


@dataclass(frozen=True)
class ReplayConfig:
    """`attributor.replay`: the replay check's bounds (defaults: `ReplaySettings`)."""

    max_joint: int = ReplaySettings.max_joint  # the largest decisive error set tried

    def __post_init__(self) -> None:
        require(self, max_joint=(1, None))


@dataclass(frozen=True)
class ReplayOutcome:
    """One replay: the faults repaired together, the re-judged case and the LLM calls it spent."""

    faults: tuple[Fault, ...]
    result: CaseResult
    calls: int

    @property
    def rescued(self) -> bool:
        return self.result.correct


class Replayer:
    """Repairs what blamed operations produced and re-runs only what lies downstream of them."""

    def __init__(self, system: MemorySystem, judge: dspy.Predict, settings: ReplaySettings | None = None) -> None:
        self.system = system
        self.judge = judge
        self.settings = settings or ReplaySettings()
        self._held: tuple[ExecutionGraph, MemorySystem, Any] | None = None

    # ------------------------------------------------------------------ verification

    def verify(self, graph: ExecutionGraph, attribution: Attribution) -> Attribution:
        """`attribution` with `verified` (and, where needed, the blame moved or `joint` set) from replays."""
        primary = next((s for s in attribution.suspects if s.op == attribution.op), attribution.primary())
        suspects = attribution.suspects or (primary,)
        spent = 0
        try:
            outcome = self.replay(graph, attribution.case, (primary,))
            spent += outcome.calls
            if outcome.rescued:
                return _checked(attribution, True, spent)
            alternatives = [s for s in suspects if s.op != primary.op and self.repair_of(graph, s) != Repair.ANSWER]
            for suspect in (s for s in alternatives if self._repairable_alone(graph, s)):
                outcome = self.replay(graph, attribution.case, (suspect,))
                spent += outcome.calls
                if outcome.rescued:
                    return _reblamed(attribution, suspect, primary, spent)
            ordered = sorted({primary, *alternatives}, key=lambda f: f.seq)
            ordered = [f for f in ordered if self.repair_of(graph, f) != Repair.ANSWER]
            for size in range(2, min(self.settings.max_joint, len(ordered)) + 1):
                subset = tuple(ordered[:size])
                outcome = self.replay(graph, attribution.case, subset)
                spent += outcome.calls
                if outcome.rescued:
                    return _joint(attribution, subset, spent)
        except ReplayUnsupportedError as error:
            logger.info("replay skipped for %s: %s", attribution.question_id, error)
            return _checked(attribution, None, spent)
        return _checked(attribution, False, spent)

    def repair_of(self, graph: ExecutionGraph, fault: Fault) -> Repair:
        if fault.error_type in CONSTRUCTION_ERRORS:
            rebuildable = (
                fault.tunable == Tunable.KNOBS and not self.system.construction_stages
                and with_stage_defaults(self.system, fault.stage) is not None
            )
            return Repair.REBUILD if rebuildable else Repair.MEMORY
        if fault.error_type == ErrorType.RETRIEVAL:
            if fault.tunable == Tunable.KNOBS and self._widened_top_k(graph, fault) is not None:
                return Repair.WIDEN
            steerable = any(s.repair == StageRepair.STEER for s in self.system.stages)
            if fault.tunable == Tunable.PROMPT and fault.restore and steerable:
                return Repair.STEER
            return Repair.CONTEXT
        return Repair.ANSWER

    def _repairable_alone(self, graph: ExecutionGraph, fault: Fault) -> bool:
        """A retrieval can be repaired alone only when what it missed was in memory at question time."""
        if self.repair_of(graph, fault) != Repair.CONTEXT:
            return True
        return all(v in graph and graph.variable(v).kind in MEMORY_KINDS for v in fault.restore)

    # ------------------------------------------------------------------ one replay

    def replay(self, graph: ExecutionGraph, case: CaseResult, faults: Sequence[Fault]) -> ReplayOutcome:
        """Repair `faults` together, re-run what lies downstream, judge; the graph stays unchanged."""
        question = case.question
        system, state = self._restored(graph)
        tracer = Tracer(graph, buffered=True)
        repairs = {fault: self.repair_of(graph, fault) for fault in faults}
        if all(kind == Repair.ANSWER for kind in repairs.values()):
            query_var = _latest_id(graph, query_name(question.id))
            answer_var = tracer.variable(answer_name(question.id), VarKind.ANSWER, question.gold, {"replayed": True})
            result = judge_answer(self.judge, question, AnswerOutcome(question.gold, query_var, answer_var), tracer)
            return ReplayOutcome(tuple(faults), result, tracer.pending_calls())

        for fault, kind in repairs.items():
            if kind == Repair.REBUILD:  # the system makes no LLM call while building memory
                system = with_stage_defaults(system, fault.stage) or system
        if Repair.REBUILD in repairs.values():
            state = system.ingest(conversation_from_graph(graph), Tracer(ExecutionGraph(graph.graph_id)))
        units = [
            self._unit(graph, var_id) for fault, kind in repairs.items() if kind == Repair.MEMORY
            for var_id in fault.restore if var_id in graph
        ]
        if units:
            state = system.with_units(state, units, tracer)
        widest = max((self._widened_top_k(graph, f) or 0 for f, k in repairs.items() if k == Repair.WIDEN), default=0)
        if widest:
            system = widened(system, widest) or system
        steering = [
            graph.variable(v).value for f, k in repairs.items() if k == Repair.STEER for v in f.restore if v in graph
        ]
        steered = system.retrieve_steered(question, state, tracer, steering) if steering else None
        found = steered or system.retrieve(question, state, tracer)
        context, context_var = found.context, found.context_var
        missing = [
            graph.variable(var_id).value for fault, kind in repairs.items() if kind == Repair.CONTEXT
            for var_id in fault.restore if var_id in graph and graph.variable(var_id).value not in context
        ]
        if missing:
            context = "\n".join([context, *missing]) if context else "\n".join(missing)
            context_var = tracer.variable(
                retrieved_name(question.id), VarKind.CONTEXT, context, {"replayed": True}
            )
        outcome = respond(tracer, system.respond, question, found.query_var, context_var, context)
        result = judge_answer(self.judge, question, outcome, tracer)
        return ReplayOutcome(tuple(faults), result, tracer.pending_calls())

    # ------------------------------------------------------------------ helpers

    def _restored(self, graph: ExecutionGraph) -> tuple[MemorySystem, Any]:
        """The system with the prompts the graph recorded, and its memory rebuilt from the graph (kept
        for the graph seen last)."""
        if self._held is not None and self._held[0] is graph:
            return self._held[1], self._held[2]
        instruction_by_stage = {
            stage: var.value for stage in self.system.stage_names()
            if (var := graph.latest(prompt_name(stage))) is not None
        }
        system = self.system.with_prompts(PromptSet(instruction_by_stage))
        state = system.restore(graph)
        self._held = (graph, system, state)
        return system, state

    @staticmethod
    def _unit(graph: ExecutionGraph, var_id: str) -> RestoredUnit:
        var = graph.variable(var_id)
        return RestoredUnit(var.value, str(var.meta.get("time", "")), var.id)

    def _widened_top_k(self, graph: ExecutionGraph, fault: Fault) -> int | None:
        """The `top_k` that reaches what the fault's retrieval cut off (None when this system cannot widen)."""
        needed = needed_top_k(graph, fault)
        if needed is None or widened(self.system, needed) is None:
            return None
        return needed


def with_stage_defaults(system: MemorySystem, stage: str) -> MemorySystem | None:
    """A copy of `system` whose `stage` knobs (a `RESET_KNOBS` stage of its stage table) are at their
    defaults (None when they already are, or the stage has no knobs a rebuild can reset)."""
    fields = system.knob_fields_by_stage.get(stage, ())
    defaults = dataclasses.asdict(type(system.knobs)())
    current = system.knob_values()
    reset = {f: defaults[f] for f in fields if current[f] != defaults[f]}
    return system.with_knobs(reset) if reset else None


def widened(system: MemorySystem, top_k: int) -> MemorySystem | None:
    """A copy of `system` retrieving `top_k` units: the knob of its `WIDEN` stage (None without one)."""
    knob = next((s.knobs[0] for s in system.stages if s.repair == StageRepair.WIDEN and s.knobs), None)
    return None if knob is None else system.with_knobs({knob: top_k})


def needed_top_k(graph: ExecutionGraph, fault: Fault) -> int | None:
    """The `top_k` that reaches the deepest restored unit the fault's retrieval ranked below its cut (None
    when the retrieval did not rank it: a wider cut would not bring it back). Pure."""
    if fault.op not in graph:
        return None
    meta = graph.operation(fault.op).meta
    k, near = meta.get("k"), list(meta.get(NEAR_MISSES, ()))
    ranks = [near.index(v) + 1 for v in fault.restore if v in near]
    if not isinstance(k, int) or not ranks:
        return None
    return k + _episode_span(near, max(ranks))


def _episode_span(near: Sequence[str], rank: int) -> int:
    """How many ranked units the first `rank` near misses are (an episode and its events rank as one)."""
    if not any(kind_of(v) == VarKind.EPISODE for v in near):
        return rank
    return max(sum(1 for v in near[:rank] if kind_of(v) == VarKind.EPISODE), 1)


def _latest_id(graph: ExecutionGraph, name: str) -> str:
    var = graph.latest(name)
    return var.id if var is not None else name


def _checked(attribution: Attribution, verified: bool | None, spent: int) -> Attribution:
    cost = dataclasses.replace(attribution.cost, replay_calls=attribution.cost.replay_calls + spent)
    return dataclasses.replace(attribution, check=Check.of(verified), cost=cost)


def _reblamed(attribution: Attribution, fault: Fault, primary: Fault, spent: int) -> Attribution:
    moved = dataclasses.replace(
        attribution, op=fault.op, op_name=fault.op_name, stage=fault.stage, error_type=fault.error_type,
        tunable=fault.tunable,
        reason=f"{fault.reason} (Replay: repairing {primary.op_name} ({primary.op}) alone did not rescue the "
        f"case; repairing {fault.op_name} ({fault.op}) did.)",
    )
    return _checked(moved, True, spent)


def _joint(attribution: Attribution, faults: tuple[Fault, ...], spent: int) -> Attribution:
    first = faults[0]
    named = ", then ".join(f"{f.op_name} ({f.op}, {f.stage})" for f in faults)
    moved = dataclasses.replace(
        attribution, op=first.op, op_name=first.op_name, stage=first.stage, error_type=first.error_type,
        tunable=first.tunable, joint=faults,
        reason=f"{attribution.reason} (Replay: no single repair rescued the case; repairing {named} together did.)",
    )
    return _checked(moved, True, spent)


class VerifyingAttributor:
    """Another attributor's verdicts, each checked by a replay."""

    def __init__(self, inner: Attributor, replayer: Replayer) -> None:
        self.inner = inner
        self.replayer = replayer
        self.name = f"{inner.name}+replay"

    def attribute(
        self, graph: ExecutionGraph, case: CaseResult, conversation: Conversation | None = None
    ) -> Attribution | None:
        found = self.inner.attribute(graph, case, conversation)
        return None if found is None else self.replayer.verify(graph, found)
