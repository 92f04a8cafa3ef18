"""Accepted prompt sets in MLflow's prompt registry: one registry prompt per stage, versioned.

- `register_prompt_set`: each stage's instruction into `memtrace-<experiment>-<system>-<stage>`
  (`registry_name`; characters MLflow rejects become `_`), a new version only when no version holds the
  same text and knobs (else the newest such is reused); a new version carries `memtrace.system`,
  `memtrace.stage`, `memtrace.experiment`, `memtrace.knobs` (canonical JSON; knobs belong to the set)
  and the caller's tags, is linked to `run_id` (the registry must then be the current tracking URI),
  and `alias` (e.g. `champion`) is moved onto the set's version of every stage. Returns stage -> URI.
- `load_registered_set` (with the set's knobs, refused when the stages' knobs disagree) /
  `load_registered_stage`: read back, checked to be memtrace's text prompts of the expected system and stage.

- `load_prompt_source(source, system, ...)`: the prompt set a `prompts=` value names, as `ExportedPrompts`
  (`pipeline.core.prompt_files.apply_prompts` puts it into the system): `registry:<system>@<alias>` (or
  `registry:<experiment>/<system>@<alias>`; the run's `tracking.experiment` by default) is every LLM stage
  of the run's system at that alias in the run's tracking store, with the set's knobs (`@champion`: the
  last set `memtrace optimize` accepted; a set has no version number of its own); `prompts:/<name>/<n>`
  or `prompts:/<name>@<alias>` is MLflow's URI of one stage (only it changes, the knobs stay as
  configured); anything else a file (`pipeline.core.prompt_formats.read_prompt_file`). Every problem is
  a `PromptFileError` (exit 2) of one line starting `prompts=<source>:`; a missing `sqlite:///` store is
  never created.

MLflow facts (3.17): templates are stored verbatim (braces round-trip: `format` is never called);
every `register_prompt` makes a new version, hence the comparison first; loads read the store directly
(`get_prompt_version[_by_alias]`), not `load_prompt` (a 60 s cache and a thread tagging experiments).
It decides no acceptance, writes no files and sets no tracking URI. Registering is not atomic: inputs
are validated first, but a store failure midway leaves the stages registered so far.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, cast

import mlflow
from memtrace_loop.pipeline.core.prompt_files import ExportedPrompts, PromptFileError
from memtrace_loop.pipeline.core.prompt_formats import PromptFormat, read_prompt_file
from memtrace_loop.pipeline.core.records import PromptSet
from memtrace_loop.pipeline.tracking.store_access import sqlite_path
from mlflow import MlflowClient
from mlflow.entities.model_registry import PromptVersion
from mlflow.exceptions import MlflowException
from mlflow.store.model_registry import SEARCH_MODEL_VERSION_MAX_RESULTS_THRESHOLD

SYSTEM_TAG = "memtrace.system"
STAGE_TAG = "memtrace.stage"
KNOBS_TAG = "memtrace.knobs"  # the set's knob values, canonical JSON ("{}": none)
MAX_TEMPLATE_CHARS = 100_000  # MLflow's limit on a model-registry tag value, where templates live
_ALIAS = re.compile(r"^[A-Za-z0-9_-]+$")
_URI = re.compile(r"^prompts:/([A-Za-z0-9_.-]+)(?:/([0-9]+)|@([A-Za-z0-9_-]+))$")


class PromptRegistryError(ValueError):
    """A prompt set that cannot be registered, or a registered prompt that cannot be loaded."""


def registry_name(system_name: str, stage: str, experiment: str | None = None) -> str:
    """`memtrace-<experiment>-<system>-<stage>` (or `memtrace-<system>-<stage>`), characters MLflow
    rejects replaced by `_` (dots are kept: `memtrace-locomo-mem0-answer.predict`)."""
    if not system_name or not stage or experiment == "":
        raise PromptRegistryError(
            f"experiment, system and stage names must be non-empty, got {experiment!r}, {system_name!r}, {stage!r}"
        )
    parts = ("memtrace", system_name, stage) if experiment is None else ("memtrace", experiment, system_name, stage)
    return re.sub(r"[^A-Za-z0-9_.-]", "_", "-".join(parts))


def _client(registry_uri: str | None) -> MlflowClient:
    return MlflowClient(tracking_uri=registry_uri, registry_uri=registry_uri) if registry_uri else MlflowClient()


def _names(system_name: str, stages: Iterable[str], experiment: str | None = None) -> dict[str, str]:
    """stage -> registry name; refuses two stages whose sanitized names coincide."""
    names: dict[str, str] = {}
    for stage in stages:
        name = registry_name(system_name, stage, experiment)
        clash = next((s for s, n in names.items() if n == name), None)
        if clash is not None:
            raise PromptRegistryError(f"stages {clash!r} and {stage!r} of memory system {system_name!r} both map "
                                      f"to the registry prompt name {name!r}")
        names[stage] = name
    return names


def knobs_tag(knobs: Mapping[str, Any]) -> str:
    """The `memtrace.knobs` tag of a set's knobs: canonical JSON (sorted keys), `{}` for none."""
    try:
        return json.dumps(dict(knobs), sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError) as error:
        raise PromptRegistryError(f"knobs must be JSON values, got {dict(knobs)!r}: {error}") from None


