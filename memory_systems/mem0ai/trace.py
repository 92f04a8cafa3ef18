"""One mem0 `add()` (its recorded events) as graph operations with the Mem0-style system's shape.

`AddTrace(...).write(turn, events)` runs on the calling thread after `add()` returned: `extract_facts`,
`search_similar`, `decide_updates` and `store` operations, each decision action replayed as mem0 1.0.x
treats it (an action that should have reached the store but did not is a FAILED `store` operation fed by
the decision). Units are named `m1`, `m2`, ... per conversation; no wall-clock time enters the graph.
It calls no LLM and touches no store.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memtrace_loop.memory_systems.answering import record_turn
from memtrace_loop.memory_systems.mem0ai.bridge import EXTRACTION, UPDATE
from memtrace_loop.memory_systems.mem0ai.hooks import import_mem0
from memtrace_loop.memory_systems.mem0ai.observers import Event, HistoryRow, LMCall, LogLine, SearchCall, StoreCall
from memtrace_loop.memory_systems.mem0ai.schema import SEARCH_STAGE, STORE_STAGE
from memtrace_loop.memory_systems.signatures import render_memory_line
from memtrace_loop.pipeline.core.conventions import (
    OpKind,
    OpStatus,
    VarKind,
    decision_name,
    facts_name,
    memory_name,
    similar_name,
)
from memtrace_loop.pipeline.core.graph import Usage
from memtrace_loop.pipeline.core.records import Turn
from memtrace_loop.pipeline.core.tracing import MAX_RAW_CHARS, Tracer

# what mem0 1.0.x logs when it could not read a stage's reply (and goes on with nothing)
_PARSE_ERRORS = {
    EXTRACTION: ("Error in new_retrieved_facts",),
    UPDATE: ("Invalid JSON response", "Empty response from LLM", "Error in new memory actions response"),
}
_DROPPED = "Error processing memory action"
# a store write that never happened has the kind the write would have had (what the attributors read)
_KIND_BY_EVENT = {"ADD": OpKind.EXTRACTION, "UPDATE": OpKind.UPDATE, "DELETE": OpKind.DELETION}


@dataclass(frozen=True)
class LiveUnit:
    """A memory unit in mem0's store: our name, mem0's id, the graph variable of its current version,
    its text, the ISO time and turn of that version."""

    name: str
    mem0_id: str
    var: str
    text: str
    time: str
    turn: str


class UnitBook:
    """Our unit names for mem0's ids in one conversation, and each unit's current version (mutable
    while one thread ingests; `live()` is the frozen result)."""

    def __init__(self, units: Sequence[LiveUnit] = (), created: int = 0) -> None:
        self._by_id: dict[str, LiveUnit] = {u.mem0_id: u for u in units}
        self._created = max(created, len(units))

    @property
    def created(self) -> int:
        return self._created

    def new_name(self) -> str:
        self._created += 1
        return f"m{self._created}"

    def get(self, mem0_id: str) -> LiveUnit | None:
        return self._by_id.get(mem0_id)

    def put(self, unit: LiveUnit) -> None:
        self._by_id[unit.mem0_id] = unit

    def remove(self, mem0_id: str) -> None:
        self._by_id.pop(mem0_id, None)

    def live(self) -> tuple[LiveUnit, ...]:
        return tuple(sorted(self._by_id.values(), key=lambda u: int(u.name.lstrip("m") or 0)))


def parse_reply(reply: str) -> Any:
    """The JSON value of an LLM reply, read the way mem0 1.0.x reads it (code fences and chatty text
    around the object tolerated); raises ValueError when mem0 could not read it either."""
    utils = import_mem0().memory.utils
    try:
        return json.loads(utils.remove_code_blocks(reply), strict=False)
    except json.JSONDecodeError:
        return json.loads(utils.extract_json(reply), strict=False)


@dataclass(frozen=True)
class _Call:
    """One LLM call as an operation: status, error, raw output."""

    ok: bool
    error: str | None
    raw: str


def _judge_call(call: LMCall | None, logs: Sequence[str], key: str) -> tuple[_Call, list[Any]]:
    """Whether mem0 got a usable reply from `call`, and the list under `key` it read from it."""
    if call is None:
        return _Call(False, "mem0 made no call for this stage", ""), []
    raw = call.reply[:MAX_RAW_CHARS]
    if call.error is not None:
        return _Call(False, call.error, raw), []
    if not call.reply.strip():
        return _Call(False, "empty reply: mem0 read nothing from it", raw), []
    logged = next((line for line in logs if line.startswith(_PARSE_ERRORS[call.stage])), None)
    try:
        value = parse_reply(call.reply)
    except ValueError as error:
        return _Call(False, logged or f"reply is not JSON: {error}", raw), []
    items = value.get(key) if isinstance(value, dict) else None
    if not isinstance(items, list):
        return _Call(False, logged or f'reply is not a JSON object with a "{key}" list', raw), []
    return _Call(logged is None, logged, raw), items


class AddTrace:
    """Writes the graph of one conversation's adds (one `write` per turn, in turn order)."""

    def __init__(self, tracer: Tracer, units: UnitBook, prompt_by_stage: Mapping[str, str]) -> None:
        self.tracer = tracer
        self.units = units
        self.prompt_by_stage = prompt_by_stage

    def write(self, turn: Turn, events: Sequence[Event]) -> None:
        tracer = self.tracer
        turn_var = record_turn(tracer, turn)
        calls = [e for e in events if isinstance(e, LMCall)]
        logs = [e.message for e in events if isinstance(e, LogLine)]
        searches = [e for e in events if isinstance(e, SearchCall)]
        extraction = next((c for c in calls if c.stage == EXTRACTION), None)
        judged, _ = _judge_call(extraction, logs, "facts")
        facts = [s.query for s in searches] if judged.ok else []
        facts_var = tracer.variable(facts_name(turn.id), VarKind.FACTS, json.dumps(facts))
        self._llm_op("extract_facts", EXTRACTION, OpKind.EXTRACTION, [turn_var], facts_var, judged, turn)
        if not facts:
            return
        shown = self._record_search(turn, facts_var, searches)
        update = next((c for c in calls if c.stage == UPDATE), None)
        decided, actions = _judge_call(update, logs, "memory")
        decision_var = tracer.variable(decision_name(turn.id), VarKind.DECISION, json.dumps(actions))
        self._llm_op("decide_updates", UPDATE, OpKind.UPDATE, [facts_var, shown[0]], decision_var, decided, turn)
        _apply(self, turn, decision_var, actions, shown[1], events, logs)

    def _llm_op(
        self, name: str, stage: str, kind: OpKind, inputs: list[str], output: str, call: _Call, turn: Turn
    ) -> None:
        meta: dict[str, Any] = {"session_date": turn.time[:10]}
        if not call.ok:
            meta["raw_output"] = call.raw
        self.tracer.operation(
            name, stage, kind, inputs, [output], prompt=self.tracer.prompt_variable(stage, self.prompt_by_stage[stage]),
            status=OpStatus.OK if call.ok else OpStatus.FAILED, error=call.error, usage=Usage(calls=1), meta=meta,
        )

    def _record_search(self, turn: Turn, facts_var: str, searches: Sequence[SearchCall]) -> tuple[str, dict[str, str]]:
        """The `search_similar` operation; returns the similar variable and mem0's "0", "1", ... -> mem0 id."""
        shown: dict[str, str] = {}  # mem0 id -> text, in first-hit order (mem0's dedup)
        for search in searches:
            for mem0_id, _, text in search.hits:
                shown.setdefault(mem0_id, text)
        temp_ids = {str(i): mem0_id for i, mem0_id in enumerate(shown)}
        lines = "\n".join(render_memory_line(temp, shown[mem0_id]) for temp, mem0_id in temp_ids.items())
        similar_var = self.tracer.variable(similar_name(turn.id), VarKind.RETRIEVED, lines)
        unit_vars = [u.var for mem0_id in shown if (u := self.units.get(mem0_id)) is not None]
        self.tracer.operation(
            "search_similar", SEARCH_STAGE, OpKind.RETRIEVAL, [facts_var, *unit_vars], [similar_var],
            meta={"k": max((s.limit for s in searches), default=0), "queries": len(searches),
                  "shown": {temp: self._name(mem0_id) for temp, mem0_id in temp_ids.items()}},
        )
        return similar_var, temp_ids

    def _name(self, mem0_id: str) -> str:
        unit = self.units.get(mem0_id)
        return unit.name if unit is not None else ""


