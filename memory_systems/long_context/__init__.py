"""The Long-Context system: the whole conversation in a token-window buffer (its `SPEC`).

Its benchmark faults: a trimmed buffer (`window_tokens` set to exactly the tokens of the entries after the
evidence turn, so its entry is the newest one trimmed; the truth is the `trim` operation that trimmed it)
and a wrong answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from memtrace_loop.memory_systems.long_context.schema import STAGES, TRIM_STAGE, LongContextKnobs
from memtrace_loop.memory_systems.spec import (
    WRONG_ANSWER,
    FaultKind,
    FaultPlan,
    KnobFault,
    KnobWorld,
    MemorySystemSpec,
    Replay,
    WalkPrior,
)
from memtrace_loop.pipeline.core.conventions import Namespace, OpKind, entry_name

if TYPE_CHECKING:
    from memtrace_loop.memory_systems.base import MemorySystem
    from memtrace_loop.pipeline.backends.embeddings import Embedder
    from memtrace_loop.pipeline.core.graph import ExecutionGraph, Operation
    from memtrace_loop.pipeline.core.records import Conversation, Turn


def build(knobs: LongContextKnobs, embedder: Embedder) -> MemorySystem:
    from memtrace_loop.memory_systems.long_context.system import LongContextMemory  # DSPy: when a system is built

    return LongContextMemory(knobs)  # no embedder: the context is the buffer


def _window_before(
    system: MemorySystem, graph: ExecutionGraph, conversation: Conversation, turn: Turn
) -> tuple[Mapping[str, Any], ...]:
    later = conversation.turns[conversation.turns.index(turn) + 1 :]
    entries = [graph.latest(entry_name(t.id)) for t in later]
    tokens = [int(e.meta.get("tokens", 0)) if e is not None else 0 for e in entries]
    if not later or not all(tokens):
        return ()
    return ({"window_tokens": sum(tokens)},)


def _trimmed_by(graph: ExecutionGraph, turn_id: str) -> Operation | None:
    ops = [o for o in graph.operations() if o.stage == TRIM_STAGE and turn_id in o.meta.get("trimmed", ())]
    return ops[0] if ops else None


FAULTS: tuple[FaultPlan, ...] = (
    KnobFault(FaultKind.TRIMMED_BUFFER, _window_before, _trimmed_by, "UpdateError"), WRONG_ANSWER,
)


SPEC: MemorySystemSpec[LongContextKnobs] = MemorySystemSpec(
    name="long_context",
    knobs=LongContextKnobs,
    build=build,
    stages=STAGES,
    faults=FAULTS,
    unit_namespaces=frozenset({Namespace.ENTRY}),
    op_kinds=frozenset({OpKind.EXTRACTION, OpKind.RETRIEVAL, OpKind.RESPONSE}),  # + UPDATE when a trim happens
    replay=Replay.FULL,
    generous_knobs={"window_tokens": 1_000_000},
    prior=WalkPrior(first_kinds=frozenset({OpKind.UPDATE, OpKind.DELETION})),
    knob_worlds=(KnobWorld("800-token window", {"window_tokens": 800}),),
)
