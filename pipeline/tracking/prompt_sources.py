"""What `prompts=` names: an exported prompt file, a whole registered prompt set, or one registered stage.

`load_prompt_source(source, system, ...)` reads the prompt set a `prompts=` value names, as the
`ExportedPrompts` that `pipeline.core.prompt_files.apply_prompts` puts into the system:

- `registry:<system>@<alias>` (or `registry:<experiment>/<system>@<alias>`): every LLM stage of the run's
  memory system at that alias in the prompt registry of the run's tracking store (`tracking.uri`), in
  the run's experiment (`tracking.experiment`) unless one is named; with the set's knobs (every
  version carries them, `pipeline.tracking.prompt_registry`). `@champion` is the last accepted set of
  `memtrace optimize`. A set has no version number of its own (each stage's prompt counts its own
  versions): name one stage's version with MLflow's URI below.
- `prompts:/<name>/<version>` or `prompts:/<name>@<alias>`: MLflow's own URI of one registered stage
  prompt (`memtrace-<experiment>-<system>-<stage>`); only that stage changes, the knobs stay as
  configured.
- anything else: a file (`pipeline.core.prompt_formats.read_prompt_file`: our layout or a declared format).

Every problem (malformed URI, another system's set, no store, no such prompt, alias or version) is a
`PromptFileError` (exit 2) of one line that starts with `prompts=<source>:`. A store that does not exist
is never created: a `sqlite:///` file must be there. It does not apply the set (`apply_prompts`) and does
not register anything (`prompt_registry.register_prompt_set`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from memtrace_loop.pipeline.core.prompt_files import ExportedPrompts, PromptFileError
from memtrace_loop.pipeline.core.prompt_formats import PromptFormat, read_prompt_file
from memtrace_loop.pipeline.core.records import PromptSet
from memtrace_loop.pipeline.tracking.prompt_registry import (
    PromptRegistryError,
    load_registered_set,
    load_registered_stage,
)
from memtrace_loop.pipeline.tracking.store_access import sqlite_path

REGISTRY_SCHEME = "registry:"
PROMPT_SCHEME = "prompts:/"
_SET = re.compile(r"^registry:(?:([^/@]+)/)?([^/@]+)@([A-Za-z0-9_-]+)$")

__all__ = ["PROMPT_SCHEME", "REGISTRY_SCHEME", "RegistryAccess", "is_registry_source", "load_prompt_source"]


@dataclass(frozen=True)
class RegistryAccess:
    """Where registered prompts are read: the run's tracking store and experiment."""

    tracking_uri: str
    experiment: str


def is_registry_source(source: str) -> bool:
    """Whether a `prompts=` value names registered prompts rather than a file."""
    return source.startswith((REGISTRY_SCHEME, PROMPT_SCHEME))


def load_prompt_source(
    source: str, system_name: str, stages: Sequence[str], base_dir: Path,
    formats: Sequence[PromptFormat] = (), registry: RegistryAccess | None = None,
) -> ExportedPrompts:
    """The prompt set `prompts=<source>` names for memory system `system_name` with LLM stages `stages`
    (the module docstring); a relative file path resolves against `base_dir`."""
    if not is_registry_source(source):
        path = Path(source)
        return read_prompt_file(path if path.is_absolute() else base_dir / path, system_name, formats)
    if registry is None:
        raise PromptFileError(f"prompts={source}: this command has no tracking store to read the registry from")
    _check_store(source, registry.tracking_uri)
    try:
        if source.startswith(PROMPT_SCHEME):
            return _one_stage(source, system_name, registry)
        return _whole_set(source, system_name, stages, registry)
    except PromptRegistryError as error:
        raise PromptFileError(f"prompts={source}: {error}") from None


def _check_store(source: str, tracking_uri: str) -> None:
    path = sqlite_path(tracking_uri)
    if path is not None and not path.is_file():
        raise PromptFileError(
            f"prompts={source}: no tracking store at {tracking_uri} (tracking.uri): nothing is registered there"
        )


def _whole_set(source: str, system_name: str, stages: Sequence[str], registry: RegistryAccess) -> ExportedPrompts:
    match = _SET.match(source)
    if match is None and re.search(r"/[0-9]+$", source):
        raise PromptFileError(
            f"prompts={source}: a registered set has no version number (each stage's prompt numbers its own "
            f"versions): name an alias (registry:{system_name}@champion) or one stage's prompts:/<name>/<version>"
        )
    if match is None:
        raise PromptFileError(
            f"prompts={source}: expected registry:<system>@<alias> or registry:<experiment>/<system>@<alias> "
            f"(e.g. registry:{system_name}@champion)"
        )
    experiment, named_system, alias = match.groups()
    if named_system != system_name:
        raise PromptFileError(f"prompts={source}: names memory system {named_system!r}, this run uses {system_name!r}")
    found = load_registered_set(
        system_name, stages, alias, registry_uri=registry.tracking_uri, experiment=experiment or registry.experiment
    )
    exported = ExportedPrompts.create(system_name, found.prompts, knobs=dict(found.knobs))
    return dataclasses.replace(exported, origin=source)


def _one_stage(source: str, system_name: str, registry: RegistryAccess) -> ExportedPrompts:
    stage = load_registered_stage(source, registry_uri=registry.tracking_uri)
    if stage.system != system_name:
        raise PromptFileError(
            f"prompts={source}: holds stage {stage.stage!r} of memory system {stage.system!r}, "
            f"this run uses {system_name!r}"
        )
    exported = ExportedPrompts.create(system_name, PromptSet({stage.stage: stage.text}))
    return dataclasses.replace(exported, origin=source)
