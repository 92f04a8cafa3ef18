"""One unmodified `mem0.Memory` per conversation, in a folder of its own.

`open_memory` is `Memory.from_config` with a local Qdrant and SQLite history, a fake placeholder key
(never used: `llm` and `embedding_model` are replaced by our bridges); `new_folder`, `close_memory`. mem0's
per-add INFO lines are silenced to WARNING unless its logger has a level. For replay, `live_units_of(graph)` and
`insert_units` put units straight into a fresh store (our embeddings, mem0's payload, uuid5 ids), no LLM.
It traces nothing.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Sequence
from typing import Any

from memtrace_loop.memory_systems.mem0ai.bridge import EmbedderBridge, LMBridge
from memtrace_loop.memory_systems.mem0ai.hooks import import_mem0
from memtrace_loop.memory_systems.mem0ai.observers import MEM0_LOGGER, AddRecorder
from memtrace_loop.memory_systems.mem0ai.trace import LiveUnit
from memtrace_loop.pipeline.backends.embeddings import Embedder
from memtrace_loop.pipeline.core.conventions import Namespace, key_of, prefix
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.safe_names import file_stem

COLLECTION = "memtrace"
# mem0's openai providers want a key to construct; this one is never sent anywhere (both are replaced)
PLACEHOLDER_KEY = "not-a-key-mem0ai-objects-are-replaced"


def new_folder(label: str) -> str:
    """A new, empty folder for one state's Qdrant collection and history db."""
    root = os.path.join(os.environ.get("MEM0_DIR") or tempfile.gettempdir(), "memtrace-mem0ai")
    os.makedirs(root, exist_ok=True)
    return tempfile.mkdtemp(prefix=file_stem(label) + "-", dir=root)  # a conversation id is data: a safe stem


def open_memory(
    folder: str, embedder: Embedder, recorder: AddRecorder, *, observe: bool = True
) -> tuple[Any, LMBridge]:
    """A `mem0.Memory` in `folder` whose LLM and embedder are ours and whose steps `recorder` sees
    (`observe=False`: no wrappers, mem0 alone with our LLM and embedder: the overhead benchmark's baseline)."""
    mem0 = import_mem0()
    quiet = logging.getLogger(MEM0_LOGGER)
    if quiet.level == logging.NOTSET:
        quiet.setLevel(logging.WARNING)
    config = {
        "vector_store": {
            "provider": "qdrant",
            "config": {
                "collection_name": COLLECTION,
                "path": os.path.join(folder, "qdrant"),
                "on_disk": True,
                "embedding_model_dims": embedder.dim,
            },
        },
        "llm": {"provider": "openai", "config": {"api_key": PLACEHOLDER_KEY, "model": "memtrace-bridge"}},
        "embedder": {
            "provider": "openai",
            "config": {"api_key": PLACEHOLDER_KEY, "embedding_dims": embedder.dim},
        },
        "history_db_path": os.path.join(folder, "history.db"),
    }
    memory = mem0.Memory.from_config(config)
    bridge = LMBridge(recorder)
    memory.llm = bridge
    memory.embedding_model = EmbedderBridge(embedder)
    if observe:
        recorder.install(memory)
    return memory, bridge


def close_memory(memory: Any, folder: str) -> None:
    """Release the memory's Qdrant client and history db, and remove its folder (best effort)."""
    try:
        memory.close()
        client = getattr(memory.vector_store, "client", None)
        if client is not None:
            client.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


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
