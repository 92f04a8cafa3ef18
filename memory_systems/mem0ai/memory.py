"""Building one unmodified `mem0.Memory` per conversation, in a folder of its own.

`open_memory(folder, embedder, recorder)` is `Memory.from_config` with a local Qdrant at
`<folder>/qdrant` (`on_disk: true`: mem0 1.0.5 deletes a local path at init otherwise), the SQLite
history at `<folder>/history.db` and `embedding_model_dims` = our embedder's `dim`. The config names
mem0's built-in `openai` providers (from_config accepts only built-in names) with an obviously fake
placeholder key, needed only for their construction: no request is ever sent with it, because
`memory.llm` and `memory.embedding_model` are then replaced by our `LMBridge` and `EmbedderBridge`,
and the recorder's wrappers are installed. The key is never logged or traced.

`new_folder(label)` is a fresh folder under `MEM0_DIR` (or the temp dir), named by the label's safe
stem (`pipeline.core.safe_names.file_stem`: a conversation id never leads outside it): local Qdrant
allows one client per path, so every state (a conversation's memory, a replay's rebuilt one) has its own.
`close_memory` releases the Qdrant client and the SQLite connection and removes the folder.

mem0 logs several INFO lines per `add` (with the memories' text); unless the `mem0` logger was given a
level of its own, it is set to WARNING, so a run's log keeps mem0's warnings and errors (its silent
decisions, which the adapter also records) without one line per store call.

It traces nothing and decides nothing about turns (`memory_systems.mem0ai.system`).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from typing import Any

from memtrace_loop.memory_systems.mem0ai.bridge import EmbedderBridge, LMBridge
from memtrace_loop.memory_systems.mem0ai.hooks import import_mem0
from memtrace_loop.memory_systems.mem0ai.observers import MEM0_LOGGER, AddRecorder
from memtrace_loop.pipeline.backends.embeddings import Embedder
from memtrace_loop.pipeline.core.safe_names import file_stem

__all__ = ["COLLECTION", "PLACEHOLDER_KEY", "close_memory", "new_folder", "open_memory"]

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
