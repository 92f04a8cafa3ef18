"""What every memory system is: a `dspy.Module` with `ingest` and `answer`, and a prompt set.

Its LLM stages are its DSPy predictors, named by attribute path; this module reads and writes prompt sets,
derives the memory key and defines what `ingest` and `answer` return. It implements no system.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar

import dspy
from memtrace_loop.memory_systems.answering import RESPOND_STAGE, AnswerOutcome, respond
from memtrace_loop.memory_systems.stages import StageSpec, construction_stages, reset_knobs
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.records import Conversation, PromptSet, Question, Turn
from memtrace_loop.pipeline.core.tracing import Tracer

__all__ = [
    "AnswerOutcome", "KnobError", "MemorySystem", "PromptSetError", "RecordedCall", "ReplayUnsupportedError",
    "RestoredUnit", "Retrieved", "checked_knobs", "ranked_depth"
]

T = TypeVar("T")


class KnobsRecord(Protocol):
    """A system's knobs: a frozen dataclass whose every field has a default (its config schema)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]


class KnobError(ValueError):
    """Knob changes that do not fit a memory system (an unknown field, a value out of range)."""


class PromptSetError(ValueError):
    """A prompt set that does not fit a memory system (unknown stages, another system)."""


@dataclass(frozen=True)
class Retrieved:
    """What a system's retrieval recorded for one question: the query and context variables and the
    context text the answer stage reads."""

    query_var: str
    context_var: str
    context: str


@dataclass(frozen=True)
class RestoredUnit:
    """A piece of information a replay puts back into memory: its text, the ISO time it was said, and
    the graph variable it was taken from."""

    text: str
    time: str
    source: str


@dataclass(frozen=True)
class RecordedCall:
    """A recorded LLM operation as replay calls its stage again: the stage (the predictor's attribute path), the keyword
    inputs the predictor was called with, and the ISO time of what it read (the time units it writes carry)."""

    stage: str
    inputs: Mapping[str, Any]
    time: str = ""


def checked_knobs(
    current: Mapping[str, Any], changes: Mapping[str, Any], owner: str, apply: Callable[[dict[str, Any]], T]
) -> T:
    """`apply(changes)` once `changes` name knobs of `current` (field -> value) with values of their types (an int
    for a float); an unknown knob, a wrong type or a value `apply` rejects is a `KnobError` naming `owner`."""
    unknown = sorted(set(changes) - set(current))
    if unknown:
        raise KnobError(f"knobs {unknown} are not knobs of {owner} (its knobs: {sorted(current)})")
    for key, value in changes.items():
        want = type(current[key])
        if type(value) is not want and not (want is float and type(value) is int):
            raise KnobError(f"knob {key!r} of {owner} must be a {want.__name__}, got {value!r}")
    try:
        return apply(dict(changes))
    except (TypeError, ValueError) as error:
        raise KnobError(f"knobs {dict(changes)} of {owner}: {error}") from error


def ranked_depth(top_k: int) -> int:
    """How deep a retrieval ranks: its `top_k` plus as many again (at least 10) recorded as near misses,
    so an analysis can tell a unit the cut left out from one the search never ranked."""
    return top_k + max(top_k, 10)


class ReplayUnsupportedError(NotImplementedError):
    """The system cannot rebuild its memory from a graph (so a replay cannot check its blame)."""


