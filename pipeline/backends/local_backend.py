"""The `local` LM backend (`lm.<role>.backend: local`) as `SPEC`: a GGUF model served by llama.cpp.

Its record is `LocalLMConfig`. It has no engines of its own: the run's `LocalServers`
(`pipeline.backends.local_server`, owned by the entry point) starts the model's loopback server and
turns the role's config into an `openai` one at that server, which `build_lm` builds as any endpoint;
asked for engines directly, it refuses with a ConfigError saying so. It does not start servers.
"""

from __future__ import annotations

from memtrace_loop.pipeline.backends.lm import LocalLMConfig
from memtrace_loop.pipeline.backends.spec import BackendSpec, Engines
from memtrace_loop.pipeline.core.config import ConfigError

__all__ = ["SPEC", "local_engines"]


def local_engines(config: LocalLMConfig) -> Engines:
    """Never used directly: a `local` role is served first (`LocalServers.serve`), then built as `openai`."""
    raise ConfigError(
        "lm backend 'local' needs the run's local servers: build it with build_lm(..., servers=LocalServers())"
    )


SPEC = BackendSpec(LocalLMConfig, local_engines)
