"""Where the attribution benchmark's faults land in the Long-Context system (its `SPEC.faults`).

- trimmed buffer: `window_tokens` set to exactly the tokens of the entries after the evidence turn,
  so the evidence entry is the newest one trimmed; the truth is the `trim` operation that trimmed it.
It does not inject anything itself (`experiments.lab.benchmark.injection` does).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from memtrace_loop.memory_systems.spec import WRONG_ANSWER, FaultKind, FaultPlan, KnobFault
from memtrace_loop.pipeline.core.conventions import entry_name
from memtrace_loop.pipeline.core.graph import ExecutionGraph, Operation
from memtrace_loop.pipeline.core.records import Conversation, Turn

if TYPE_CHECKING:
    from memtrace_loop.memory_systems.base import MemorySystem


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
    ops = [o for o in graph.operations() if o.stage == "trim" and turn_id in o.meta.get("trimmed", ())]
    return ops[0] if ops else None


FAULTS: tuple[FaultPlan, ...] = (
    KnobFault(FaultKind.TRIMMED_BUFFER, _window_before, _trimmed_by, "UpdateError"), WRONG_ANSWER,
)
