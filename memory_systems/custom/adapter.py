"""A user's own memory system (`contract.UserMemorySystem`) as one of ours (`CustomMemory`).

Each `LLMStage` becomes a DSPy predictor at its name, so prompt sets, rewrites, the memory key and the
optimizers work as on our systems; `ingest` / `answer` record the turn and question and call the user's code
under a trace session; what the code did not mark is recorded under the stage `untraced`. Knobs are
validated by name and type. Replay is not supported (`ReplayUnsupportedError`).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import dspy
from memtrace_loop.memory_systems.answering import AnswerOutcome, record_query, record_turn
from memtrace_loop.memory_systems.base import (
    KnobError,
    MemorySystem,
    RecordedCall,
    ReplayUnsupportedError,
    RestoredUnit,
    Retrieved,
    checked_knobs,
)
from memtrace_loop.memory_systems.custom.contract import Answer as UserAnswer
from memtrace_loop.memory_systems.custom.contract import LLMStage, Stage, UserMemorySystem
from memtrace_loop.memory_systems.custom.schema import UNTRACED, CustomKnobs, stage_table
from memtrace_loop.pipeline.core.config import ConfigError
from memtrace_loop.pipeline.core.conventions import OpKind, VarKind, answer_name, retrieved_name
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.records import Conversation, Question, Turn
from memtrace_loop.pipeline.core.tracing import Tracer
from memtrace_loop.pipeline.core.user_trace import TraceSession, ask, session


@dataclass(frozen=True)
class CustomState:
    """The memory of one conversation: the user's memory object (read-only once built) and the
    variable id of each memory unit's live version."""

    conversation_id: str
    memory: Any
    unit_vars: Mapping[str, str]


class _SessionLM:
    """The LM handed to the user's code: `ask` runs a declared stage inside the current `op`."""

    def ask(self, stage: str, /, **inputs: Any) -> dict[str, Any]:
        return ask(stage, **inputs)


def _predictor(stage: LLMStage) -> dspy.Predict:
    if not stage.inputs or not stage.outputs:
        raise ValueError(f"LLM stage {stage.name!r} needs at least one input and one output field")
    return dspy.Predict(dspy.Signature(f"{', '.join(stage.inputs)} -> {', '.join(stage.outputs)}", stage.prompt))


