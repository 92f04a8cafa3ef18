"""Test helpers shared by the test suite (not part of the installed package).

`openai_server` holds a real local HTTP server speaking the OpenAI protocol, with fault injection.
This module holds two small isolation helpers for tests that touch DSPy or the network:
`isolate_llm_env` (offline env vars, a temporary DSPy cache, no ambient OpenAI settings) and
`forbid_network` (any socket connection outside 127.0.0.1 fails the test).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

_LOOPBACK = ("127.0.0.1", "::1", "localhost")


def isolate_llm_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Offline env for DSPy/LiteLLM and a fresh DSPy response cache under `tmp_path`; returns its dir.

    The previous `dspy.cache` (or its absence, DSPy builds it lazily) is restored after the test.
    """
    import dspy
    from dspy.clients.cache import Cache

    cache_dir = tmp_path / "dspy_cache"
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("DSPY_CACHEDIR", str(cache_dir))
    for name in ("OPENAI_API_KEY", "OPENAI_API_BASE", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    fresh = Cache(
        enable_disk_cache=True,
        enable_memory_cache=True,
        disk_cache_dir=str(cache_dir),
        disk_size_limit_bytes=100 * 1024 * 1024,
    )
    monkeypatch.setitem(vars(dspy), "cache", fresh)
    return cache_dir


def forbid_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every socket connection to a non-loopback address raise (AF_UNIX is allowed)."""
    original = socket.socket.connect

    def guarded(self: socket.socket, address: Any) -> Any:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            host = address[0] if isinstance(address, tuple) else address
            if host not in _LOOPBACK:
                raise OSError(f"network access to {address!r} is forbidden in tests")
        return original(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded)


@contextmanager
def root_handlers(*handlers: logging.Handler) -> Iterator[logging.Logger]:
    """The root logger with only `handlers` for the block (what `setup_logging` finds under Hydra); its
    handlers and level restored afterwards, every handler added in the block closed."""
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    root.handlers = list(handlers)
    try:
        yield root
    finally:
        for handler in root.handlers:
            if handler not in saved_handlers:
                handler.close()
        root.handlers = saved_handlers
        root.setLevel(saved_level)
