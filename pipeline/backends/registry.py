"""LM backends by config name (`lm.<role>.backend` -> the module exporting its `SPEC`), and the LM builders.

`LM_BACKENDS` is a `pipeline.core.registry.Registry`, one line per backend (`sim`: the simulated world,
`pipeline.sim.lm_backend`, which only this registry and the dataset registry reach; `openai`; `local`: a
GGUF model the run's `LocalServers` serves on loopback, built as an `openai` config at that server).
Adding a backend is its record in `pipeline.backends.lm`, its module exporting `SPEC`, one line here and
`conf/lm/<name>.yaml`.

`build_lm` builds one role's `dspy.LM(..., engine=GuardedEngine(inner), async_engine=AsyncGuardedEngine,
num_retries=0)` with the run's `RunServices` (None: fresh ones); with `reuse_calls` on, the run's
`ReplyStore` answers repeats. Every guarded engine of a set masks the keys of all the set's roles.
`build_lm_set` builds the four roles, each counting into the run's `CallLedger`. It runs nothing.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from memtrace_loop.pipeline.backends.lm import (
    ROLES,
    LMConfig,
    LMSet,
    LMSetConfig,
    LocalLMConfig,
    OpenAILMConfig,
    RetryPolicy,
    describe,
    lm_model_name,
)
from memtrace_loop.pipeline.backends.local_server import model_path_of
from memtrace_loop.pipeline.backends.spec import BackendSpec
from memtrace_loop.pipeline.backends.test_world import TestWorld
from memtrace_loop.pipeline.core.config import ConfigError
from memtrace_loop.pipeline.core.registry import Registry

if TYPE_CHECKING:
    import dspy
    from memtrace_loop.pipeline.backends.services import RunServices

logger = logging.getLogger(__name__)

__all__ = [
    "LM_BACKENDS",
    "BackendSpec",
    "backend_test_world",
    "build_lm",
    "build_lm_set",
    "lm_set_configs",
]

LM_BACKENDS: Registry[BackendSpec] = Registry(
    "backend",
    "lm backend",
    {
        "sim": "memtrace_loop.pipeline.sim.lm_backend",
        "openai": "memtrace_loop.pipeline.backends.spec:OPENAI",
        "local": "memtrace_loop.pipeline.backends.local_server",
    },
    unknown="{key}: unknown {what} {name!r} (available: {choices})",
)


def key_values(configs: Mapping[str, LMConfig] | tuple[LMConfig, ...]) -> tuple[str, ...]:
    """The values of the environment variables named by the configs' `api_key_env` (set ones only)."""
    records = configs.values() if isinstance(configs, Mapping) else configs
    names = {config.api_key_env for config in records if isinstance(config, OpenAILMConfig) and config.api_key_env}
    return tuple(sorted(value for name in names if (value := os.environ.get(name))))


def lm_set_configs(mapping: Mapping[str, Any] | LMSetConfig) -> LMSetConfig:
    """The four roles' records from the `lm` node (all four required), each naming a registered backend
    (else a ConfigError naming `lm.<role>.backend`); a `local` role's model file must exist."""
    if isinstance(mapping, LMSetConfig):
        return mapping
    if not isinstance(mapping, Mapping):
        raise TypeError(f"lm set config must be a mapping, got {type(mapping).__name__}")
    unknown = sorted(str(key) for key in mapping if key not in ROLES)
    missing = [role for role in ROLES if role not in mapping]
    if unknown or missing:
        raise ConfigError(f"lm set config: unknown roles {unknown}, missing roles {missing}; expected {list(ROLES)}")
    configs = LMSetConfig(**{role: LMConfig.from_mapping(mapping[role], role=role) for role in ROLES})
    for role, config in configs.by_role().items():
        LM_BACKENDS.get(config.backend, f"lm.{role}.backend")
        if isinstance(config, LocalLMConfig):
            model_path_of(config, role)
    return configs


def build_lm(
    config: LMConfig | Mapping[str, Any], *, role: str = "default", services: RunServices | None = None,
    secrets: tuple[str, ...] = (),
) -> dspy.LM:
    """A `dspy.LM` for one config, its backend's engine behind a `GuardedEngine` for `role`; `secrets` are
    masked in every reply, besides the config's own key (read from `os.environ[api_key_env]` now)."""
    import dspy  # the building half imports DSPy when called: listing backends and parsing configs do not
    from memtrace_loop.pipeline.backends.guarded_engine import AsyncGuardedEngine, GuardedEngine, GuardSettings
    from memtrace_loop.pipeline.backends.services import RunServices
    from memtrace_loop.pipeline.backends.structured_output import declare_structured_output

    if not isinstance(config, LMConfig):
        config = LMConfig.from_mapping(config, role=None if role == "default" else role)
    services = services or RunServices()
    if config.backend == "local" and services.servers is not None:
        config = services.servers.serve(config, role)
    engine, endpoint = LM_BACKENDS.get(config.backend).engines(config)
    ledger = services.ledger
    policy = RetryPolicy(config.num_retries, config.retry_after_cap_s, config.deadline_s)
    settings = GuardSettings(role, endpoint, policy, stop=services.stop, guard=ledger.guard,
                             retries=ledger.retries, max_tokens=ledger.max_tokens,
                             secrets=tuple(sorted({*secrets, *key_values((config,))})),
                             replies=services.replies if config.reuse_calls else None)
    guarded = GuardedEngine(engine, settings)
    async_guarded = AsyncGuardedEngine(guarded)
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


def build_lm_set(configs: Mapping[str, Any] | LMSetConfig, services: RunServices | None = None) -> LMSet:
    """The four roles' LMs of `configs`, sharing the run's `services`, each counting into its ledger."""
    from memtrace_loop.pipeline.backends.services import RunServices

    services = services or RunServices()
    by_role = lm_set_configs(configs).by_role()
    secrets = key_values(by_role)
    lms = LMSet(**{role: build_lm(config, role=role, services=services, secrets=secrets)
                   for role, config in by_role.items()})
    return services.ledger.calls.counted(lms)


def backend_test_world(backend: str = "sim") -> TestWorld:
    """The test world of `backend` (per stage: its perfect instruction and rules); only `sim` is one."""
    if backend != "sim":
        raise ConfigError(f"lm backend {backend!r} is not a test world (only 'sim' is)")
    from memtrace_loop.pipeline.sim.test_world import sim_test_world

    return sim_test_world()