def _apply(
    trace: AddTrace, turn: Turn, decision_var: str, actions: Sequence[Any], temp_ids: Mapping[str, str],
    events: Sequence[Event], logs: Sequence[str],
) -> None:
    """Each action of the decision as mem0's loop treats it: a store effect, or a FAILED store op."""
    writes = deque(e for e in events if isinstance(e, StoreCall) and (e.op != "update" or e.vector))
    history = deque(e for e in events if isinstance(e, HistoryRow))
    dropped_logs = deque(line for line in logs if line.startswith(_DROPPED))
    for action in actions:
        why = _rejected(action, temp_ids)
        if why is None:
            event = action["event"]
            if event == "NONE":
                continue
            target = None if event == "ADD" else temp_ids[action["id"]]
            expected = {"ADD": "insert", "UPDATE": "update", "DELETE": "delete"}[event]
            if writes and writes[0].op == expected and (target is None or writes[0].mem0_id == target):
                _record_write(trace, turn, decision_var, writes.popleft(), history)
                continue
            why = f"mem0 did not apply it (the memory {target!r} was already gone)"
        if why.startswith("mem0 dropped") or why.startswith("mem0 did not"):
            why += f"; mem0 logged: {dropped_logs.popleft()}" if dropped_logs else ""
        event = str(action.get("event", "")) if isinstance(action, dict) else ""
        kind = _KIND_BY_EVENT.get(event, OpKind.OTHER)
        trace.tracer.operation(
            f"memory_{event.lower() or 'action'}", STORE_STAGE, kind, [decision_var], [], status=OpStatus.FAILED,
            error=f"action {json.dumps(action, default=str)[:300]} never reached the store: {why}",
        )


