"""Fault injection: runs where everything is perfect except ONE fault at a known operation.

The attribution benchmark's ground truth. For one memory system, a *perfect* run (every prompt holds
the rules under which its stage makes no mistake, retrieval returns everything) answers nearly every
question; its correctly answered questions with exactly one evidence turn are the candidates. For
each candidate and each fault kind the system supports, the question is run again (its conversation
alone) with one fault injected, and the case is kept only when that run fails (the fault was
decisive). The truth — operation id, stage, error type — is read from the faulty run's graph: the
operation that executed the injected call or change, never guessed.

How a fault is injected:
- LLM faults (`extraction_drop`, `update_overwrite`, `deletion`, `response_wrong`) go through a
  wrapping engine (`pipeline.benchmark.edits.FaultInjectingEngine`) around the task LM's engine: it
  forwards every request and alters the reply of the ONE call that matches the target (the stage's
  output fields and the evidence turn or the question in the request); every other call is untouched.
- `retrieval_miss`: a copy of the system whose answer-time search never returns the units holding the
  evidence turn (a thin wrapper over its store or its episode search).
- `trimmed_buffer` (Long-Context): the window knob set so that the evidence entry is trimmed.
- `chunk_split` (RAG): the chunk-size knob set so that a chunk boundary splits the evidence turn.

This module does not score attributions (`pipeline.benchmark.scoring`) or print.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import dspy
from memtrace_loop.memory_systems.base import MemorySystem
from memtrace_loop.pipeline.analysis.attribution.records import ErrorType, Tunable
from memtrace_loop.pipeline.benchmark.edits import (
    FaultInjectingEngine,
    ReplyEdit,
    change_units_after,
    drop_events,
    drop_facts,
    drop_narrative,
    injected_lm,
    wrong_answer,
)
from memtrace_loop.pipeline.benchmark.scoring import BenchCase, FaultKind, InjectedFault
from memtrace_loop.pipeline.core.conventions import answer_name, entry_name, memory_name, retrieved_name, turn_name
from memtrace_loop.pipeline.core.graph import ExecutionGraph, Operation, variable_id
from memtrace_loop.pipeline.core.records import Conversation, Dataset, PromptSet, Question
from memtrace_loop.pipeline.loop.runner import ProgressSink, make_judge, run_dataset

logger = logging.getLogger(__name__)


KINDS_BY_SYSTEM: Mapping[str, tuple[FaultKind, ...]] = MappingProxyType(
    {
        "long_context": (FaultKind.TRIMMED_BUFFER, FaultKind.RESPONSE_WRONG),
        "rag": (FaultKind.CHUNK_SPLIT, FaultKind.RETRIEVAL_MISS, FaultKind.RESPONSE_WRONG),
        "mem0": (
            FaultKind.EXTRACTION_DROP, FaultKind.UPDATE_OVERWRITE, FaultKind.DELETION, FaultKind.RETRIEVAL_MISS,
            FaultKind.RESPONSE_WRONG,
        ),
        "evermemos": (FaultKind.EXTRACTION_DROP, FaultKind.RETRIEVAL_MISS, FaultKind.RESPONSE_WRONG),
    }
)
# The knobs under which retrieval and windows lose nothing ("generous"), per system.
PERFECT_KNOBS_BY_SYSTEM: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {
        "long_context": MappingProxyType({"window_tokens": 1_000_000}),
        "rag": MappingProxyType({"top_k": 1000}),
        "mem0": MappingProxyType({"top_k": 1000}),
        "evermemos": MappingProxyType({"top_k": 1000}),
    }
)


@dataclass(frozen=True)
class InjectionReport:
    """What a build did: candidates, injections tried, kept (decisive) and skipped per kind."""

    system: str
    questions: int
    perfect_correct: int
    candidates: int
    tried_by_kind: Mapping[str, int]
    kept_by_kind: Mapping[str, int]


# --------------------------------------------------------------------------- retrieval wrappers


class _FilteredStore:
    """A vector store whose search never returns the dropped units (it asks for more to keep k)."""

    def __init__(self, store: Any, dropped: frozenset[str]) -> None:
        self._store = store
        self._dropped = dropped

    def search(self, query: str, k: int, vector: Any = None) -> list[Any]:
        hits = self._store.search(query, k + len(self._dropped), vector)
        return [h for h in hits if h.unit.id not in self._dropped][:k]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def without_units(system: MemorySystem, unit_ids: frozenset[str]) -> MemorySystem:
    """A copy of a store-backed system (Mem0, RAG) whose answer-time search skips `unit_ids`."""
    patched = system.deepcopy()
    inner = type(system).answer

    def answer(question: Question, state: Any, tracer: Any) -> Any:
        filtered = dataclasses.replace(state, store=_FilteredStore(state.store, unit_ids))
        return inner(patched, question, filtered, tracer)

    object.__setattr__(patched, "answer", answer)
    return patched


def without_episodes(system: MemorySystem, turn_id: str) -> MemorySystem:
    """A copy of the EverMemOS system whose answer-time search skips the episodes holding `turn_id`."""
    patched = system.deepcopy()
    inner = type(system).search

    def search(query: str, state: Any) -> list[list[int]]:
        dropped = {i for i, e in enumerate(state.episodes) if turn_id in e.turn_ids}
        return [[i for i in ranking if i not in dropped] for ranking in inner(patched, query, state)]

    object.__setattr__(patched, "search", search)
    return patched


# --------------------------------------------------------------------------- building cases


def perfect_prompts(system: MemorySystem, complete: Callable[[str, Iterable[str]], str]) -> PromptSet:
    """Every stage's instruction completed by `complete(instruction, output_fields)` (for the simulated
    world: `pipeline.backends.registry.sim_rule_instruction`)."""
    return PromptSet(
        {name: complete(p.signature.instructions, p.signature.output_fields) for name, p in system.named_predictors()}
    )


def _single(dataset: Dataset, question: Question) -> Dataset:
    conversations = tuple(c for c in dataset.conversations if c.id == question.conversation_id)
    return dataclasses.replace(dataset, conversations=conversations, questions=(question,))


def _op_with_output(graph: ExecutionGraph, name: str) -> Operation | None:
    latest = graph.latest(name)
    return None if latest is None else graph.producer(latest.id)


def _ops(graph: ExecutionGraph, stage: str, input_id: str | None = None) -> list[Operation]:
    return [o for o in graph.operations() if o.stage == stage and (input_id is None or input_id in o.inputs)]


def _evidence_units(graph: ExecutionGraph, turn_id: str) -> tuple[str, ...]:
    """Mem0 unit ids whose first version the evidence turn added."""
    found = []
    for var in graph.variables():
        if var.name.startswith(memory_name("")) and var.version == 1 and var.meta.get("turn") == turn_id:
            found.append(var.name[len(memory_name("")) :])
    return tuple(found)


@dataclass(frozen=True)
class _Plan:
    """One injection: the system and LM to run with, and how to read the truth from the graph."""

    kind: FaultKind
    system: MemorySystem
    lm: dspy.LM
    engine: FaultInjectingEngine | None
    truth: Callable[[ExecutionGraph], tuple[Operation, ErrorType] | None]


class FaultInjector:
    """Builds the injected cases of one system on one dataset. `system` should already hold the
    perfect prompts; `knobs` replaces its knobs record (generous retrieval) and `rebuild(knobs)` makes
    a system with other knobs (for the knob faults)."""

    def __init__(
        self,
        name: str,
        system: MemorySystem,
        lm: dspy.LM,
        dataset: Dataset,
        rebuild: Callable[[Mapping[str, Any]], MemorySystem],
        *,
        exclude_categories: Sequence[int] = (5,),
        workers: int = 4,
    ) -> None:
        self.name = name
        self.system = system
        self.lm = lm
        self.dataset = dataset
        self.rebuild = rebuild
        self.exclude_categories = tuple(exclude_categories)
        self.workers = workers

    @staticmethod
    def _run(system: MemorySystem, lm: dspy.LM, dataset: Dataset, workers: int) -> Any:
        system.set_lm(lm)  # every plan holds a system of its own (a deep copy or a rebuild)
        return run_dataset(system, make_judge(lm), dataset, workers=workers, exclude_categories=())

    def perfect_run(self, progress: ProgressSink | None = None) -> Any:
        system = self.system.deepcopy()
        system.set_lm(self.lm)
        return run_dataset(
            system, make_judge(self.lm), self.dataset, workers=self.workers, exclude_categories=(),
            progress=progress,
        )

    def build(
        self,
        limit_per_kind: int | None = None,
        kinds: Sequence[FaultKind] | None = None,
        on_case: Callable[[str], None] | None = None,
    ) -> tuple[tuple[BenchCase, ...], InjectionReport]:
        """The decisive injected cases (at most `limit_per_kind` per kind), and a report."""
        perfect = self.perfect_run()
        conversation_by_id = {c.id: c for c in self.dataset.conversations}
        candidates = [
            r for r in perfect.results
            if r.correct and r.question.category not in self.exclude_categories and len(r.question.evidence) == 1
        ]
        kinds = tuple(kinds or KINDS_BY_SYSTEM[self.name])
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
        report = InjectionReport(
            self.name, len(perfect.results), sum(r.correct for r in perfect.results), len(candidates),
            MappingProxyType(tried), MappingProxyType(kept),
        )
        return tuple(cases), report

    def _inject(self, plan: _Plan, question: Question, conversation: Conversation) -> BenchCase | None:
        run = self._run(plan.system, plan.lm, _single(self.dataset, question), 1)
        if plan.engine is not None and not plan.engine.fired:
            return None  # the target call never happened: nothing was injected
        (result,) = run.results
        if result.correct:
            return None  # the fault was not decisive
        graph = run.graph_by_conversation[question.conversation_id]
        found = plan.truth(graph)
        if found is None:
            return None
        op, error_type = found
        tunable = Tunable.PROMPT if op.prompt is not None else Tunable.KNOBS
        truth = InjectedFault(question.id, self.name, plan.kind, op.id, op.stage, error_type, tunable)
        return BenchCase(graph, result, conversation, truth)

    def _plans(  # noqa: C901 - reworked by the system-spec change
        self, kind: FaultKind, question: Question, conversation: Conversation, graph: ExecutionGraph
    ) -> list[_Plan]:
        turn_id = question.evidence[0]
        turn = next((t for t in conversation.turns if t.id == turn_id), None)
        if turn is None:
            return []
        turn_var = variable_id(turn_name(turn_id), 1)

        def llm_plan(edit: ReplyEdit, truth: Callable[[ExecutionGraph], tuple[Operation, ErrorType] | None]) -> _Plan:
            lm, engine = injected_lm(self.lm, edit)
            return _Plan(kind, self.system.deepcopy(), lm, engine, truth)

        def first(stage: str, error: ErrorType, input_id: str | None = None) -> Callable[..., Any]:
            def truth(g: ExecutionGraph) -> tuple[Operation, ErrorType] | None:
                ops = _ops(g, stage, input_id)
                return (ops[0], error) if ops else None

            return truth

        if kind == FaultKind.RESPONSE_WRONG:
            def answered(g: ExecutionGraph) -> tuple[Operation, ErrorType] | None:
                op = _op_with_output(g, answer_name(question.id))
                return None if op is None else (op, ErrorType.RESPONSE)

            return [llm_plan(wrong_answer(question.text), answered)]
        if kind == FaultKind.RETRIEVAL_MISS:
            def retrieved(g: ExecutionGraph) -> tuple[Operation, ErrorType] | None:
                op = _op_with_output(g, retrieved_name(question.id))
                return None if op is None else (op, ErrorType.RETRIEVAL)

            if self.name == "evermemos":
                return [_Plan(kind, without_episodes(self.system, turn_id), self.lm, None, retrieved)]
            if self.name == "mem0":
                units = _evidence_units(graph, turn_id)
            elif self.name == "rag":
                units = tuple(
                    f"c{index}" for index, op in enumerate(_ops(graph, "chunk"), start=1) if turn_var in op.inputs
                )
            else:
                return []
            if not units:
                return []
            return [_Plan(kind, without_units(self.system, frozenset(units)), self.lm, None, retrieved)]
        if kind == FaultKind.EXTRACTION_DROP and self.name == "mem0":
            return [llm_plan(drop_facts(turn.text), first("extract", ErrorType.EXTRACTION, turn_var))]
        if kind == FaultKind.EXTRACTION_DROP and self.name == "evermemos":
            # the fact never makes it into any unit: both writers of the episode lose it (a narrative that
            # still states it holds the information, so losing only the events is no extraction error);
            # the truth is the first writer that lost it
            events_lm, events_engine = injected_lm(self.lm, drop_events(turn.text))
            both_lm, _ = injected_lm(events_lm, drop_narrative(turn.text))
            return [_Plan(kind, self.system.deepcopy(), both_lm, events_engine,
                          first("write_events", ErrorType.EXTRACTION, turn_var))]
        if kind in (FaultKind.UPDATE_OVERWRITE, FaultKind.DELETION) and self.name == "mem0":
            units = _evidence_units(graph, turn_id)
            if not units:
                return []
            event, error, op_name = (
                ("UPDATE", ErrorType.UPDATE, "memory_update") if kind == FaultKind.UPDATE_OVERWRITE
                else ("DELETE", ErrorType.DELETION, "memory_delete")
            )

            def changed(g: ExecutionGraph) -> tuple[Operation, ErrorType] | None:
                # the store operation that changed an evidence unit; the decision that ordered it is the fault
                targets = {variable_id(memory_name(u), 1) for u in units}
                for op in g.operations():
                    if op.name == op_name and any(_first_version(g, i) in targets for i in op.inputs):
                        decider = g.producer(op.inputs[0])
                        return (decider, error) if decider is not None else None
                return None

            return [llm_plan(change_units_after(turn.text, units, event), changed)]
        if kind == FaultKind.TRIMMED_BUFFER and self.name == "long_context":
            later = conversation.turns[conversation.turns.index(turn) + 1 :]
            entries = [graph.latest(entry_name(t.id)) for t in later]
            tokens = [int(e.meta.get("tokens", 0)) if e is not None else 0 for e in entries]
            if not later or not all(tokens):
                return []
            system = self.rebuild({"window_tokens": sum(tokens)})

            def trimmed(g: ExecutionGraph) -> tuple[Operation, ErrorType] | None:
                ops = [o for o in _ops(g, "trim") if turn_id in o.meta.get("trimmed", ())]
                return (ops[0], ErrorType.UPDATE) if ops else None

            return [_Plan(kind, system, self.lm, None, trimmed)]
        if kind == FaultKind.CHUNK_SPLIT and self.name == "rag":
            counter = getattr(self.system, "counter", None)
            if counter is None:
                return []
            turn_tokens = counter.count(graph.variable(turn_var).value)
            plans = []
            for fraction in (0.5, 0.34):
                limit = max(16, math.ceil(turn_tokens * fraction) + 8)
                if limit >= turn_tokens:
                    continue
                def split(g: ExecutionGraph) -> tuple[Operation, ErrorType] | None:
                    ops = [
                        o for o in _ops(g, "chunk", turn_var)
                        if any(turn_id in g.variable(v).meta.get("split_turns", ()) for v in o.outputs)
                    ]
                    return (ops[0], ErrorType.EXTRACTION) if ops else None

                try:
                    system = self.rebuild({"max_chunk_tokens": limit})
                except ValueError:
                    continue
                plans.append(_Plan(kind, system, self.lm, None, split))
            return plans
        return []


def _first_version(graph: ExecutionGraph, var_id: str) -> str:
    var = graph.variable(var_id)
    return variable_id(var.name, 1)


def build_system_cases(
    name: str,
    lm: dspy.LM,
    dataset: Dataset,
    build: Callable[[Mapping[str, Any]], MemorySystem],
    complete: Callable[[str, Iterable[str]], str],
    *,
    limit_per_kind: int | None = None,
    kinds: Sequence[FaultKind] | None = None,
    workers: int = 4,
    on_case: Callable[[str], None] | None = None,
) -> tuple[tuple[BenchCase, ...], InjectionReport]:
    """The injected cases of system `name`: `build(knobs)` makes the system from its config node (the
    generous `PERFECT_KNOBS_BY_SYSTEM` plus `knobs`), `complete` completes each prompt (the perfect
    prompts); one perfect run, then one run per injection."""

    def rebuild(extra: Mapping[str, Any]) -> MemorySystem:
        system = build({"name": name, **PERFECT_KNOBS_BY_SYSTEM.get(name, {}), **extra})
        return system.with_prompts(perfect_prompts(system, complete))

    injector = FaultInjector(name, rebuild({}), lm, dataset, rebuild, workers=workers)
    return injector.build(limit_per_kind, kinds, on_case)
