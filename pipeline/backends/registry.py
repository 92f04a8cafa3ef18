"""LM backends by config name: `lm.<role>.backend` -> (schema, builder).

`sim` is the simulated world's deterministic stand-in (this registry and the dataset registry are the
only modules that import `pipeline.sim`); `openai` is any OpenAI-compatible endpoint (built in
`pipeline.backends.lm`). Both read an `LMConfig`. Adding a backend is one builder and one line here.
`build_lm` builds one role's LM by its backend, `build_lm_set` the four roles. It does not parse
configs (see `LMConfig.from_mapping`) and runs nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import dspy
from memtrace_loop.pipeline.backends.lm import LMConfig, LMSet, build_openai_lm, describe, lm_configs
from memtrace_loop.pipeline.core.config import ConfigError

logger = logging.getLogger(__name__)


def build_sim_lm(config: LMConfig) -> dspy.LM:
    """`dspy.LM("sim/<model>")` on the deterministic stand-in engine (plus its async twin). Offline."""
    from memtrace_loop.pipeline.sim.engine import AsyncSimEngine, SimEngine

    engine = SimEngine(paraphrase=config.paraphrase)
    return dspy.LM(
        f"sim/{config.model}" + ("-paraphrasing" if config.paraphrase else ""),  # its own cache entries
        engine=engine,
        async_engine=AsyncSimEngine(engine),
        cache=config.cache,
        temperature=config.temperature,
        max_tokens=config.max_tokens,
        num_retries=config.num_retries,
    )


@dataclass(frozen=True)
class BackendEntry:
    schema: type[LMConfig]
    build: Callable[[LMConfig], dspy.LM]
    keys: tuple[str, ...]  # the schema's keys this backend reads (what a config of it shows)


ENTRY_BY_BACKEND: Mapping[str, BackendEntry] = MappingProxyType(
    {
        "sim": BackendEntry(
            LMConfig, build_sim_lm, ("temperature", "max_tokens", "num_retries", "cache", "paraphrase")
        ),
        "openai": BackendEntry(LMConfig, build_openai_lm, tuple(k for k in LMConfig.model_fields if k != "paraphrase")),
    }
)


def backend_entry(name: str, key: str = "lm backend") -> BackendEntry:
    if name not in ENTRY_BY_BACKEND:
        raise ConfigError(f"{key}: unknown backend {name!r} (available: {list(ENTRY_BY_BACKEND)})")
    return ENTRY_BY_BACKEND[name]


def lm_set_configs(mapping: Mapping[str, Any]) -> dict[str, LMConfig]:
    """The four roles' configs from the `lm` node, each naming a registered backend (else a ConfigError
    naming `lm.<role>.backend`)."""
    configs = lm_configs(mapping)
    for role, config in configs.items():
        backend_entry(config.backend, f"lm.{role}.backend")
    return configs


def build_lm(config: LMConfig | Mapping[str, Any]) -> dspy.LM:
    """A `dspy.LM` for one config, built by its backend's entry. For `openai` the key is read from
    `os.environ[api_key_env]` now."""
    if not isinstance(config, LMConfig):
        config = LMConfig.from_mapping(config)
    lm = backend_entry(config.backend).build(config)
    logger.debug("built LM %s", describe(config))
    return lm


def build_lm_set(mapping: Mapping[str, Any]) -> LMSet:
    """Build the task, judge, attributor and rewriter LMs from one mapping of four LMConfig mappings."""
    return LMSet(**{role: build_lm(config) for role, config in lm_set_configs(mapping).items()})


def sim_rule_instruction(instruction: str, output_fields: Iterable[str]) -> str:
    """`instruction` with the sentence of every simulated-world rule of the stand-in stage that a
    signature with `output_fields` is dispatched to appended: the prompt under which that stage of the
    simulated world makes no planted mistake. Unchanged for a stage the simulated world does not know."""
    from memtrace_loop.pipeline.sim.rules import rules_for_stage, stage_for_outputs, with_rules

    stage = stage_for_outputs(output_fields)
    return with_rules(instruction, [rule.id for rule in rules_for_stage(stage or "")])
