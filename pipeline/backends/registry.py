"""LM backends by config name: `lm.<role>.backend` -> (schema, builder).

`sim` is the simulated world's deterministic stand-in (this registry and the dataset registry are the
only modules that import `pipeline.sim`); `openai` is any OpenAI-compatible endpoint
(`pipeline.backends.openai_engine`); `local` is a GGUF model served by llama.cpp on loopback: the
run's `LocalServers` (`servers=`, owned by the entry point) starts it and turns the role's config into
an `openai` config at that server, so it is spoken to as any endpoint. All read an `LMConfig`.
`structured_output: json_schema` marks the engines for JSON-schema output
(`pipeline.backends.structured_output`). Adding a backend is one engine builder
and one line here. `build_lm` builds one role's LM by its backend, `build_lm_set` the four roles.

Every LM is `dspy.LM(..., engine=GuardedEngine(inner), async_engine=AsyncGuardedEngine(inner),
num_retries=0)`: the project's retry loop, stop token and failure guard
(`pipeline.backends.guarded_engine`) sit around every backend, the run's `StopToken`, `FailureGuard`
and `RetryLedger` passed in explicitly (`stop=`, `guard=`, `retries=`; None: not used). It does not
parse configs (see `LMConfig.from_mapping`) and runs nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import dspy
from memtrace_loop.pipeline.backends.failure_guard import FailureGuard
from memtrace_loop.pipeline.backends.guarded_engine import AsyncGuardedEngine, GuardedEngine, GuardSettings
from memtrace_loop.pipeline.backends.lm import LMConfig, LMSet, describe, lm_configs, lm_model_name
from memtrace_loop.pipeline.backends.local_server import LocalServers, model_path_of
from memtrace_loop.pipeline.backends.openai_engine import AsyncOpenAIEngine, OpenAIEngine, openai_endpoint
from memtrace_loop.pipeline.backends.resilience import RetryPolicy
from memtrace_loop.pipeline.backends.retry_ledger import RetryLedger
from memtrace_loop.pipeline.backends.structured_output import declare_structured_output
from memtrace_loop.pipeline.backends.test_world import TestWorld
from memtrace_loop.pipeline.core.config import ConfigError
from memtrace_loop.pipeline.core.stop import StopToken

logger = logging.getLogger(__name__)

# (sync engine, async engine, scrubbed endpoint) doing one attempt per call
Engines = tuple[Any, Any, str]


def sim_engines(config: LMConfig) -> Engines:
    """The deterministic stand-in engine (and its async twin). Offline."""
    from memtrace_loop.pipeline.sim.engine import AsyncSimEngine, SimEngine

    engine = SimEngine(paraphrase=config.paraphrase)
    return engine, AsyncSimEngine(engine), lm_model_name(config)


def openai_engines(config: LMConfig) -> Engines:
    """The native engines of an OpenAI-compatible endpoint (the key is read from the environment now)."""
    return OpenAIEngine(config), AsyncOpenAIEngine(config), openai_endpoint(config)


def local_engines(config: LMConfig) -> Engines:
    """Never used directly: a `local` role is served first (`LocalServers.serve`), then built as `openai`."""
    raise ConfigError(
        "lm backend 'local' needs the run's local servers: build it with build_lm(..., servers=LocalServers())"
    )


@dataclass(frozen=True)
class BackendEntry:
    schema: type[LMConfig]
    engines: Callable[[LMConfig], Engines]
    keys: tuple[str, ...]  # the schema's keys this backend reads (what a config of it shows)


_RETRY_KEYS = ("num_retries", "retry_after_cap_s", "deadline_s")
_LOCAL_ONLY = ("model_path", "context_size", "threads")

ENTRY_BY_BACKEND: Mapping[str, BackendEntry] = MappingProxyType(
    {
        "sim": BackendEntry(
            LMConfig, sim_engines,
            ("temperature", "max_tokens", *_RETRY_KEYS, "cache", "paraphrase", "structured_output"),
        ),
        "openai": BackendEntry(
            LMConfig, openai_engines, tuple(k for k in LMConfig.model_fields if k not in ("paraphrase", *_LOCAL_ONLY))
        ),
        "local": BackendEntry(
            LMConfig, local_engines,
            ("model", "temperature", "max_tokens", "timeout_s", *_RETRY_KEYS, "cache", "structured_output",
             *_LOCAL_ONLY),
        ),
    }
)


def retry_policy(config: LMConfig) -> RetryPolicy:
    return RetryPolicy(config.num_retries, config.retry_after_cap_s, config.deadline_s)


def backend_entry(name: str, key: str = "lm backend") -> BackendEntry:
    if name not in ENTRY_BY_BACKEND:
        raise ConfigError(f"{key}: unknown backend {name!r} (available: {list(ENTRY_BY_BACKEND)})")
    return ENTRY_BY_BACKEND[name]


def lm_set_configs(mapping: Mapping[str, Any]) -> dict[str, LMConfig]:
    """The four roles' configs from the `lm` node, each naming a registered backend (else a ConfigError
    naming `lm.<role>.backend`); a `local` role's model file must exist (else naming `lm.<role>.model_path`)."""
    configs = lm_configs(mapping)
    for role, config in configs.items():
        backend_entry(config.backend, f"lm.{role}.backend")
        if config.backend == "local":
            model_path_of(config, role)
    return configs


