"""Replay's stage repair for the EverMemOS-style system.

`recorded_call(graph, op)` rebuilds a stage's keyword inputs from the operation's inputs alone;
`repaired_units` gives what a re-run writer adds (new events with their dates, new narrative sentences);
the boundary and steering stages write no unit (`ReplayUnsupportedError`). No LLM call.
"""

from __future__ import annotations

import re
from typing import Any

from memtrace_loop.memory_systems.base import RecordedCall, ReplayUnsupportedError, RestoredUnit
from memtrace_loop.memory_systems.evermemos.signatures import event_value, stored_episode
from memtrace_loop.memory_systems.signatures import human_date
from memtrace_loop.pipeline.core.conventions import Namespace, episode_name, is_in
from memtrace_loop.pipeline.core.graph import ExecutionGraph, Operation, Variable

WRITERS = ("write_events", "write_episode")
STEERING = ("check_sufficiency", "expand_queries")
REPAIRED_STAGES = frozenset({*WRITERS, "detect_boundary", *STEERING})
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _iso(turn: Variable) -> str:
    return str(turn.meta.get("time", ""))


def _turns(graph: ExecutionGraph, op: Operation) -> list[Variable]:
    return [graph.variable(v) for v in op.inputs if is_in(v, Namespace.TURN)]


def _shown(graph: ExecutionGraph, op: Operation) -> str:
    """The episodes a steering operation read (its episode inputs), as the blocks it was shown."""
    episodes = (stored_episode(graph, graph.variable(v)) for v in op.inputs if is_in(v, Namespace.EPISODE))
    return "\n\n".join(e.block() for e in episodes)


def recorded_call(graph: ExecutionGraph, op: Operation) -> RecordedCall | None:
    """How `op` called its stage (None: not one of this system's construction or steering stages)."""
    turns = _turns(graph, op)
    if op.stage in WRITERS and turns:
        return RecordedCall(op.stage, {"turns": "\n".join(t.value for t in turns)}, _iso(turns[0]))
    if op.stage == "detect_boundary" and len(turns) >= 2:
        inputs = {"open_episode": "\n".join(t.value for t in turns[:-1]), "new_turn": turns[-1].value}
        return RecordedCall(op.stage, inputs, _iso(turns[-1]))
    if op.stage == "check_sufficiency" and op.inputs:
        question = graph.variable(op.inputs[0]).value
        return RecordedCall(op.stage, {"question": question, "retrieved_episodes": _shown(graph, op)})
    if op.stage == "expand_queries" and len(op.inputs) == 2:
        check = graph.producer(op.inputs[1])
        found = recorded_call(graph, check) if check is not None and check.stage == "check_sufficiency" else None
        return RecordedCall(op.stage, found.inputs) if found is not None else None
    return None


def repaired_units(graph: ExecutionGraph, op: Operation, prediction: Any) -> tuple[RestoredUnit, ...]:
    """What the re-run stage of `op` (its `prediction`) writes that `op` did not (see the module)."""
    if op.stage == "write_events":
        return _event_units(graph, op, prediction)
    if op.stage == "write_episode":
        return _narrative_units(graph, op, prediction)
    if op.stage == "detect_boundary":
        raise ReplayUnsupportedError(
            "evermemos: a re-run detect_boundary regroups turns into episodes; it writes no unit of its own"
        )
    raise ReplayUnsupportedError(f"evermemos: {op.stage} steers the search (retrieve_steered); it writes nothing")


def _event_units(graph: ExecutionGraph, op: Operation, prediction: Any) -> tuple[RestoredUnit, ...]:
    recorded = {graph.variable(v).value for v in op.outputs}
    turns = _turns(graph, op)
    date = human_date(_iso(turns[0])) if turns else ""
    source = op.outputs[0] if op.outputs else _episode_of(graph, op)
    units: dict[str, RestoredUnit] = {}
    for item in list(prediction.events or []):
        text = " ".join(str(item.text).split())
        time = " ".join(str(item.time).split()) or date
        if text and event_value(text, time) not in recorded:
            units.setdefault(event_value(text, time), RestoredUnit(text, time, source))
    return tuple(units.values())


def _episode_of(graph: ExecutionGraph, op: Operation) -> str:
    """The episode variable written for the same episode as `op` (for a writer without outputs)."""
    number = op.meta.get("episode")
    found = graph.versions(episode_name(int(number))) if number is not None else ()
    return found[0].id if found else op.id


def _narrative_units(graph: ExecutionGraph, op: Operation, prediction: Any) -> tuple[RestoredUnit, ...]:
    if len(op.outputs) != 1:
        raise ReplayUnsupportedError(f"operation {op.id!r} (write_episode) has {len(op.outputs)} outputs, not 1")
    episode = graph.variable(op.outputs[0])
    turns = _turns(graph, op)
    narrative = " ".join(str(prediction.narrative).split())
    sentences = dict.fromkeys(s for s in _SENTENCE_END.split(narrative) if s and s not in episode.value)
    return tuple(RestoredUnit(s, _iso(turns[0]) if turns else "", episode.id) for s in sentences)
