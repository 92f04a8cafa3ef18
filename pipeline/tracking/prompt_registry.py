"""Accepted prompt sets in MLflow's prompt registry: one registry prompt per stage, versioned.

What it does:

- `register_prompt_set` registers every stage instruction of a `PromptSet` as a new version of the
  registry prompt `memtrace-<system>-<stage>` (see `registry_name`) and returns stage -> prompt URI
  (`prompts:/<name>/<version>`). Each version carries the tags `memtrace.system` and
  `memtrace.stage` (the unsanitized names) plus the caller's tags; with `run_id` the versions are
  also linked to that MLflow run (MLflow links through the current tracking store, so the registry
  must then be the current tracking URI).
- `load_registered_prompt_set` loads one version (a number, "latest", or another alias) of the
  given stages back into a `PromptSet`; `load_prompt_set_from_uris` loads the exact URIs that
  `register_prompt_set` returned.

MLflow facts this relies on (MLflow 3.17, checked on a SQLite store):

- Prompt names may contain only letters, digits, `_`, `-` and `.`; other characters are replaced
  by `_` here, and the tags above keep the real names (checked on load).
- A template is stored verbatim as a version tag (at most 100,000 characters). `{x}`, `{{y}}` and
  `{% ... %}` are only interpreted by `PromptVersion.format`, which this module never calls; it
  reads `PromptVersion.template`, so instructions with braces round-trip unchanged.
- Every registration creates a new version (1, 2, ...), even for an unchanged template; the alias
  "latest" resolves to the highest version. Versions are per prompt, so the stages of a set share a
  version number only when they were always registered together (as `register_prompt_set` does).
- Loads read the store directly (`MlflowClient.get_prompt_version` / `get_prompt_version_by_alias`)
  rather than through `load_prompt`, whose process-wide cache can serve a stale "latest" for 60 s
  and which starts a background thread that writes an experiment tag on every load.

What it does not do: it does not decide which prompt set is accepted, does not write files (see
`pipeline.tracking.export`) and does not set the tracking URI (pass `registry_uri`, or the current MLflow
tracking URI is used, e.g. the one `MlflowTracker.open_experiment` set). Registering is not
atomic: every input is validated before the first call, but a store failure midway leaves the
stages registered so far in place.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

import mlflow
from memtrace_loop.pipeline.core.records import PromptSet
from mlflow import MlflowClient
from mlflow.entities.model_registry import PromptVersion
from mlflow.exceptions import MlflowException

NAME_PREFIX = "memtrace"
SYSTEM_TAG = "memtrace.system"
STAGE_TAG = "memtrace.stage"
LATEST = "latest"
MAX_TEMPLATE_CHARS = 100_000  # MLflow's limit on a model-registry tag value, where templates live
_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_.-]")
_ALIAS = re.compile(r"^[A-Za-z0-9_-]+$")
_URI = re.compile(r"^prompts:/([A-Za-z0-9_.-]+)(?:/([0-9]+)|@([A-Za-z0-9_-]+))$")


class PromptRegistryError(ValueError):
    """A prompt set that cannot be registered, or a registered prompt that cannot be loaded."""


def registry_name(system_name: str, stage: str) -> str:
    """The registry prompt name of one stage: `memtrace-<system>-<stage>`, characters MLflow
    rejects replaced by `_` (dots are allowed and kept: `memtrace-mem0-answer.predict`)."""
    if not system_name or not stage:
        raise PromptRegistryError(f"system and stage names must be non-empty, got {system_name!r}, {stage!r}")
    return _NOT_ALLOWED.sub("_", f"{NAME_PREFIX}-{system_name}-{stage}")


def _client(registry_uri: str | None) -> MlflowClient:
    if registry_uri is None:
        return MlflowClient()
    return MlflowClient(tracking_uri=registry_uri, registry_uri=registry_uri)


def _names(system_name: str, stages: Iterable[str]) -> dict[str, str]:
    """stage -> registry name; refuses two stages whose sanitized names coincide."""
    names: dict[str, str] = {}
    owner: dict[str, str] = {}
    for stage in stages:
        name = registry_name(system_name, stage)
        if name in owner:
            raise PromptRegistryError(
                f"stages {owner[name]!r} and {stage!r} of memory system {system_name!r} both map to the "
                f"registry prompt name {name!r}"
            )
        owner[name] = stage
        names[stage] = name
    return names


def register_prompt_set(
    system_name: str,
    prompts: PromptSet,
    commit_message: str | None = None,
    tags: Mapping[str, str] | None = None,
    *,
    run_id: str | None = None,
    registry_uri: str | None = None,
) -> dict[str, str]:
    """Register every stage of `prompts` as a new registry prompt version; returns stage -> URI.

    `tags` go on every version (string keys and values; the `memtrace.*` keys are reserved).
    """
    if len(prompts) == 0:
        raise PromptRegistryError(f"prompt set for memory system {system_name!r} has no stages to register")
    extra = dict(tags or {})
    for key, value in extra.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise PromptRegistryError(f"tags must map strings to strings, got {key!r}: {value!r}")
        if key in (SYSTEM_TAG, STAGE_TAG):
            raise PromptRegistryError(f"tag {key!r} is reserved")
    names = _names(system_name, prompts.stages())
    for stage in prompts:
        text = prompts[stage]
        if not isinstance(text, str) or not text.strip():
            raise PromptRegistryError(f"instruction of stage {stage!r} must be a non-empty string, got {text!r}")
        if len(text) > MAX_TEMPLATE_CHARS:
            raise PromptRegistryError(
                f"instruction of stage {stage!r} has {len(text)} characters; the registry keeps at most "
                f"{MAX_TEMPLATE_CHARS}"
            )
    if run_id is not None and registry_uri is not None and registry_uri != mlflow.get_tracking_uri():
        # MLflow links a prompt version to a run through the *global* tracking store
        raise PromptRegistryError(
            f"linking prompts to run {run_id} needs the registry {registry_uri} to be the current MLflow "
            f"tracking URI ({mlflow.get_tracking_uri()}); set it or leave registry_uri unset"
        )
    client = _client(registry_uri)
    uris: dict[str, str] = {}
    for stage, name in names.items():
        version = client.register_prompt(
            name=name,
            template=prompts[stage],
            commit_message=commit_message,
            tags={**extra, SYSTEM_TAG: system_name, STAGE_TAG: stage},
        )
        if run_id is not None:
            client.link_prompt_version_to_run(run_id, version)
        uris[stage] = version.uri
    return uris


def _fetch(client: MlflowClient, uri: str) -> PromptVersion | None:
    """One prompt version by URI, read straight from the store: unlike `load_prompt` this neither
    caches nor starts MLflow's background thread that tags the prompt with the active experiment."""
    match = _URI.match(uri)
    if match is None:
        raise PromptRegistryError(
            f"not a prompt URI: {uri!r} (expected prompts:/<name>/<version> or prompts:/<name>@<alias>)"
        )
    name, number, alias = match.groups()
    if number is not None:
        return client.get_prompt_version(name, number)
    return client.get_prompt_version_by_alias(name, alias)


