"""Recording a running memory system into an execution graph.

An LLM stage is one `with tracer.stage(predictor, stage, ...) as call:` under a DSPy callback
(`StageCallback`) that collects the instruction, every LM call, raw completions and usage and never lets an
LM or parse failure escape; non-LLM stages declare their data flow with `Tracer.operation`. A `buffered`
tracer logs privately until `commit`, which keeps parallel work deterministic. It does not decide what a
stage's inputs mean and does not serialize graphs.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import dspy
from dspy.utils.callback import BaseCallback
from memtrace_loop.pipeline.core.conventions import OpKind, OpStatus, VarKind, prompt_name
from memtrace_loop.pipeline.core.graph import ExecutionGraph, GraphError, Usage, variable_id

logger = logging.getLogger(__name__)

MAX_ERROR_CHARS = 500
MAX_RAW_CHARS = 2000


@dataclass
class _CallScratch:
    """Filled by `StageCallback` during one `Tracer.stage` call."""

    instruction: str | None = None
    lm_calls: int = 0
    cached_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    raw_outputs: list[str] = field(default_factory=list)


_ACTIVE_CALL: contextvars.ContextVar[_CallScratch | None] = contextvars.ContextVar("memtrace_call", default=None)


class StageCallback(BaseCallback):
    """DSPy callback that reports predictor and LM activity into the active stage call, if any."""

    def on_module_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        scratch = _ACTIVE_CALL.get()
        if scratch is not None and isinstance(instance, dspy.Predict) and scratch.instruction is None:
            scratch.instruction = instance.signature.instructions

    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        scratch = _ACTIVE_CALL.get()
        if scratch is not None:
            scratch.lm_calls += 1

    def on_lm_end(self, call_id: str, outputs: Any, exception: BaseException | None = None) -> None:
        scratch = _ACTIVE_CALL.get()
        if scratch is None or not outputs:
            return
        for output in outputs:
            text = output.get("text", "") if isinstance(output, dict) else str(output)
            scratch.raw_outputs.append(text[:MAX_RAW_CHARS])


@dataclass(frozen=True)
class StageResult:
    """What one traced LLM stage call produced: the prediction, or the error that replaced it."""

    prediction: dspy.Prediction | None
    error: str | None
    instruction: str
    usage: Usage
    raw_outputs: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return self.prediction is not None


def _usage_from(scratch: _CallScratch, prediction: dspy.Prediction | None) -> Usage:
    prompt_tokens = completion_tokens = 0
    if prediction is not None:
        for usage in (prediction.get_lm_usage() or {}).values():
            prompt_tokens += int(usage.get("prompt_tokens") or 0)
            completion_tokens += int(usage.get("completion_tokens") or 0)
    cached = scratch.lm_calls if (prediction is not None and scratch.lm_calls and not prompt_tokens) else 0
    return Usage(prompt_tokens, completion_tokens, scratch.lm_calls, cached)


@dataclass(frozen=True)
class _VariableEvent:
    expected_id: str
    name: str
    kind: VarKind | str
    value: str
    meta: Mapping[str, Any] | None


class Tracer:
    """Records variables and operations of one graph (directly, or buffered for a later `commit`)."""

    def __init__(self, graph: ExecutionGraph, *, buffered: bool = False) -> None:
        self.graph = graph
        self.buffered = buffered
        self._events: list[_VariableEvent | dict[str, Any]] = []  # a dict: add_operation's arguments
        self._local_versions_by_name: dict[str, int] = {}
        self._local_variable_values: dict[str, str] = {}
        self._prompt_by_stage: dict[str, str] = {}

    # ------------------------------------------------------------- variables and operations

    def variable(self, name: str, kind: VarKind | str, value: str, meta: Mapping[str, Any] | None = None) -> str:
        """Record the next version of `name`; returns its id."""
        if not self.buffered:
            return self.graph.add_variable(name, kind, value, meta).id
        base_versions = len(self.graph.versions(name))
        local = self._local_versions_by_name.get(name, 0) + 1
        self._local_versions_by_name[name] = local
        var_id = variable_id(name, base_versions + local)
        self._events.append(_VariableEvent(var_id, name, kind, value, meta))
        self._local_variable_values[var_id] = value
        return var_id

    def operation(
        self, name: str, stage: str, kind: OpKind, inputs: Iterable[str], outputs: Iterable[str],
        prompt: str | None = None, status: OpStatus = OpStatus.OK, error: str | None = None, usage: Usage | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        """Record one operation (a non-LLM stage's declared data flow, or a finished LLM stage)."""
        kwargs: dict[str, Any] = dict(
            name=name, stage=stage, kind=kind, inputs=tuple(inputs), outputs=tuple(outputs), prompt=prompt,
            status=status, error=error, usage=usage, meta=meta,
        )
        if self.buffered:
            self._events.append(kwargs)
        else:
            self.graph.add_operation(**kwargs)

    def pending_calls(self) -> int:
        """LM calls of the buffered operations not yet committed (what a replay spent)."""
        return sum(e["usage"].calls for e in self._events if isinstance(e, dict) and e["usage"] is not None)

    def pending_operation(self, stage: str) -> Mapping[str, Any] | None:
        """The fields (`inputs`, `meta`, ...) of the last buffered operation of `stage`, or None."""
        found = [e for e in self._events if isinstance(e, dict) and e["stage"] == stage]
        return MappingProxyType(found[-1]) if found else None

    def commit(self) -> None:
        """Replay a buffered trace into the graph (in the caller's thread, in the caller's order)."""
        for event in self._events:
            if isinstance(event, _VariableEvent):
                var = self.graph.add_variable(event.name, event.kind, event.value, event.meta)
                if var.id != event.expected_id:
                    raise GraphError(f"buffered trace expected {event.expected_id}, graph made {var.id}")
            else:
                self.graph.add_operation(**event)
        self._events.clear()
        self._local_versions_by_name.clear()

    # ------------------------------------------------------------- prompts and LLM stages

    def prompt_variable(self, stage: str, instruction: str) -> str:
        """The id of the prompt variable holding `instruction` for `stage`, adding a version if it changed."""
        name = prompt_name(stage)
        known = self._prompt_by_stage.get(stage)
        if known is not None and self.value_of(known) == instruction:
            return known
        latest = self.graph.latest(name)
        if latest is not None and latest.value == instruction and not self._local_versions_by_name.get(name):
            var_id = latest.id
        else:
            var_id = self.variable(name, VarKind.PROMPT, instruction, {"stage": stage})
        self._prompt_by_stage[stage] = var_id
        return var_id

    def value_of(self, var_id: str) -> str:
        """The value of a variable recorded by this tracer (buffered or committed) or in its graph."""
        local = self._local_variable_values.get(var_id)
        return local if local is not None else self.graph.variable(var_id).value

    @contextmanager
    def stage(
        self, predictor: Callable[..., dspy.Prediction], stage: str, /, *, op: str, kind: OpKind, inputs: Iterable[str],
        meta: Mapping[str, Any] | None = None, **kwargs: Any,
    ) -> Iterator[StageCall]:
        """Run one LLM stage and record it as operation `op`: `predictor(**kwargs)` runs at once under the
        tracing callback (its failure is caught, never raised); the body reads `call.ok` / `call.prediction`
        and declares the outputs with `call.output(...)`; when it ends, `op` is recorded with `inputs`, those
        outputs and the prompt variable. An exception of the body itself propagates and records nothing."""
        call = StageCall(self, self._run(predictor, stage, kwargs))
        yield call
        self.record_stage(op, stage, kind, inputs, call.outputs, call.result, meta)

    def record_stage(
        self, op: str, stage: str, kind: OpKind, inputs: Iterable[str], outputs: Iterable[str],
        result: StageResult | None, meta: Mapping[str, Any] | None = None,
    ) -> None:
        """Record operation `op` of `stage`; with the `result` of its LLM call (prompt variable, status,
        error, usage, and the last raw output of a failed call in `meta`), else as a plain operation."""
        details = dict(meta or {})
        if result is None:
            self.operation(op, stage, kind, inputs, outputs, meta=details or None)
            return
        if result.error is not None and result.raw_outputs:
            details["raw_output"] = result.raw_outputs[-1]
        self.operation(
            op, stage, kind, inputs, outputs, prompt=self.prompt_variable(stage, result.instruction),
            status=OpStatus.OK if result.ok else OpStatus.FAILED, error=result.error, usage=result.usage,
            meta=details or None,
        )

    @staticmethod
    def _run(predictor: Callable[..., dspy.Prediction], stage: str, kwargs: Mapping[str, Any]) -> StageResult:
        """Call the predictor under the tracing callback; failures are returned, never raised."""
        scratch = _CallScratch()
        token = _ACTIVE_CALL.set(scratch)
        prediction: dspy.Prediction | None = None
        error: str | None = None
        try:
            callbacks = [*dspy.settings.get("callbacks", []), StageCallback()]
            with dspy.context(callbacks=callbacks, track_usage=True):
                prediction = predictor(**kwargs)
        except Exception as exc:  # one failing call is recorded and scored, never a crash of the run
            error = f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]
            logger.debug("stage %s failed: %s", stage, error)
        finally:
            _ACTIVE_CALL.reset(token)
        signature = getattr(predictor, "signature", None)
        instruction = scratch.instruction or (signature.instructions if signature is not None else "")
        try:
            usage = _usage_from(scratch, prediction)
        except Exception as exc:  # a tracer failure must not fail the run: count the calls, lose the tokens
            logger.warning("stage %s: could not read token usage: %s", stage, exc)
            usage = Usage(calls=scratch.lm_calls)
        return StageResult(prediction, error, instruction, usage, tuple(scratch.raw_outputs))


class StageCall:
    """The handle of one LLM stage inside `with tracer.stage(...)`: its result and declared outputs."""

    def __init__(self, tracer: Tracer, result: StageResult) -> None:
        self.tracer = tracer
        self.result = result
        self.outputs: list[str] = []

    @property
    def ok(self) -> bool:
        return self.result.ok

    @property
    def prediction(self) -> Any:
        """The DSPy prediction (untyped), None when the call failed: `call.prediction.answer if call.ok else ""`."""
        return self.result.prediction

    @property
    def error(self) -> str | None:
        return self.result.error

    def output(self, name: str, kind: VarKind, value: str, meta: Mapping[str, Any] | None = None) -> str:
        """Record the next version of `name` as an output of this stage; returns its id."""
        var_id = self.tracer.variable(name, kind, value, meta)
        self.outputs.append(var_id)
        return var_id