class MemorySystem(dspy.Module):
    """Base class (the code half of the contract in `memory_systems.spec`). Subclasses set `name`, `stages`
    and a typed `knobs` record, create their predictors in `__init__` (the answer stage as `self.respond`), and
    implement `ingest(conversation, tracer, on_turn=None) -> state` (ONE conversation's memory: an opaque handle,
    read-only once returned and shared among threads; a system backed by an outside store names it and records
    every graph operation itself, on the calling thread) and `retrieve(question, state, tracer) -> Retrieved`.
    Replay also needs `restore(graph)`, `with_units(state, units, tracer)`, `retrieve_steered` (with `STEER`
    stages), and for stage repairs `recorded_call(graph, op_id)` and `repaired_units(graph, op_id, prediction)`;
    a system that cannot raises `ReplayUnsupportedError` (its blames are then `unverifiable`)."""

    name: str = "base"
    stages: tuple[StageSpec, ...] = ()  # every stage in pipeline order (the spec's stage table)
    knobs: KnobsRecord  # the typed knobs record (every system has one, set in `__init__`)

    @property
    def construction_stages(self) -> tuple[str, ...]:
        """The LLM stages `ingest` uses (the rest only answer)."""
        return construction_stages(self.stages)

    @property
    def knob_fields_by_stage(self) -> Mapping[str, tuple[str, ...]]:
        """Non-LLM stage -> its knob fields a replay may reset to their defaults when rebuilding memory."""
        return reset_knobs(self.stages)

    def non_llm_stages(self) -> dict[str, str]:
        """Stage name -> its settings, for every stage that is not an LLM call (search, store, ...)."""
        return {}

    def construction_knobs(self) -> str:
        """Everything besides prompts and the model that changes what `ingest` builds (for the memory key)."""
        return ""

    def memory_key(self, conversation: Conversation) -> str:
        """Names what `ingest(conversation)` depends on: equal keys build equal memories."""
        prompts = self.prompt_set()
        models = sorted(
            {str(getattr(getattr(p, "lm", None), "model", "unset")) for n, p in self.named_predictors()
             if n in self.construction_stages}
        )
        payload = json.dumps(
            [self.name, conversation.id, prompts.digest(self.construction_stages), self.construction_knobs(), models]
        )
        return hashlib.sha256(payload.encode()).hexdigest()

    def ingest(self, conversation: Conversation, tracer: Tracer, on_turn: Callable[[Turn], None] | None = None) -> Any:
        raise NotImplementedError

    def retrieve(self, question: Question, state: Any, tracer: Tracer) -> Retrieved:
        raise NotImplementedError

    def answer(self, question: Question, state: Any, tracer: Tracer) -> AnswerOutcome:
        found = self.retrieve(question, state, tracer)
        return respond(tracer, self.respond, question, found.query_var, found.context_var, found.context)

    def retrieve_steered(
        self, question: Question, state: Any, tracer: Tracer, queries: Sequence[str]
    ) -> Retrieved | None:
        """The retrieval with an LLM steering step's output replaced by `queries` (None when the system
        has no steering step)."""
        return None

    def restore(self, graph: ExecutionGraph) -> Any:
        """The memory at question time, rebuilt from the conversation graph `ingest` traced (no LLM call)."""
        raise ReplayUnsupportedError(f"memory system {self.name!r} cannot rebuild its memory from a graph")

    def with_units(self, state: Any, units: Sequence[RestoredUnit], tracer: Tracer) -> Any:
        """A copy of `state` that also holds `units` (recorded through `tracer` as memory variables)."""
        raise ReplayUnsupportedError(f"memory system {self.name!r} cannot add units to its memory")

    def recorded_call(self, graph: ExecutionGraph, op_id: str) -> RecordedCall:
        """How LLM operation `op_id` called its stage, to call it again."""
        op = graph.operation(op_id)
        if op.stage == RESPOND_STAGE and len(op.inputs) == 2:
            query, context = (graph.variable(v) for v in op.inputs)
            return RecordedCall(RESPOND_STAGE, {"question": query.value, "context": context.value})
        raise ReplayUnsupportedError(f"memory system {self.name!r} cannot call stage {op.stage!r} again")

    def repaired_units(self, graph: ExecutionGraph, op_id: str, prediction: Any) -> tuple[RestoredUnit, ...]:
        """What construction operation `op_id`'s stage, called again (its `prediction`), puts in memory that the
        operation did not."""
        raise ReplayUnsupportedError(f"memory system {self.name!r} cannot repair {graph.operation(op_id).stage!r}")

    def selection_overrides(self) -> dict[str, Any]:
        """The `memory_system.<key>` settings, beyond its name, that select this very system and that an
        exported prompt set does not carry (a custom system's `target`); a printed load command adds them."""
        return {}

    def knob_values(self) -> dict[str, Any]:
        """The system's knobs as field -> value."""
        return dataclasses.asdict(self.knobs)

    def non_default_knobs(self) -> dict[str, Any]:
        """The knobs whose values differ from the knobs record's defaults (what an export must carry)."""
        defaults = dataclasses.asdict(type(self.knobs)())
        return {k: v for k, v in dataclasses.asdict(self.knobs).items() if v != defaults[k]}

    def with_knobs(self, changes: Mapping[str, Any]) -> MemorySystem:
        """A copy with some knobs changed (`changes`: field -> value; empty: this system itself)."""
        if not changes:
            return self
        system = copy.copy(self)
        system.knobs = checked_knobs(
            dataclasses.asdict(self.knobs), changes, f"memory system {self.name!r}",
            lambda valid: dataclasses.replace(self.knobs, **valid),
        )
        return system

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"{type(self).__name__} is driven through ingest() and answer(), not called")

    def stage_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.named_predictors())

    def prompt_set(self) -> PromptSet:
        return PromptSet({name: p.signature.instructions for name, p in self.named_predictors()})

    def with_prompts(self, prompts: PromptSet) -> MemorySystem:
        """A copy of this system whose stages use `prompts`; every stage must be known."""
        predictors = dict(self.named_predictors())
        unknown = sorted(set(prompts.stages()) - set(predictors))
        if unknown:
            raise PromptSetError(
                f"prompt set names stages {unknown} that memory system {self.name!r} does not have "
                f"(its stages: {sorted(predictors)})"
            )
        system = copy.copy(self)
        for name, predictor in self.named_predictors():
            if name in prompts.instruction_by_stage:
                updated = copy.copy(predictor)
                updated.signature = predictor.signature.with_instructions(prompts[name])
                _replace_path(system, name, updated)
        return system


def _replace_path(root: dspy.Module, path: str, value: Any) -> None:
    """Set the attribute at dotted `path`, shallow-copying the modules on the way (originals untouched)."""
    *parents, leaf = path.split(".")
    node = root
    for part in parents:
        child = copy.copy(getattr(node, part))
        setattr(node, part, child)
        node = child
    setattr(node, leaf, value)
