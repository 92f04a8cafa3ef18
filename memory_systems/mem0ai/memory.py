"""One unmodified `mem0.Memory` per conversation, in a folder of its own.

`open_memory` is `Memory.from_config` with a local Qdrant and SQLite history, a fake placeholder key
(never used: `llm` and `embedding_model` are replaced by our bridges); `new_folder`, `close_memory`. mem0's
per-add INFO lines are silenced to WARNING unless its logger has a level. It traces nothing.
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
