"""One replay: repair some blamed operations together, re-run what lies downstream, judge the answer.

Memory is rebuilt from the graph (`MemorySystem.restore`, no LLM) with the recorded prompts and knobs, each
fault repaired as its `RepairPlan` says (`repairs`). Replays trace into a buffer never committed: the graph
is not changed; LLM calls are counted. Which replays to try and what they prove is `verification`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dspy
from memtrace_loop.memory_systems.answering import conversation_from_graph, respond
from memtrace_loop.memory_systems.base import MemorySystem, ReplayUnsupportedError, RestoredUnit, Retrieved
from memtrace_loop.memory_systems.stages import StageRepair
from memtrace_loop.pipeline.analysis.attribution.records import Attribution
from memtrace_loop.pipeline.analysis.attribution.repairs import (
    Repair,
    RepairPlan,
    answer_hint,
    construction_hint,
    evidence_lines,
    evidence_texts,
    evidence_units,
    reach,
    steer_hint,
    superseded,
    swappable,
    widen_spec,
)
from memtrace_loop.pipeline.analysis.judge import judge_answer
from memtrace_loop.pipeline.core.conventions import (
    KNOBS_META,
    MEMORY_KINDS,
    NEAR_MISSES,
    OpKind,
    VarKind,
    name_of,
    prompt_name,
    retrieved_name,
)
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.records import CaseResult, PromptSet, Question
from memtrace_loop.pipeline.core.tracing import Tracer

REACH_ROUNDS = 3  # searches a replay makes to find how deep a repaired unit ranks


@dataclass(frozen=True)
class ReplayOutcome:
    """One replay: the repairs made together, the re-judged case and the LLM calls it spent."""

    plans: tuple[RepairPlan, ...]
    result: CaseResult
    calls: int

    @property
    def rescued(self) -> bool:
        return self.result.correct


class Replayer:
    """Repairs what blamed operations produced and re-runs only what lies downstream of them."""

    def __init__(self, system: MemorySystem, judge: dspy.Predict) -> None:
        self.system = system
        self.judge = judge

    def restored(self, graph: ExecutionGraph) -> tuple[MemorySystem, Any]:
        """The system with the run's recorded prompts and knobs, and its memory rebuilt from the graph."""
        instruction_by_stage = {
            stage: var.value
            for stage in self.system.stage_names()
            if (var := graph.latest(prompt_name(stage))) is not None
        }
        knobs = graph.meta.get(KNOBS_META)
        system = self.system.with_knobs(_changed(self.system, knobs)) if isinstance(knobs, Mapping) else self.system
        system = system.with_prompts(PromptSet(instruction_by_stage))
        return system, system.restore(graph)

    def replay(
        self, graph: ExecutionGraph, attribution: Attribution, plans: Sequence[RepairPlan],
        reruns: dict[str, tuple[RestoredUnit, ...]] | None = None,
    ) -> ReplayOutcome:
        """Make `plans` together, re-run what lies downstream, judge; the graph stays unchanged."""
        question = attribution.case.question
        system, state = self.restored(graph)
        tracer = Tracer(graph, buffered=True)
        kinds = {p.kind for p in plans}
        for plan in (p for p in plans if p.kind == Repair.REBUILD):
            system = with_stage_defaults(system, plan.fault.stage) or system
        if Repair.REBUILD in kinds:  # the system makes no LLM call while building memory
            state = system.ingest(conversation_from_graph(graph), Tracer(ExecutionGraph(graph.graph_id)))
        memo = {} if reruns is None else reruns
        reran = [p for p in plans if p.kind == Repair.RERUN]
        units = [u for p in reran for u in _rerun(system, graph, attribution, p, tracer, memo)]
        if units:
            state = system.with_units(state, units, tracer)
        widest = max((p.top_k for p in plans if p.kind == Repair.WIDEN), default=0)
        if widest:
            system = widened(system, widest) or system
        probed: Retrieved | None = None  # the reaching search, when it already was the final one
        if widest and units:  # the repaired units are ranked only now: widen to reach them
            texts = {u.text for u in units} | {graph.variable(v).value for p in plans for v in p.missed}
            system, probed = self._reaching(system, question, state, tracer, texts, widest)
        steering = [
            q for p in plans if p.kind == Repair.STEER for q in self._steer(system, graph, attribution, p, tracer)
        ]
        found = (system.retrieve_steered(question, state, tracer, steering) if steering else None) or probed or (
            system.retrieve(question, state, tracer)
        )
        swaps = [p for p in plans if p.kind == Repair.SWAP]
        if swaps:
            revived = {p.fault.op for p in reran}
            missed = [v for p in swaps for v in p.missed if swappable(graph, v, p.fault.op, revived)]
            found = _swapped(graph, found, missed, tracer, question.id)
        responder = system.respond
        if Repair.ANSWER in kinds:
            repaired = [u.text for u in units]
            carriers = repaired + evidence_units(graph, attribution)
            lines = superseded(evidence_lines(found.context, evidence_texts(graph, attribution), carriers), repaired)
            responder = _hinted(system.respond, answer_hint(lines)) if lines else responder
        outcome = respond(tracer, responder, question, found.query_var, found.context_var, found.context)
        result = judge_answer(self.judge, question, outcome, tracer)
        return ReplayOutcome(tuple(plans), result, tracer.pending_calls())

    @staticmethod
    def _reaching(
        system: MemorySystem, question: Question, state: Any, tracer: Tracer, texts: set[str], top_k: int
    ) -> tuple[MemorySystem, Retrieved | None]:
        """`system` widened from `top_k` just enough that its search holds `texts` (the repaired and the missed
        units) as the replayed memory ranks them, in up to `REACH_ROUNDS` searches; and that search when final."""
        spec = widen_spec(system)
        stage, k, reached = None if spec is None else spec.name, top_k, top_k
        found: Retrieved | None = None
        searched_at = k
        for _ in range(REACH_ROUNDS):
            found, searched_at = (widened(system, k) or system).retrieve(question, state, tracer), k
            ranked = None if stage is None else tracer.pending_operation(stage)
            if ranked is None:
                break
            near = [(v, tracer.value_of(v)) for v in ((ranked.get("meta") or {}).get(NEAR_MISSES, ()))]
            hits = {tracer.value_of(v) for v in ranked["inputs"]}
            reached, complete = reach(k, hits, near, texts)
            if complete or not near:
                break
            k += len(near)
        final = widened(system, reached) or system if reached > top_k else system
        return final, found if reached == searched_at else None

    # ------------------------------------------------------------------ stage re-runs

    def _steer(
        self, system: MemorySystem, graph: ExecutionGraph, attribution: Attribution, plan: RepairPlan, tracer: Tracer
    ) -> list[str]:
        """The queries the steering stages write when called again with a hint quoting the missed units
        (the evidence turns when the search missed no unit that was in memory)."""
        call = system.recorded_call(graph, plan.fault.op)
        missed = [graph.variable(v).value for v in plan.missed]
        hint = steer_hint(missed or evidence_texts(graph, attribution))
        queries: list[str] = []
        for stage in (s.name for s in system.stages if s.repair == StageRepair.STEER):
            predictor = _predictor(system, stage)
            if "queries" not in predictor.signature.output_fields:
                continue
            prediction = _call(system, stage, hint, call.inputs, tracer, OpKind.RETRIEVAL)
            queries += [str(q) for q in (getattr(prediction, "queries", None) or ())]
        return queries