def _load(client: MlflowClient, uri: str, system_name: str | None, stage: str) -> str:
    try:
        version = _fetch(client, uri)
    except MlflowException as error:
        raise PromptRegistryError(f"cannot load registry prompt {uri} (stage {stage!r}): {error.message}") from None
    if version is None:
        raise PromptRegistryError(f"cannot load registry prompt {uri} (stage {stage!r}): not found")
    if not version.is_text_prompt or not isinstance(version.template, str):
        raise PromptRegistryError(f"registry prompt {uri} (stage {stage!r}) is a chat prompt, not an instruction")
    found_stage = version.tags.get(STAGE_TAG)
    found_system = version.tags.get(SYSTEM_TAG)
    if found_stage != stage or (system_name is not None and found_system != system_name):
        raise PromptRegistryError(
            f"registry prompt {uri} holds stage {found_stage!r} of memory system {found_system!r}, "
            f"expected stage {stage!r}" + (f" of {system_name!r}" if system_name is not None else "")
        )
    return version.template


def prompt_uri(system_name: str, stage: str, version: int | str = LATEST) -> str:
    """`prompts:/<name>/<n>` for a version number, `prompts:/<name>@<alias>` for an alias."""
    name = registry_name(system_name, stage)
    if isinstance(version, int) and not isinstance(version, bool):
        if version < 1:
            raise PromptRegistryError(f"prompt versions start at 1, got {version}")
        return f"prompts:/{name}/{version}"
    if isinstance(version, str) and version.isdigit():
        return prompt_uri(system_name, stage, int(version))
    if isinstance(version, str) and _ALIAS.match(version):
        return f"prompts:/{name}@{version}"
    raise PromptRegistryError(f"version must be a positive number or an alias such as 'latest', got {version!r}")


def load_registered_prompt_set(
    system_name: str,
    stages: Iterable[str],
    version: int | str = LATEST,
    *,
    registry_uri: str | None = None,
) -> PromptSet:
    """The instructions of `stages` at `version` (a number, "latest" or another alias), verbatim."""
    stages = tuple(stages)
    if not stages:
        raise PromptRegistryError("no stages to load")
    client = _client(registry_uri)
    uris = {stage: prompt_uri(system_name, stage, version) for stage in _names(system_name, stages)}
    return PromptSet({stage: _load(client, uri, system_name, stage) for stage, uri in uris.items()})


def load_prompt_set_from_uris(uris: Mapping[str, str], *, registry_uri: str | None = None) -> PromptSet:
    """The prompt set behind the stage -> URI mapping that `register_prompt_set` returned."""
    if not uris:
        raise PromptRegistryError("no prompt URIs to load")
    client = _client(registry_uri)
    return PromptSet({stage: _load(client, uri, None, stage) for stage, uri in uris.items()})
