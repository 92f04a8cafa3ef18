"""What a Mem0-shaped construction stage, called again, puts in memory that its recorded operation did not.

For ours and mem0ai's graph shape: an extraction's new facts; a decision's ADD / UPDATE texts the store did
not write, and old versions the recorded decision destroyed that the new one leaves alone. Only what the
re-run wrote, dated by the turn. Pure functions over the graph; no LLM.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memtrace_loop.memory_systems.base import ReplayUnsupportedError, RestoredUnit
from memtrace_loop.pipeline.core.conventions import Namespace, OpStatus, is_in, key_of
from memtrace_loop.pipeline.core.graph import ExecutionGraph, Operation, Variable

_WRITES = ("ADD", "UPDATE")
_OVERWRITES = ("UPDATE", "DELETE")


@dataclass(frozen=True)
class Action:
    """One decision entry as both systems read it: event, the memory key it names, its text."""

    event: str
    key: str
    text: str


def read_turn(graph: ExecutionGraph, op: Operation) -> Variable:
    """The turn variable operation `op` read (directly, or through the producers of its first input)."""
    seen: set[str] = set()
    while op.id not in seen:
        seen.add(op.id)
        turn = next((v for v in op.inputs if is_in(v, Namespace.TURN)), None)
        if turn is not None:
            return graph.variable(turn)
        producer = graph.producer(op.inputs[0]) if op.inputs else None
        if producer is None:
            break
        op = producer
    raise ReplayUnsupportedError(f"operation {op.id!r} of graph {graph.graph_id!r} reads no conversation turn")


def single_output(graph: ExecutionGraph, op: Operation) -> Variable:
    """The one output variable of a recorded LLM operation (a clear error when it has none)."""
    if len(op.outputs) != 1:
        raise ReplayUnsupportedError(
            f"operation {op.id!r} ({op.stage}) of graph {graph.graph_id!r} has {len(op.outputs)} outputs, not 1"
        )
    return graph.variable(op.outputs[0])


def fact_units(graph: ExecutionGraph, op: Operation, facts: Iterable[Any]) -> tuple[RestoredUnit, ...]:
    """The facts of a re-run extraction that the recorded output (a JSON list of texts) does not hold."""
    output = single_output(graph, op)
    recorded = {str(f).strip() for f in json.loads(output.value or "[]")}
    time = str(read_turn(graph, op).meta.get("time", ""))
    new = dict.fromkeys(t for t in (str(f).strip() for f in facts) if t and t not in recorded)
    return tuple(RestoredUnit(text, time, output.id) for text in new)


def decision_units(
    graph: ExecutionGraph, op: Operation, new: Sequence[Action], shown: Mapping[str, str],
) -> tuple[RestoredUnit, ...]:
    """What a re-run decision (`new`) writes that the store did not write on the recorded one, and the old versions it
    keeps."""
    decision = single_output(graph, op)
    time = str(read_turn(graph, op).meta.get("time", ""))
    written = _stored_texts(graph, decision.id)
    keys = set(shown.values())
    fresh = dict.fromkeys(
        a.text.strip() for a in new
        if a.event in _WRITES and a.text.strip() and (a.event == "ADD" or a.key in keys)
    )
    units = [RestoredUnit(text, time, decision.id) for text in fresh if text not in written]
    touched = {a.key for a in new if a.event in _OVERWRITES}
    for old in _overwritten(graph, decision.id):
        if shown.get(key_of(old.id, Namespace.MEMORY)) not in touched and old.value:
            units.append(RestoredUnit(old.value, str(old.meta.get("time", "")), old.id))
    return tuple(units)


def _stored_texts(graph: ExecutionGraph, decision_var: str) -> set[str]:
    """The texts the store really wrote on this decision (an action it rejected or dropped wrote none)."""
    return {
        graph.variable(out).value.strip()
        for store in graph.consumers(decision_var) if store.status == OpStatus.OK
        for out in store.outputs if is_in(out, Namespace.MEMORY)
    } - {""}


def _overwritten(graph: ExecutionGraph, decision_var: str) -> list[Variable]:
    """The memory versions the store really deleted or overwrote on this decision (in store order)."""
    found = []
    for store in graph.consumers(decision_var):
        if store.status == OpStatus.OK and len(store.inputs) == 2 and is_in(store.inputs[1], Namespace.MEMORY):
            found.append(graph.variable(store.inputs[1]))
    return found