class CustomMemory(MemorySystem):
    """The adapter (see the module docstring)."""

    knobs: CustomKnobs
    name = "custom"

    def __init__(self, user: UserMemorySystem, knobs: CustomKnobs | None = None) -> None:
        super().__init__()
        self.knobs = knobs or CustomKnobs()
        declared = tuple(user.stages())
        names = [s.name for s in declared]
        if len(set(names)) != len(names) or UNTRACED in names:
            raise ValueError(f"custom system {self.knobs.target!r}: stage names must be unique and not "
                             f"{UNTRACED!r}, got {names}")
        self.stages = stage_table(declared)
        self._llm_stages = tuple(s.name for s in declared if isinstance(s, LLMStage))
        for stage in declared:
            if isinstance(stage, LLMStage):
                if not stage.name.isidentifier() or hasattr(self, stage.name):
                    raise ValueError(f"custom system {self.knobs.target!r}: LLM stage name {stage.name!r} must be "
                                     "a Python identifier that is no attribute of a memory system")
                setattr(self, stage.name, _predictor(stage))
        self._knobs_of = {s.name: s.knobs for s in declared if isinstance(s, Stage)}
        # the user's starting knobs, as pairs (a mapping proxy cannot be deep-copied, and DSPy deep-copies systems)
        self._default_knobs: tuple[tuple[str, Any], ...] = tuple(user.knobs().items())
        self.user = user
        if self.knobs.knobs:
            try:
                self.user = self._checked_user(self.knobs.knobs)
            except KnobError as error:  # from config: a one-line usage error naming the key
                raise ConfigError(f"memory_system.knobs: {error}") from error

    # ------------------------------------------------------------------ knobs

    def knob_values(self) -> dict[str, Any]:
        return dict(self.user.knobs())

    def selection_overrides(self) -> dict[str, Any]:
        default = type(self.knobs)().target
        return {} if self.knobs.target == default else {"target": self.knobs.target}

    def non_default_knobs(self) -> dict[str, Any]:
        defaults = dict(self._default_knobs)
        return {k: v for k, v in self.user.knobs().items() if defaults.get(k) != v}

    def construction_knobs(self) -> str:
        return f"target={self.knobs.target};knobs={json.dumps(self.knob_values(), sort_keys=True, default=str)}"

    def non_llm_stages(self) -> dict[str, str]:
        values = self.knob_values()
        settings = {stage: "; ".join(f"{k}={values.get(k)}" for k in knobs) or "no knobs"
                    for stage, knobs in self._knobs_of.items()}
        return {**settings, UNTRACED: "what the user's code returned without marking it"}

    def _checked_user(self, changes: Mapping[str, Any]) -> UserMemorySystem:
        return checked_knobs(self.user.knobs(), changes, f"custom system {self.knobs.target!r}", self.user.with_knobs)

    def with_knobs(self, changes: Mapping[str, Any]) -> CustomMemory:
        if not changes:
            return self
        system = copy.copy(self)
        system.user = self._checked_user(changes)
        system.knobs = dataclasses.replace(self.knobs, knobs={**(self.knobs.knobs or {}), **dict(changes)})
        return system

    # ------------------------------------------------------------------ running the user's code

    def _session(self, tracer: Tracer, unit_vars: Mapping[str, str], question_id: str | None = None) -> TraceSession:
        predictors = {name: getattr(self, name) for name in self._llm_stages}
        stages = frozenset(s.name for s in self.stages)
        return TraceSession(tracer, predictors, stages, dict(unit_vars), question_id)

    def ingest(
        self, conversation: Conversation, tracer: Tracer, on_turn: Callable[[Turn], None] | None = None
    ) -> CustomState:
        traced = self._session(tracer, {})
        lm = _SessionLM()
        with session(traced):
            memory = self.user.new_memory(conversation.id)
        for turn in conversation.turns:
            record_turn(tracer, turn)
            with session(traced):
                self.user.add_turn(memory, turn, lm)
            if on_turn is not None:
                on_turn(turn)
        return CustomState(conversation.id, memory, MappingProxyType(dict(traced.unit_vars)))

    def answer(self, question: Question, state: CustomState, tracer: Tracer) -> AnswerOutcome:
        query_var = record_query(tracer, question)
        traced = self._session(tracer, state.unit_vars, question.id)
        with session(traced):
            returned = self.user.answer(state.memory, question.text, _SessionLM())
        text, context = (returned.text, returned.context) if isinstance(returned, UserAnswer) else (str(returned), "")
        text = text.strip()
        if traced.context_var is None and context:
            traced.context_var = tracer.variable(retrieved_name(question.id), VarKind.CONTEXT, context)
            tracer.operation("returned_context", UNTRACED, OpKind.RETRIEVAL, [query_var], [traced.context_var])
        answer_var = traced.answer_var
        if answer_var is None:
            answer_var = tracer.variable(answer_name(question.id), VarKind.ANSWER, text)
            inputs = [query_var, *([traced.context_var] if traced.context_var else [])]
            tracer.operation("returned_answer", UNTRACED, OpKind.RESPONSE, inputs, [answer_var])
        return AnswerOutcome(text, query_var, answer_var, traced.error)

    # ------------------------------------------------------------------ replay: not supported

    def retrieve(self, question: Question, state: Any, tracer: Tracer) -> Retrieved:
        raise ReplayUnsupportedError(f"custom system {self.knobs.target!r} answers in one call: no separate retrieval")

    def restore(self, graph: ExecutionGraph) -> Any:
        raise ReplayUnsupportedError(f"custom system {self.knobs.target!r} cannot rebuild its memory from a graph")

    def recorded_call(self, graph: ExecutionGraph, op_id: str) -> RecordedCall:
        raise ReplayUnsupportedError(
            f"custom system {self.knobs.target!r} has no repair hooks: its stage {graph.operation(op_id).stage!r} "
            "cannot be called again on recorded inputs (its blames are unverifiable)"
        )

    def repaired_units(self, graph: ExecutionGraph, op_id: str, prediction: Any) -> tuple[RestoredUnit, ...]:
        raise ReplayUnsupportedError(
            f"custom system {self.knobs.target!r} has no repair hooks: what a re-run of its stage "
            f"{graph.operation(op_id).stage!r} would put in memory is unknown (its blames are unverifiable)"
        )