def register_prompt_set(
    system_name: str, prompts: PromptSet, commit_message: str | None = None, tags: Mapping[str, str] | None = None,
    *, run_id: str | None = None, registry_uri: str | None = None, experiment: str | None = None,
    alias: str | None = None, knobs: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """Register the stages of `prompts` (see the module docstring); returns stage -> URI of the version
    holding the stage's text. `tags` go on every new version (the `memtrace.*` ones win)."""
    if len(prompts) == 0:
        raise PromptRegistryError(f"prompt set for memory system {system_name!r} has no stages to register")
    if alias is not None and (not _ALIAS.match(alias) or alias == "latest" or alias.isdigit()):
        raise PromptRegistryError(f"alias must be letters, digits, '_' or '-' (not 'latest'), got {alias!r}")
    names = _names(system_name, prompts.stages(), experiment)
    knobs_json = knobs_tag(knobs or {})
    for stage in prompts:
        text = prompts[stage]
        if not isinstance(text, str) or not text.strip():
            raise PromptRegistryError(f"instruction of stage {stage!r} must be a non-empty string, got {text!r}")
        if len(text) > MAX_TEMPLATE_CHARS:
            raise PromptRegistryError(f"instruction of stage {stage!r} has {len(text)} characters; the registry "
                                      f"keeps at most {MAX_TEMPLATE_CHARS}")
    if run_id is not None and registry_uri is not None and registry_uri != mlflow.get_tracking_uri():
        # MLflow links a prompt version to a run through the *global* tracking store
        raise PromptRegistryError(
            f"linking prompts to run {run_id} needs the registry {registry_uri} to be the current MLflow "
            f"tracking URI ({mlflow.get_tracking_uri()}); set it or leave registry_uri unset"
        )
    client = _client(registry_uri)
    uris: dict[str, str] = {}
    for stage, name in names.items():
        found = client.search_prompt_versions(name, SEARCH_MODEL_VERSION_MAX_RESULTS_THRESHOLD) \
            if client.get_prompt(name) is not None else []  # every version, in one page
        same = [v for v in found if v.template == prompts[stage] and v.tags.get(KNOBS_TAG, "{}") == knobs_json]
        version = max(same, key=lambda v: int(v.version)) if same else None
        if version is None:
            mine = {SYSTEM_TAG: system_name, STAGE_TAG: stage, KNOBS_TAG: knobs_json,
                    **({"memtrace.experiment": experiment} if experiment else {})}
            version = client.register_prompt(
                name=name, template=prompts[stage], commit_message=commit_message, tags={**(tags or {}), **mine}
            )
            if run_id is not None:
                client.link_prompt_version_to_run(run_id, version)
        if alias is not None:
            client.set_prompt_alias(name, alias, int(version.version))
        uris[stage] = version.uri
    return uris


def _load(client: MlflowClient, uri: str, system_name: str | None, stage: str | None) -> PromptVersion:
    """The version at `uri` (read straight from the store), checked to be a text prompt of `stage` of
    `system_name` (either: any when None)."""
    of = f" (stage {stage!r})" if stage is not None else ""
    match = _URI.match(uri)
    if match is None:
        raise PromptRegistryError(
            f"not a prompt URI: {uri!r} (expected prompts:/<name>/<version> or prompts:/<name>@<alias>)"
        )
    name, number, alias = match.groups()
    try:
        version = client.get_prompt_version(name, number) if number else client.get_prompt_version_by_alias(name, alias)
    except MlflowException as error:
        raise PromptRegistryError(f"cannot load registry prompt {uri}{of}: {error.message}") from None
    if version is None:
        raise PromptRegistryError(f"cannot load registry prompt {uri}{of}: not found")
    if not version.is_text_prompt or not isinstance(version.template, str):
        raise PromptRegistryError(f"registry prompt {uri}{of} is a chat prompt, not an instruction")
    found_stage, found_system = version.tags.get(STAGE_TAG), version.tags.get(SYSTEM_TAG)
    if not found_stage or not found_system:
        raise PromptRegistryError(f"registry prompt {uri} was not registered by memtrace (no {STAGE_TAG!r} tag)")
    if (stage is not None and found_stage != stage) or (system_name is not None and found_system != system_name):
        raise PromptRegistryError(
            f"registry prompt {uri} holds stage {found_stage!r} of memory system {found_system!r}, "
            f"expected stage {stage or found_stage!r}" + (f" of {system_name!r}" if system_name is not None else "")
        )
    return version


def prompt_uri(system_name: str, stage: str, version: int | str = "latest", experiment: str | None = None) -> str:
    """`prompts:/<name>/<n>` for a version number, `prompts:/<name>@<alias>` for an alias."""
    name = registry_name(system_name, stage, experiment)
    text = str(version)
    if text.isdigit() and int(text) >= 1 and not isinstance(version, bool):
        return f"prompts:/{name}/{int(text)}"
    if isinstance(version, str) and _ALIAS.match(version) and not version.isdigit():
        return f"prompts:/{name}@{version}"
    raise PromptRegistryError(f"version must be a positive number or an alias such as 'latest', got {version!r}")


@dataclass(frozen=True)
class RegisteredSet:
    """A prompt set read back from the registry: the stages' texts, the set's knobs, and stage -> the
    exact URI (`prompts:/<name>/<n>`) each text came from."""

    system: str
    prompts: PromptSet
    knobs: Mapping[str, Any]
    uris: Mapping[str, str]


def load_registered_set(
    system_name: str, stages: Iterable[str], version: int | str = "latest", *, registry_uri: str | None = None,
    experiment: str | None = None,
) -> RegisteredSet:
    """The instructions of `stages` at `version` (a number: each stage's own version number; "latest" or
    another alias such as `tracker.CHAMPION`), verbatim, with the set's knobs (the `memtrace.knobs` tag;
    refused when the stages' versions disagree, i.e. were not registered as one set)."""
    stages = tuple(stages)
    if not stages:
        raise PromptRegistryError("no stages to load")
    client = _client(registry_uri)
    versions = {stage: _load(client, prompt_uri(system_name, stage, version, experiment), system_name, stage)
                for stage in _names(system_name, stages, experiment)}
    knobs = {stage: v.tags.get(KNOBS_TAG, "{}") for stage, v in versions.items()}
    if len(set(knobs.values())) > 1:
        shown = ", ".join(f"{stage} {k}" for stage, k in knobs.items())
        raise PromptRegistryError(
            f"the stages at {version!r} were not registered as one set: their knobs differ ({shown})"
        )
    try:
        knob_values = json.loads(next(iter(knobs.values())))
    except ValueError:
        knob_values = None
    if not isinstance(knob_values, dict):
        raise PromptRegistryError(f"registry prompt {next(iter(versions.values())).uri}: tag {KNOBS_TAG!r} is not "
                                  f"a JSON object of knobs")
    return RegisteredSet(
        system_name, PromptSet({stage: cast(str, v.template) for stage, v in versions.items()}),
        MappingProxyType(knob_values), MappingProxyType({s: v.uri for s, v in versions.items()}),
    )


@dataclass(frozen=True)
class RegisteredStage:
    """One stage's text read back from a `prompts:/` URI, with the system and stage its tags name."""

    system: str
    stage: str
    text: str


def load_registered_stage(uri: str, *, registry_uri: str | None = None) -> RegisteredStage:
    """The stage instruction at `uri` (`prompts:/<name>/<n>` or `prompts:/<name>@<alias>`)."""
    version = _load(_client(registry_uri), uri, None, None)
    return RegisteredStage(version.tags[SYSTEM_TAG], version.tags[STAGE_TAG], cast(str, version.template))


@dataclass(frozen=True)
class RegistryAccess:
    """Where registered prompts are read: the run's tracking store and experiment."""

    tracking_uri: str
    experiment: str


def load_prompt_source(
    source: str, system_name: str, stages: Sequence[str], base_dir: Path,
    formats: Sequence[PromptFormat] = (), registry: RegistryAccess | None = None,
) -> ExportedPrompts:
    """The prompt set `prompts=<source>` names for memory system `system_name` with LLM stages `stages`
    (the module docstring); a relative file path resolves against `base_dir`."""
    if not source.startswith(("registry:", "prompts:/")):
        path = Path(source)
        return read_prompt_file(path if path.is_absolute() else base_dir / path, system_name, formats)
    if registry is None:
        raise PromptFileError(f"prompts={source}: this command has no tracking store to read the registry from")
    store = sqlite_path(registry.tracking_uri)
    if store is not None and not store.is_file():
        raise PromptFileError(f"prompts={source}: no tracking store at {registry.tracking_uri} (tracking.uri): "
                              "nothing is registered there")
    try:
        if source.startswith("prompts:/"):
            return _one_stage(source, system_name, registry)
        return _whole_set(source, system_name, stages, registry)
    except PromptRegistryError as error:
        raise PromptFileError(f"prompts={source}: {error}") from None


def _whole_set(source: str, system_name: str, stages: Sequence[str], registry: RegistryAccess) -> ExportedPrompts:
    match = re.match(r"^registry:(?:([^/@]+)/)?([^/@]+)@([A-Za-z0-9_-]+)$", source)
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
