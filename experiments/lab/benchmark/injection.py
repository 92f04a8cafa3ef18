"""Fault injection: perfect runs of a memory system with ONE fault at a known operation.

The candidates are the questions a perfect run (`perfect_prompts`, generous knobs) answers right from
one evidence turn. Per candidate and fault kind the question is run again with the fault its spec's
`faults` plan (`ReplyFault`: one LM reply edited, `experiments.lab.benchmark.edits`; `UnitChangeFault`:
the next decision changes the evidence units; `HideEvidenceFault`: search hides them; `KnobFault`:
knobs that lose the evidence), kept when the answer turns wrong; the truth is the operation that
carried it out, read from the faulty graph. It scores nothing (`experiments.lab.benchmark.scoring`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import dspy
from memtrace_loop.experiments.lab.benchmark.edits import (
    FaultInjectingEngine,
    ReplyEdit,
    change_shown_units_after,
    change_units_after,
    drop_added_actions,
    drop_events,
    drop_facts,
    drop_narrative,
    injected_lm,
    wrong_answer,
)
from memtrace_loop.experiments.lab.benchmark.scoring import BenchCase, FaultKind, InjectedFault
from memtrace_loop.memory_systems.base import MemorySystem
from memtrace_loop.memory_systems.registry import spec_of
from memtrace_loop.memory_systems.spec import EditKind, HideEvidenceFault, KnobFault, ReplyFault, UnitChangeFault
from memtrace_loop.pipeline.analysis.attribution.records import ErrorType, Tunable
from memtrace_loop.pipeline.analysis.judge import make_judge
from memtrace_loop.pipeline.core.conventions import answer_name, memory_name, retrieved_name, turn_name
from memtrace_loop.pipeline.core.graph import ExecutionGraph, Operation, variable_id
from memtrace_loop.pipeline.core.records import Conversation, Dataset, PromptSet, Question, Turn
from memtrace_loop.pipeline.loop.runner import RunResult, run_dataset


@dataclass(frozen=True)
class InjectionReport:
    """What a build did: candidates, injections tried, kept (decisive) and skipped per kind."""

    system: str
    questions: int
    perfect_correct: int
    candidates: int
    tried_by_kind: Mapping[str, int]
    kept_by_kind: Mapping[str, int]


def perfect_prompts(system: MemorySystem, complete: Callable[[str, Iterable[str]], str]) -> PromptSet:
    """Every stage's instruction completed by `complete(instruction, output_fields)` (the test world's)."""
    return PromptSet(
        {name: complete(p.signature.instructions, p.signature.output_fields) for name, p in system.named_predictors()}
    )


def _op_with_output(graph: ExecutionGraph, name: str) -> Operation | None:
    latest = graph.latest(name)
    return None if latest is None else graph.producer(latest.id)


@dataclass(frozen=True)
class _Plan:
    """One injection: the system and LM to run with, the operation that carried it out and its error type."""

    kind: FaultKind
    system: MemorySystem
    lm: dspy.LM
    engine: FaultInjectingEngine | None
    find: Callable[[ExecutionGraph], Operation | None]
    error: str


@dataclass
class FaultInjector:
    """Builds the injected cases of one system on one dataset: `system` holds the perfect prompts,
    `rebuild(knobs)` makes one with other knobs (the knob faults)."""

    name: str
    system: MemorySystem
    lm: dspy.LM
    dataset: Dataset
    rebuild: Callable[[Mapping[str, Any]], MemorySystem]
    workers: int = 4

    def __post_init__(self) -> None:
        self.spec = spec_of(self.name)

    @staticmethod
    def _run(system: MemorySystem, lm: dspy.LM, dataset: Dataset, workers: int) -> RunResult:
        system.set_lm(lm)  # every plan holds a system of its own (a deep copy or a rebuild)
        return run_dataset(system, make_judge(lm), dataset, workers=workers, exclude_categories=())

    def perfect_run(self) -> RunResult:
        return self._run(self.system.deepcopy(), self.lm, self.dataset, self.workers)

    def build(self, limit_per_kind: int | None = None, kinds: Sequence[FaultKind] | None = None,
              on_case: Callable[[str], None] | None = None) -> tuple[tuple[BenchCase, ...], InjectionReport]:
        """The decisive injected cases (at most `limit_per_kind` per kind), and a report."""
        perfect = self.perfect_run()
        conversation_by_id = {c.id: c for c in self.dataset.conversations}
        candidates = [r for r in perfect.results if r.correct and r.question.category != 5
                      and len(r.question.evidence) == 1]
        kinds = tuple(kinds or self.spec.fault_kinds)
        tried: dict[str, int] = {k.value: 0 for k in kinds}
        kept: dict[str, int] = {k.value: 0 for k in kinds}
        cases: list[BenchCase] = []
        for kind in kinds:
            for result in candidates:
                if limit_per_kind is not None and kept[kind.value] >= limit_per_kind:
                    break
                question = result.question
                conversation = conversation_by_id[question.conversation_id]
                graph = perfect.graph_by_conversation[question.conversation_id]
                for plan in self._plans(kind, question, conversation, graph):
                    tried[kind.value] += 1
                    case = self._inject(plan, question, conversation)
                    if on_case is not None:
                        on_case(kind.value)
                    if case is not None:
                        cases.append(case)
                        kept[kind.value] += 1
                        break
        return tuple(cases), InjectionReport(self.name, len(perfect.results), sum(r.correct for r in perfect.results),
                                             len(candidates), MappingProxyType(tried), MappingProxyType(kept))

    def _inject(self, plan: _Plan, question: Question, conversation: Conversation) -> BenchCase | None:
        run = self._run(plan.system, plan.lm, self.dataset.for_questions((question.id,)), 1)
        if plan.engine is not None and not plan.engine.fired:
            return None  # the target call never happened: nothing was injected
        (result,) = run.results
        if result.correct:
            return None  # the fault was not decisive
        graph = run.graph_by_conversation[question.conversation_id]
        if (op := plan.find(graph)) is None:
            return None
        tunable = Tunable.PROMPT if op.prompt is not None else Tunable.KNOBS
        return BenchCase(graph, result, conversation, InjectedFault(
            question.id, self.name, plan.kind, op.id, op.stage, ErrorType(plan.error), tunable))

    def _plans(self, kind: FaultKind, question: Question, conversation: Conversation,
               graph: ExecutionGraph) -> list[_Plan]:
        turn = next((t for t in conversation.turns if t.id == question.evidence[0]), None)
        if turn is None:
            return []
        plans: list[_Plan] = []
        for fault in self.spec.faults:
            if fault.kind != kind:
                continue
            if isinstance(fault, ReplyFault):
                plans.append(self._reply_plan(fault, question, turn))
            elif isinstance(fault, UnitChangeFault):
                plans.extend(self._unit_change_plan(fault, turn, graph))
            elif isinstance(fault, HideEvidenceFault):
                hidden = fault.hide(self.system, graph, turn.id)
                if hidden is not None:
                    plans.append(_Plan(kind, hidden, self.lm, None,
                                       lambda g: _op_with_output(g, retrieved_name(question.id)), fault.error))
            else:
                plans.extend(self._knob_plans(fault, conversation, turn, graph))
        return plans

    def _reply_plan(self, fault: ReplyFault, question: Question, turn: Turn) -> _Plan:
        """The LM with each of `fault.edits` chained around it (the first edit's call must happen)."""
        lm, engine = self.lm, None
        for edit in fault.edits:
            lm, edited = injected_lm(lm, _reply_edit(edit, question, turn))
            engine = engine or edited
        if fault.stage:
            turn_var = variable_id(turn_name(turn.id), 1)
            stage = fault.stage

            def found(g: ExecutionGraph) -> Operation | None:
                ops = [o for o in g.operations() if o.stage == stage]
                # the stage reading the turn, else one reading what was derived from it (a decision)
                return next((o for o in ops if turn_var in o.inputs), None) or next(
                    (o for o in ops if o.outputs and turn_var in g.ancestors(o.outputs[0])), None)
        else:
            def found(g: ExecutionGraph) -> Operation | None:
                return _op_with_output(g, answer_name(question.id))
        return _Plan(fault.kind, self.system.deepcopy(), lm, engine, found, fault.error)

    def _unit_change_plan(self, fault: UnitChangeFault, turn: Turn, graph: ExecutionGraph) -> list[_Plan]:
        units = fault.units(graph, turn.id)
        if not units:
            return []
        targets = {variable_id(memory_name(u), 1) for u in units}

        def changed(g: ExecutionGraph) -> Operation | None:
            # the store operation that changed an evidence unit; the decision that ordered it is the fault
            for op in g.operations():
                if op.name == fault.store_op and any(variable_id(g.variable(i).name, 1) in targets for i in op.inputs):
                    return g.producer(op.inputs[0])
            return None

        if fault.edit == EditKind.CHANGE_SHOWN_UNITS:  # the decision names units by the texts it was shown
            texts = tuple(graph.variable(variable_id(memory_name(u), 1)).value for u in units)
            edit = change_shown_units_after(turn.text, texts, fault.event)
        else:
            edit = change_units_after(turn.text, units, fault.event)
        lm, engine = injected_lm(self.lm, edit)
        return [_Plan(fault.kind, self.system.deepcopy(), lm, engine, changed, fault.error)]

    def _knob_plans(self, fault: KnobFault, conversation: Conversation, turn: Turn,
                    graph: ExecutionGraph) -> list[_Plan]:
        plans = []
        for knobs in fault.settings(self.system, graph, conversation, turn):
            try:
                system = self.rebuild(knobs)
            except ValueError:
                continue
            plans.append(_Plan(fault.kind, system, self.lm, None, lambda g: fault.caused(g, turn.id), fault.error))
        return plans


def _reply_edit(edit: EditKind, question: Question, turn: Turn) -> ReplyEdit:
    if edit == EditKind.WRONG_ANSWER:
        return wrong_answer(question.text)
    return {EditKind.DROP_FACTS: drop_facts, EditKind.DROP_EVENTS: drop_events,
            EditKind.DROP_NARRATIVE: drop_narrative, EditKind.DROP_ACTION: drop_added_actions}[edit](turn.text)


def build_system_cases(
    name: str, lm: dspy.LM, dataset: Dataset, build: Callable[[Mapping[str, Any]], MemorySystem],
    complete: Callable[[str, Iterable[str]], str], *, limit_per_kind: int | None = None,
    kinds: Sequence[FaultKind] | None = None, workers: int = 4, on_case: Callable[[str], None] | None = None,
) -> tuple[tuple[BenchCase, ...], InjectionReport]:
    """The injected cases of system `name`: `build` makes it from its config node (the spec's
    `generous_knobs` plus a fault's knobs), `complete` perfects each prompt; one run per injection."""
    generous = spec_of(name).generous_knobs

    def rebuild(extra: Mapping[str, Any]) -> MemorySystem:
        system = build({"name": name, **generous, **extra})
        return system.with_prompts(perfect_prompts(system, complete))

    return FaultInjector(name, rebuild({}), lm, dataset, rebuild, workers).build(limit_per_kind, kinds, on_case)
