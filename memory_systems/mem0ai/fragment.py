"""The mem0 config fragment: a prompt set's hook texts as a mem0 user passes them to `Memory.from_config`.

`MEM0_CONFIG_FRAGMENT` (a `PromptFormat`) writes `mem0_config.yaml` / `.json` (only mem0's hook keys, the
date line as `{session_date}`) and reads one back as the hook stages; a key the installed `MemoryConfig`
lacks, or a non-hook key, is a `PromptFileError`; another mem0ai version warns. It builds no `Memory`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from memtrace_loop.memory_systems.mem0ai.hooks import DATE_PLACEHOLDER, HOOK_BY_STAGE, import_mem0, installed_version
from memtrace_loop.pipeline.core.prompt_files import ExportedPrompts, NonBlank, PromptFileError, dump_document
from memtrace_loop.pipeline.core.records import PromptSet
from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError

logger = logging.getLogger(__name__)

FORMAT_ID = "mem0ai-config-fragment"
FILE_STEM = "mem0_config"
NOTE = (
    f"Pass the texts under `config` to mem0's Memory.from_config(...) with your own settings. "
    f"{DATE_PLACEHOLDER} in custom_fact_extraction_prompt is the date placeholder: replace it with the date "
    f"of the conversation (YYYY-MM-DD; mem0's default prompt uses today's) first."
)
STAGE_BY_HOOK: Mapping[str, str] = {key: stage for stage, key in HOOK_BY_STAGE.items()}


def _some_keys(value: dict[str, str]) -> dict[str, str]:
    if not value:
        raise ValueError("must hold at least one mem0 config key")
    return value


class _FragmentFile(BaseModel):
    """The on-disk layout (the module docstring). Strict: no coercion, no extra keys."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    format: NonBlank
    mem0ai_version: NonBlank
    note: str = ""
    source_run: NonBlank | None = None
    config: Annotated[dict[NonBlank, NonBlank], AfterValidator(_some_keys)]


def _describe(error: ValidationError) -> str:
    parts = []
    for item in error.errors(include_url=False):
        where = "".join(f"[{part!r}]" if i else str(part) for i, part in enumerate(item["loc"])) or "<top level>"
        message = str(item["msg"]).removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown key (allowed: " + ", ".join(_FragmentFile.model_fields) + ")"
        parts.append(f"key {where}: {message}")
    return "; ".join(parts)


def mem0_config_keys() -> frozenset[str]:
    """The fields of the installed mem0's `MemoryConfig` (what `Memory.from_config` does not ignore)."""
    import_mem0()  # telemetry off and MEM0_DIR set before mem0 is imported
    from mem0.configs.base import MemoryConfig

    return frozenset(MemoryConfig.model_fields)


def _installed() -> str:
    import_mem0()  # a clear error when mem0ai is missing
    return installed_version()


@dataclass(frozen=True)
class Mem0ConfigFragment:
    """The mem0 config fragment format (the module docstring)."""

    format_id: str = FORMAT_ID

    def document(self, hooks: Mapping[str, str], source_run: str | None) -> dict[str, Any]:
        """The fragment holding `hooks` (mem0 config key -> text), stamped with the installed version."""
        return {
            "format": self.format_id, "mem0ai_version": _installed(), "note": NOTE, "source_run": source_run,
            "config": dict(hooks),
        }

    def write(self, exported: ExportedPrompts) -> Mapping[str, str]:
        """`mem0_config.yaml` and `mem0_config.json` with the hook texts `exported` holds ({} if none)."""
        hooks = {key: exported.prompts[stage] for stage, key in HOOK_BY_STAGE.items() if stage in exported.prompts}
        if not hooks:
            return {}
        document = self.document(hooks, exported.source_run)
        return {f"{FILE_STEM}.{fmt}": dump_document(document, fmt) for fmt in ("yaml", "json")}

    def read(self, document: Mapping[str, Any], source: str) -> PromptSet:
        """The hook stages of a parsed fragment; `PromptFileError` naming `source` and the key when a key
        is not a field of the installed mem0's `MemoryConfig` or not a hook."""
        try:
            parsed = _FragmentFile.model_validate(dict(document))
        except ValidationError as error:
            raise PromptFileError(f"prompt file {source}: {_describe(error)}") from None
        installed, known = _installed(), mem0_config_keys()
        made_for = f"the fragment was made for mem0ai {parsed.mem0ai_version}"
        for key in parsed.config:
            if key not in known:
                raise PromptFileError(
                    f"prompt file {source}: key config[{key!r}] is not a config key of the installed mem0ai "
                    f"{installed} ({made_for}; mem0 would silently ignore it)"
                )
            if key not in STAGE_BY_HOOK:
                raise PromptFileError(
                    f"prompt file {source}: key config[{key!r}] is a mem0 config key but not a prompt hook of "
                    f"memory_system=mem0ai (its hooks: {', '.join(STAGE_BY_HOOK)})"
                )
        if parsed.mem0ai_version != installed:
            logger.warning("prompt file %s: %s, mem0ai %s is installed; its keys exist, loading it",
                           source, made_for, installed)
        return PromptSet({STAGE_BY_HOOK[key]: text for key, text in parsed.config.items()})


MEM0_CONFIG_FRAGMENT = Mem0ConfigFragment()
