"""Accepted prompt sets in MLflow's prompt registry: one registry prompt per stage, versioned.

What it does:

- `register_prompt_set` registers the stage instructions of a `PromptSet` in the registry prompts
  `memtrace-<experiment>-<system>-<stage>` (`memtrace-<system>-<stage>` without an experiment; see
  `registry_name`: the experiment keeps the prompts of experiments apart) and returns stage -> prompt
  URI (`prompts:/<name>/<version>`). A stage gets a new version only when its text differs from the
  prompt's latest version (else the latest version is reused: one version per change, not per call).
  Each new version carries the tags `memtrace.system`, `memtrace.stage` (the unsanitized names) and
  `memtrace.experiment` plus the caller's tags; with `run_id` the new versions are linked to that
  MLflow run, the run that made them (MLflow links through the current tracking store, so the
  registry must then be the current tracking URI); with `alias` (e.g. `tracker.CHAMPION`, the accepted set)
  the alias is moved to the set's version of every stage.
- `load_registered_prompt_set` loads one version (a number, "latest", or another alias) of the
  given stages back into a `PromptSet`; `load_prompt_set_from_uris` loads the exact URIs that
  `register_prompt_set` returned.

MLflow facts this relies on (MLflow 3.17, checked on a SQLite store):

- Prompt names may contain only letters, digits, `_`, `-` and `.`; other characters are replaced
  by `_` here, and the tags above keep the real names (checked on load).
- A template is stored verbatim as a version tag (at most 100,000 characters). `{x}`, `{{y}}` and
  `{% ... %}` are only interpreted by `PromptVersion.format`, which this module never calls; it
  reads `PromptVersion.template`, so instructions with braces round-trip unchanged.
- Every `register_prompt` call creates a new version (1, 2, ...), even for an unchanged template (so
  this module compares with the latest template first); the alias "latest" resolves to the highest
  version. Versions are per prompt: the stages of a set have different version numbers once one stage
  changed without the others (the alias, or the returned URIs, name the set).
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
EXPERIMENT_TAG = "memtrace.experiment"
LATEST = "latest"
MAX_TEMPLATE_CHARS = 100_000  # MLflow's limit on a model-registry tag value, where templates live
_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_.-]")
_ALIAS = re.compile(r"^[A-Za-z0-9_-]+$")
_URI = re.compile(r"^prompts:/([A-Za-z0-9_.-]+)(?:/([0-9]+)|@([A-Za-z0-9_-]+))$")


class PromptRegistryError(ValueError):
    """A prompt set that cannot be registered, or a registered prompt that cannot be loaded."""


def registry_name(system_name: str, stage: str, experiment: str | None = None) -> str:
    """The registry prompt name of one stage: `memtrace-<experiment>-<system>-<stage>` (or
    `memtrace-<system>-<stage>` without an experiment), characters MLflow rejects replaced by `_` (dots
    are allowed and kept: `memtrace-locomo-mem0-answer.predict`)."""
    if not system_name or not stage or experiment == "":
        raise PromptRegistryError(
            f"experiment, system and stage names must be non-empty, got {experiment!r}, {system_name!r}, {stage!r}"
        )
    parts = (NAME_PREFIX, system_name, stage) if experiment is None else (NAME_PREFIX, experiment, system_name, stage)
    return _NOT_ALLOWED.sub("_", "-".join(parts))


def _client(registry_uri: str | None) -> MlflowClient:
    if registry_uri is None:
        return MlflowClient()
    return MlflowClient(tracking_uri=registry_uri, registry_uri=registry_uri)


def _names(system_name: str, stages: Iterable[str], experiment: str | None = None) -> dict[str, str]:
    """stage -> registry name; refuses two stages whose sanitized names coincide."""
    names: dict[str, str] = {}
    owner: dict[str, str] = {}
    for stage in stages:
        name = registry_name(system_name, stage, experiment)
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
    experiment: str | None = None,
    alias: str | None = None,
) -> dict[str, str]:
    """Register the stages of `prompts` (a new version for each stage whose text changed); returns
    stage -> URI of the version holding the stage's text.

    `tags` go on every new version (string keys and values; the `memtrace.*` keys are reserved);
    `run_id` links the new versions to that run; `alias` is set on the set's version of every stage.
    """
    if len(prompts) == 0:
        raise PromptRegistryError(f"prompt set for memory system {system_name!r} has no stages to register")
    extra = dict(tags or {})
    for key, value in extra.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise PromptRegistryError(f"tags must map strings to strings, got {key!r}: {value!r}")
        if key in (SYSTEM_TAG, STAGE_TAG, EXPERIMENT_TAG):
            raise PromptRegistryError(f"tag {key!r} is reserved")
    if alias is not None and (not _ALIAS.match(alias) or alias == LATEST or alias.isdigit()):
        raise PromptRegistryError(f"alias must be letters, digits, '_' or '-' (not 'latest'), got {alias!r}")
    names = _names(system_name, prompts.stages(), experiment)
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
        version = _latest_with(client, name, prompts[stage])
        if version is None:
            mine = {SYSTEM_TAG: system_name, STAGE_TAG: stage, **({EXPERIMENT_TAG: experiment} if experiment else {})}
            version = client.register_prompt(
                name=name, template=prompts[stage], commit_message=commit_message, tags={**extra, **mine}
            )
            if run_id is not None:
                client.link_prompt_version_to_run(run_id, version)
        if alias is not None:
            client.set_prompt_alias(name, alias, int(version.version))
        uris[stage] = version.uri
    return uris


def _latest_with(client: MlflowClient, name: str, template: str) -> PromptVersion | None:
    """The latest version of prompt `name` when its template is `template` (None when the prompt does
    not exist yet or its latest text differs)."""
    if client.get_prompt(name) is None:
        return None
    try:
        latest = client.get_prompt_version_by_alias(name, LATEST)
    except MlflowException:
        return None
    return latest if latest is not None and latest.template == template else None


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


def prompt_uri(system_name: str, stage: str, version: int | str = LATEST, experiment: str | None = None) -> str:
    """`prompts:/<name>/<n>` for a version number, `prompts:/<name>@<alias>` for an alias."""
    name = registry_name(system_name, stage, experiment)
    if isinstance(version, int) and not isinstance(version, bool):
        if version < 1:
            raise PromptRegistryError(f"prompt versions start at 1, got {version}")
        return f"prompts:/{name}/{version}"
    if isinstance(version, str) and version.isdigit():
        return prompt_uri(system_name, stage, int(version), experiment)
    if isinstance(version, str) and _ALIAS.match(version):
        return f"prompts:/{name}@{version}"
    raise PromptRegistryError(f"version must be a positive number or an alias such as 'latest', got {version!r}")


def load_registered_prompt_set(
    system_name: str,
    stages: Iterable[str],
    version: int | str = LATEST,
    *,
    registry_uri: str | None = None,
    experiment: str | None = None,
) -> PromptSet:
    """The instructions of `stages` at `version` (a number, "latest" or another alias such as
    `tracker.CHAMPION`), verbatim. A number is each stage's own version number (stages changed apart have
    different ones): load a whole set by an alias or by the URIs `register_prompt_set` returned."""
    stages = tuple(stages)
    if not stages:
        raise PromptRegistryError("no stages to load")
    client = _client(registry_uri)
    uris = {
        stage: prompt_uri(system_name, stage, version, experiment) for stage in _names(system_name, stages, experiment)
    }
    return PromptSet({stage: _load(client, uri, system_name, stage) for stage, uri in uris.items()})


def load_prompt_set_from_uris(uris: Mapping[str, str], *, registry_uri: str | None = None) -> PromptSet:
    """The prompt set behind the stage -> URI mapping that `register_prompt_set` returned."""
    if not uris:
        raise PromptRegistryError("no prompt URIs to load")
    client = _client(registry_uri)
    return PromptSet({stage: _load(client, uri, None, stage) for stage, uri in uris.items()})