def _rerun(
    system: MemorySystem, graph: ExecutionGraph, attribution: Attribution, plan: RepairPlan, tracer: Tracer,
    memo: dict[str, tuple[RestoredUnit, ...]],
) -> tuple[RestoredUnit, ...]:
    """What the blamed construction stage writes when called again with the hint of the evidence it
    must keep (nothing when the call fails); called once per operation and `memo`."""
    if plan.fault.op not in memo:
        call = system.recorded_call(graph, plan.fault.op)
        hint = construction_hint(evidence_texts(graph, attribution, plan.fault.op), attribution.case.question.gold)
        kind = graph.operation(plan.fault.op).kind
        prediction = _call(system, call.stage, hint, call.inputs, tracer, OpKind(kind))
        memo[plan.fault.op] = () if prediction is None else system.repaired_units(graph, plan.fault.op, prediction)
    return memo[plan.fault.op]


def _predictor(system: MemorySystem, stage: str) -> dspy.Predict:
    by_name = dict(system.named_predictors())
    if stage not in by_name:
        raise ReplayUnsupportedError(f"memory system {system.name!r} has no predictor {stage!r}")
    return by_name[stage]


def _hinted(predictor: dspy.Predict, hint: str) -> dspy.Predict:
    """A copy of `predictor` whose instruction ends with `hint`."""
    copy = predictor.deepcopy()
    copy.signature = predictor.signature.with_instructions(f"{predictor.signature.instructions.strip()} {hint}")
    return copy


def _call(system: MemorySystem, stage: str, hint: str, inputs: Mapping[str, Any], tracer: Tracer, kind: OpKind) -> Any:
    """`stage`'s predictor called with `hint` added, traced into the replay's buffer; None when it failed."""
    with tracer.stage(
        _hinted(_predictor(system, stage), hint), stage, op=f"repair_{stage}", kind=kind, inputs=[], **dict(inputs)
    ) as called:
        return called.prediction if called.ok else None


def _swapped(
    graph: ExecutionGraph, found: Retrieved, missed: Sequence[str], tracer: Tracer, question_id: str
) -> Retrieved:
    """`found` with each missed unit's text in place of the lowest-ranked hit still in the context."""
    context = found.context
    hits = [graph.variable(v).value for v in _ranked_hits(graph, found) if graph.variable(v).value in context]
    for var_id in missed:
        text = graph.variable(var_id).value
        if text in context:
            continue
        context = context.replace(hits.pop(), text, 1) if hits else "\n".join(filter(None, (context, text)))
    if context == found.context:
        return found
    context_var = tracer.variable(retrieved_name(question_id), VarKind.CONTEXT, context, {"replayed": True})
    return Retrieved(found.query_var, context_var, context)


def _ranked_hits(graph: ExecutionGraph, found: Retrieved) -> list[str]:
    """The memory units the recorded retrieval returned, best first (the graph's retrieval inputs)."""
    recorded = graph.latest(name_of(found.context_var))
    op = graph.producer(recorded.id) if recorded is not None else None
    return [] if op is None else [v for v in op.inputs if graph.variable(v).kind in MEMORY_KINDS]


def _changed(system: MemorySystem, knobs: Mapping[str, Any]) -> dict[str, Any]:
    current = system.knob_values()
    return {k: v for k, v in knobs.items() if k in current and current[k] != v}


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
    spec = widen_spec(system)
    return None if spec is None else system.with_knobs({spec.knobs[0]: top_k})
