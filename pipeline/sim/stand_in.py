"""The deterministic stand-in LM: `respond(messages) -> str`.

It parses a DSPy adapter request (`pipeline.sim.protocol`), identifies the stage by the names of
its output fields (a `reasoning` field added by ChainOfThought is ignored for dispatch and answered
with a fixed sentence), runs the registered handler and formats the handler's values back in the
adapter's format. The handlers come from an immutable mapping (`HANDLER_BY_OUTPUTS`, built from the
stage table `pipeline.sim.stages.STAGES` and the service handlers `SERVICES`); `world_handlers(rows)`
adds the rows memory systems bring (`pipeline.sim.system_stages`), `with_handlers` makes an extended
one, and `respond` takes the mapping to use. A request for a stage it has no handler for raises
`UnknownStageError` naming the stage's output fields and the stages it knows: a new memory system
fails loudly on the simulated world instead of "running" on blank outputs (give it rows of its own:
`SPEC.sim`).

A GEPA reflection prompt (one plain user message, gepa's instruction-proposal template) is not an
adapter request: `respond` hands it to `pipeline.sim.reflection`, which answers with the same rewriter.
Nor is a request a library builds itself (the real mem0's extraction and update calls): a request that
declares no output fields is offered to the `foreign` rows `respond` is given (`foreign_rows(rows)`,
`SimStage.foreign`), the first that recognizes it answers it in the library's own format.

It does not hold any stage behaviour itself: the handlers live in `pipeline.sim.handlers` and beside it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from memtrace_loop.pipeline.sim.attributor_handler import HANDLERS as ATTRIBUTOR_HANDLERS
from memtrace_loop.pipeline.sim.diagnosis_handler import HANDLERS as DIAGNOSIS_HANDLERS
from memtrace_loop.pipeline.sim.grammar import parse_fact
from memtrace_loop.pipeline.sim.handlers import judge_handler
from memtrace_loop.pipeline.sim.paraphrase import paraphrasing
from memtrace_loop.pipeline.sim.protocol import StageRequest, format_reply, parse_request
from memtrace_loop.pipeline.sim.reflection import (
    new_instruction_handler,
    parse_reflection,
    reflection_reply,
    shorten_instruction,
)
from memtrace_loop.pipeline.sim.stages import STAGES, Handler, SimStage

REASONING_FIELD = "reasoning"
_REASONING_TEXT = "I followed the rules stated in my instructions."


def _key(output_fields: Iterable[str]) -> frozenset[str]:
    key = frozenset(output_fields) - {REASONING_FIELD}
    if not key:
        raise ValueError("a stage needs at least one output field besides 'reasoning'")
    return key


# requests that are not memory-system stages
SERVICES: Mapping[frozenset[str], Handler] = MappingProxyType({
    frozenset({"label"}): judge_handler,
    frozenset({"new_instruction"}): new_instruction_handler,  # our rewriter and dspy GEPA's proposer
    frozenset({"shortened_instruction"}): shorten_instruction,  # dspy GEPA's CompressInstruction
    **ATTRIBUTOR_HANDLERS,  # the LLM attributor's step verdict (JudgeOperation)
    **DIAGNOSIS_HANDLERS,  # the diagnostic summary's analysis (DiagnoseFailures)
})


def _by_outputs(stages: Iterable[SimStage]) -> dict[frozenset[str], Handler]:
    return {_key(stage.outputs): stage.handler for stage in stages if stage.foreign is None}


def foreign_rows(stages: Iterable[SimStage]) -> tuple[SimStage, ...]:
    """The rows of `stages` that answer requests in a library's own format (`SimStage.foreign`)."""
    return tuple(stage for stage in stages if stage.foreign is not None)


HANDLER_BY_OUTPUTS: Mapping[frozenset[str], Handler] = MappingProxyType({**_by_outputs(STAGES), **SERVICES})


def with_handlers(
    extra: Mapping[Iterable[str], Handler], base: Mapping[frozenset[str], Handler] = HANDLER_BY_OUTPUTS
) -> Mapping[frozenset[str], Handler]:
    """A new handler mapping: `base` plus (or replaced by) `extra`, keyed by output field names."""
    return MappingProxyType({**base, **{_key(fields): handler for fields, handler in extra.items()}})


