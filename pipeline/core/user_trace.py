"""The tracing API for a user's own memory system: one `op` (or `@traced` function) per operation.

    with op("search_chunks", stage="retrieve", kind="retrieval") as o:
        o.reads_question()
        o.reads_units(*[c.key for c in hits])
        o.writes_context("\\n".join(c.text for c in hits))

The marks become operations and variables of our graph with the conventions' names; `ask(stage, **inputs)`
inside an `op` runs the declared LLM stage under the tracer (a failing call is recorded, never raised).
A `TraceSession`, opened by the adapter in a context variable, holds the tracer; outside one every `op` is a
no-op. It imports no user code and builds no predictors (`memory_systems.custom`).
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from memtrace_loop.pipeline.core.conventions import (
    NEAR_MISSES,
    OpKind,
    VarKind,
    answer_name,
    first_version,
    memory_name,
    query_name,
    retrieved_name,
    turn_name,
)

if TYPE_CHECKING:  # the marks are DSPy-free to import (a user's module imports them); calls run DSPy
    import dspy
    from memtrace_loop.pipeline.core.tracing import StageResult, Tracer

P = ParamSpec("P")
R = TypeVar("R")


class TracingError(ValueError):
    """A tracing mark that cannot be recorded (an undeclared stage, an LLM call outside an `op`)."""


@dataclass
class TraceSession:
    """What the marks of one `add_turn` or `answer` call record into (one call, one thread); `unit_vars`:
    unit key -> the variable id of its live version."""

    tracer: Tracer
    predictors: Mapping[str, dspy.Predict]
    stages: frozenset[str]
    unit_vars: dict[str, str] = field(default_factory=dict)
    question_id: str | None = None
    context_var: str | None = None
    answer_var: str | None = None
    error: str | None = None  # the last failed LLM call's error


_SESSION: contextvars.ContextVar[TraceSession | None] = contextvars.ContextVar("memtrace_user_trace", default=None)
_OP: contextvars.ContextVar[OpHandle | None] = contextvars.ContextVar("memtrace_user_op", default=None)


@contextmanager
def session(active: TraceSession) -> Iterator[TraceSession]:
    """Make `active` the session the marks of this thread record into (the adapter's call)."""
    token = _SESSION.set(active)
    try:
        yield active
    finally:
        _SESSION.reset(token)


class OpHandle:
    """One operation being recorded: its inputs and outputs as graph variables, and its LLM call."""

    def __init__(self, name: str, stage: str | None, kind: OpKind, traced: TraceSession | None) -> None:
        self.name, self.stage, self.kind = name, stage, kind
        self._session = traced
        self.inputs: list[str] = []
        self.outputs: list[str] = []
        self.meta: dict[str, Any] = {}
        self.llm: StageResult | None = None

    # ------------------------------------------------------------- inputs

    def _read(self, *var_ids: str) -> OpHandle:
        self.inputs.extend(v for v in var_ids if v not in self.inputs)
        return self

    def reads_turn(self, turn_id: str) -> OpHandle:
        return self._read(first_version(turn_name(turn_id))) if self._session else self

    def reads_question(self) -> OpHandle:
        s = self._session
        return self._read(first_version(query_name(s.question_id))) if s and s.question_id else self

    def reads_units(self, *keys: str) -> OpHandle:
        s = self._session
        return self._read(*(s.unit_vars[k] for k in keys if k in s.unit_vars)) if s else self

    def reads_context(self) -> OpHandle:
        s = self._session
        return self._read(s.context_var) if s and s.context_var else self

    def annotate(self, **meta: Any) -> OpHandle:
        """Settings worth showing with the operation (`k=5` on a search: the attributor reads it)."""
        self.meta.update(meta)
        return self

    def ranked_below(self, *keys: str) -> OpHandle:
        """The units a search ranked just below its cut, best first (its near misses)."""
        s = self._session
        if s:
            self.meta[NEAR_MISSES] = [s.unit_vars[k] for k in keys if k in s.unit_vars]
        return self

    # ------------------------------------------------------------- outputs

    def writes_unit(self, key: str, text: str, **meta: Any) -> OpHandle:
        """A new version of memory unit `key` (its text; `deletes_unit` writes the empty version)."""
        s = self._session
        if s:
            var_id = s.tracer.variable(memory_name(key), VarKind.MEMORY, text, meta or None)
            s.unit_vars[key] = var_id
            self.outputs.append(var_id)
        return self

    def deletes_unit(self, key: str) -> OpHandle:
        s = self._session
        if s and key in s.unit_vars:
            self.writes_unit(key, "", deleted=True)
        return self

    def writes_context(self, text: str) -> OpHandle:
        s = self._session
        if s and s.question_id:
            s.context_var = s.tracer.variable(retrieved_name(s.question_id), VarKind.CONTEXT, text)
            self.outputs.append(s.context_var)
        return self

    def writes_answer(self, text: str) -> OpHandle:
        s = self._session
        if s and s.question_id:
            s.answer_var = s.tracer.variable(answer_name(s.question_id), VarKind.ANSWER, text)
            self.outputs.append(s.answer_var)
        return self

    # ------------------------------------------------------------- the LLM call

    def _ask(self, stage: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        s = self._session
        if s is None or stage not in s.predictors:
            known = sorted(s.predictors) if s else []
            raise TracingError(f"ask({stage!r}): not a declared LLM stage (declared: {known})")
        if self.llm is not None:
            raise TracingError(f"operation {self.name!r} already made its LLM call; one `op` per call")
        if self.stage not in (None, stage):
            raise TracingError(f"ask({stage!r}) inside operation {self.name!r} of stage {self.stage!r}")
        self.stage = stage
        predictor = s.predictors[stage]
        from memtrace_loop.pipeline.core.tracing import Tracer

        self.llm = Tracer._run(predictor, stage, dict(inputs))
        names = list(predictor.signature.output_fields)
        prediction = self.llm.prediction
        return {n: (getattr(prediction, n, "") if prediction is not None else "") for n in names}

    def _record(self) -> None:
        s = self._session
        if s is None:
            return
        if self.stage is None:
            raise TracingError(f"operation {self.name!r} names no stage and made no LLM call")
        if self.llm is not None and self.llm.error is not None:
            s.error = self.llm.error
        s.tracer.record_stage(self.name, self.stage, self.kind, self.inputs, self.outputs, self.llm, self.meta)


@contextmanager
def op(name: str, *, stage: str | None = None, kind: OpKind | str = OpKind.OTHER) -> Iterator[OpHandle]:
    """Record one operation `name` of `stage` (an LLM operation may leave it to its `ask`) and `kind`."""
    traced_session = _SESSION.get()
    if traced_session is not None and stage is not None and stage not in traced_session.stages:
        raise TracingError(f"operation {name!r}: stage {stage!r} is not declared "
                           f"(declared: {sorted(traced_session.stages)})")
    handle = OpHandle(name, stage, OpKind(kind), traced_session)
    token = _OP.set(handle)
    try:
        yield handle
        handle._record()
    finally:
        _OP.reset(token)


def current_op() -> OpHandle:
    """The operation being recorded on this thread (inside `op` or a `@traced` function)."""
    handle = _OP.get()
    if handle is None:
        raise TracingError("no operation is being recorded: call this inside `op(...)` or a @traced function")
    return handle


def ask(stage: str, /, **inputs: Any) -> dict[str, Any]:
    """Run the declared LLM stage `stage` on `inputs` in the current operation; its output fields by name
    (empty strings when the call failed: the operation is recorded as failed)."""
    return current_op()._ask(stage, inputs)


def traced(
    *, stage: str | None = None, kind: OpKind | str = OpKind.OTHER, name: str | None = None
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """A decorator: each call of the function is one `op` (named after the function unless `name`);
    the body reaches its handle with `current_op()`."""

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(function)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            with op(name or function.__name__, stage=stage, kind=kind):
                return function(*args, **kwargs)

        return wrapper

    return decorate