def build_lm(
    config: LMConfig | Mapping[str, Any],
    *,
    role: str = "default",
    stop: StopToken | None = None,
    guard: FailureGuard | None = None,
    retries: RetryLedger | None = None,
    servers: LocalServers | None = None,
) -> dspy.LM:
    """A `dspy.LM` for one config, its backend's engines behind a `GuardedEngine` for `role` (with the
    run's stop token, failure guard and retry ledger when given). For `openai` the key is read from
    `os.environ[api_key_env]` now; a `local` role is first served by `servers` (started on first use)."""
    if not isinstance(config, LMConfig):
        config = LMConfig.from_mapping(config, role=None if role == "default" else role)
    if config.backend == "local" and servers is not None:
        config = servers.serve(config, role)
    engine, async_engine, endpoint = backend_entry(config.backend).engines(config)
    settings = GuardSettings(role, endpoint, retry_policy(config), stop=stop, guard=guard, retries=retries)
    guarded, async_guarded = GuardedEngine(engine, settings), AsyncGuardedEngine(async_engine, settings)
    if config.structured_output == "json_schema":
        declare_structured_output(guarded)
        declare_structured_output(async_guarded)
    lm = dspy.LM(
        lm_model_name(config),
        engine=guarded,
        async_engine=async_guarded,
        cache=config.cache,
        temperature=config.temperature,
        max_tokens=config.max_tokens,
        num_retries=0,  # the guarded engine retries (bounded, logged, counted); DSPy's loop would not be
    )
    logger.debug("built LM for role %s: %s", role, describe(config))
    return lm


def build_lm_set(
    mapping: Mapping[str, Any],
    *,
    stop: StopToken | None = None,
    guard: FailureGuard | None = None,
    retries: RetryLedger | None = None,
    servers: LocalServers | None = None,
) -> LMSet:
    """Build the task, judge, attributor and rewriter LMs from one mapping of four LMConfig mappings,
    each on a guarded engine for its role sharing `stop`, `guard` and `retries` (the run's) and, for
    `local` roles, the run's `servers` (one server per model file, context size and threads)."""
    return LMSet(**{
        role: build_lm(config, role=role, stop=stop, guard=guard, retries=retries, servers=servers)
        for role, config in lm_set_configs(mapping).items()
    })


def backend_test_world(backend: str = "sim") -> TestWorld:
    """The test world of `backend` (per stage: its perfect instruction and rules); only `sim` is one."""
    if backend != "sim":
        raise ConfigError(f"lm backend {backend!r} is not a test world (only 'sim' is)")
    from memtrace_loop.pipeline.sim.test_world import sim_test_world

    return sim_test_world()