def _rejected(action: Any, temp_ids: Mapping[str, str]) -> str | None:
    """Why mem0 1.0.x would not apply `action` (None: it applies it, or it is a NONE)."""
    if not isinstance(action, dict):
        return "mem0 dropped it: not a JSON object"
    if not action.get("text"):
        return "mem0 skips an action without text"
    event = action.get("event")
    if event not in ("ADD", "UPDATE", "DELETE", "NONE"):
        return f"mem0 ignores the unknown event {event!r}"
    key = action.get("id")
    if event in ("UPDATE", "DELETE") and not (isinstance(key, str) and key in temp_ids):
        return (f"mem0 dropped it: id {key!r} is not one of the {len(temp_ids)} memories shown "
                f"({', '.join(temp_ids) or 'none'})")
    return None


def _record_write(trace: AddTrace, turn: Turn, decision_var: str, write: StoreCall, history: deque[HistoryRow]) -> None:
    tracer, units = trace.tracer, trace.units
    row = next((r for r in history if r.mem0_id == write.mem0_id), None)
    if row is not None:
        history.remove(row)
    meta = {"time": turn.time, "turn": turn.id, "mem0_id": write.mem0_id}
    op_meta = {"mem0_id": write.mem0_id, "history": row.event if row is not None else ""}
    old = units.get(write.mem0_id)
    if write.op == "insert" or old is None:
        name = units.new_name()
        text = (row.new if row is not None else None) or write.text or ""
        var = tracer.variable(memory_name(name), VarKind.MEMORY, text, meta)
        tracer.operation("memory_add", STORE_STAGE, OpKind.EXTRACTION, [decision_var], [var], meta=op_meta)
        units.put(LiveUnit(name, write.mem0_id, var, text, turn.time, turn.id))
        return
    if write.op == "update":
        text = (row.new if row is not None else None) or write.text or ""
        var = tracer.variable(memory_name(old.name), VarKind.MEMORY, text, meta)
        tracer.operation("memory_update", STORE_STAGE, OpKind.UPDATE, [decision_var, old.var], [var], meta=op_meta)
        units.put(LiveUnit(old.name, write.mem0_id, var, text, turn.time, turn.id))
        return
    var = tracer.variable(memory_name(old.name), VarKind.MEMORY, "", {**meta, "deleted": True})
    tracer.operation("memory_delete", STORE_STAGE, OpKind.DELETION, [decision_var, old.var], [var], meta=op_meta)
    units.remove(write.mem0_id)