def world_handlers(extra: Iterable[SimStage] = ()) -> Mapping[frozenset[str], Handler]:
    """`HANDLER_BY_OUTPUTS` plus the rows of `extra` (the stages memory systems add)."""
    return MappingProxyType({**HANDLER_BY_OUTPUTS, **_by_outputs(extra)})


def paraphrasing_handlers(
    base: Mapping[frozenset[str], Handler] = HANDLER_BY_OUTPUTS, extra: Iterable[SimStage] = (),
) -> Mapping[frozenset[str], Handler]:
    """`base` with the construction stages (of the table and `extra`) writing paraphrased memories
    (`pipeline.sim.paraphrase`)."""
    construction = {_key(s.outputs) for s in (*STAGES, *extra) if s.construction and s.foreign is None}
    return MappingProxyType({
        key: paraphrasing(handler, _is_fact) if key in construction else handler
        for key, handler in base.items()
    })


def paraphrasing_rows(rows: Iterable[SimStage]) -> tuple[SimStage, ...]:
    """`rows` with the construction rows' handlers writing paraphrased memories (for `foreign` rows)."""
    return tuple(replace(row, handler=paraphrasing(row.handler, _is_fact)) if row.construction else row for row in rows)


def _is_fact(sentence: str) -> bool:
    return parse_fact(sentence) is not None


class UnknownStageError(LookupError):
    """The stand-in has no handler for a requested stage (identified by its output field names)."""


def _unknown_stage(key: frozenset[str], handlers: Mapping[frozenset[str], Handler]) -> UnknownStageError:
    known = "; ".join(sorted(", ".join(sorted(fields)) for fields in handlers))
    return UnknownStageError(
        f"the simulated world has no handler for a stage with output fields {sorted(key)}; "
        f"it knows stages with outputs: {known}. Add one with pipeline.sim.stand_in.with_handlers."
    )


def answer(
    request: StageRequest, handlers: Mapping[frozenset[str], Handler] = HANDLER_BY_OUTPUTS
) -> dict[str, Any]:
    """The output values for one parsed request (the dispatch step of `respond`)."""
    key = request.output_names - {REASONING_FIELD}
    handler = handlers.get(key)
    if handler is None:
        raise _unknown_stage(key, handlers)
    values = dict(handler(request))
    if REASONING_FIELD in request.output_names and not values.get(REASONING_FIELD):
        values[REASONING_FIELD] = _REASONING_TEXT
    return values


def respond(
    messages: list[dict[str, str]],
    handlers: Mapping[frozenset[str], Handler] = HANDLER_BY_OUTPUTS,
    foreign: Iterable[SimStage] = (),
) -> str:
    """Answer one DSPy-formatted chat request (or a GEPA reflection prompt, or a request one of the
    `foreign` rows recognizes) with the stand-in's rule-based behaviour."""
    reflection = parse_reflection(messages)
    if reflection is not None:
        return reflection_reply(reflection)
    request = parse_request(messages)
    if not request.output_names:
        rows = tuple(foreign)
        reply = _foreign_reply(messages, rows)
        if reply is not None:
            return reply
        raise _unrecognized(rows)
    return format_reply(request, answer(request, handlers))


def _unrecognized(rows: tuple[SimStage, ...]) -> UnknownStageError:
    names = ", ".join(row.name for row in rows) or "none given"
    return UnknownStageError(
        "the simulated world does not recognize this request: it declares no DSPy output fields and no "
        f"foreign row (rows answering a library's own requests: {names}) reads it. A memory system whose "
        "library builds its own prompts adds such rows in its folder (SPEC.sim, SimStage.foreign)."
    )


def _foreign_reply(messages: list[dict[str, str]], rows: Iterable[SimStage]) -> str | None:
    for row in rows:
        if row.foreign is None:
            continue
        request = row.foreign.read(messages)
        if request is not None:
            return row.foreign.write(request, dict(row.handler(request)))
    return None
