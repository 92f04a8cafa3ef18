"""Memory units put into a fresh mem0 store without mem0's LLM (what replay needs).

`live_units_of(graph)` and `insert_units` (our embeddings, mem0's payload, uuid5 ids: the same store every
time). No LLM, no tracing.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from typing import Any

from memtrace_loop.memory_systems.mem0ai.trace import LiveUnit
from memtrace_loop.pipeline.backends.embeddings import Embedder
from memtrace_loop.pipeline.core.conventions import Namespace, key_of, prefix
from memtrace_loop.pipeline.core.graph import ExecutionGraph

__all__ = ["insert_units", "live_units_of", "unit_number"]

_NAMESPACE = uuid.UUID("6f1d4c1e-2b7a-4c55-9a57-0d7f2f4e6a10")


def unit_number(name: str) -> int:
    """`m12` -> 12 (0 for a name of another shape)."""
    digits = name.lstrip("m")
    return int(digits) if digits.isdigit() else 0


def live_units_of(graph: ExecutionGraph) -> tuple[tuple[LiveUnit, ...], int]:
    """The units live at question time in `graph` (unit order) and how many units were ever created."""
    names = sorted((key_of(n, Namespace.MEMORY) for n in graph.names(prefix(Namespace.MEMORY))), key=unit_number)
    units = []
    for name in names:
        latest = graph.latest(f"{prefix(Namespace.MEMORY)}{name}")
        if latest is None or latest.meta.get("deleted") or not latest.value:
            continue
        units.append(LiveUnit(
            name, str(latest.meta.get("mem0_id", "")), latest.id, latest.value,
            str(latest.meta.get("time", "")), str(latest.meta.get("turn", "")),
        ))
    return tuple(units), max((unit_number(n) for n in names), default=0)


def insert_units(memory: Any, embedder: Embedder, user_id: str, units: Sequence[LiveUnit]) -> tuple[LiveUnit, ...]:
    """Write `units` into `memory`'s store (one batch); returns them with the mem0 ids they got."""
    if not units:
        return ()
    placed = tuple(
        LiveUnit(u.name, str(uuid.uuid5(_NAMESPACE, f"{user_id}/{u.name}")), u.var, u.text, u.time, u.turn)
        for u in units
    )
    vectors = embedder.embed([u.text for u in placed])
    payloads = [
        {"data": u.text, "hash": hashlib.md5(u.text.encode()).hexdigest(), "user_id": user_id,
         "session_date": u.time[:10], "turn": u.turn}
        for u in placed
    ]
    memory.vector_store.insert(
        vectors=[[float(x) for x in row] for row in vectors], ids=[u.mem0_id for u in placed], payloads=payloads
    )
    return placed
