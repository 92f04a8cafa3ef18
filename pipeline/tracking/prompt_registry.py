"""Accepted prompt sets in MLflow's prompt registry: one registry prompt per stage, versioned.

What it does:

- `register_prompt_set` registers the stage instructions of a `PromptSet` in the registry prompts
  `memtrace-<experiment>-<system>-<stage>` (`memtrace-<system>-<stage>` without an experiment; see
  `registry_name`: the experiment keeps the prompts of experiments apart) and returns stage -> prompt
  URI (`prompts:/<name>/<version>`). A stage gets a new version only when no version of its prompt
  holds the same text and knobs: a rerun that accepts a text the prompt already had (the demo's first
  accepted set repeats the default text of a stage a later iteration changed) reuses that version
  rather than adding a duplicate, so a prompt has one version per distinct (text, knobs). Of several
  identical versions (made before this rule) the newest is reused.
  Each new version carries the tags `memtrace.system`, `memtrace.stage` (the unsanitized names),
  `memtrace.experiment` and `memtrace.knobs` (the set's knob values as canonical JSON, `{}` for none:
  knobs belong to the set, so every stage's version carries them) plus the caller's tags; with `run_id`
  the new versions are linked to that MLflow run, the run that made them (MLflow links through the
  current tracking store, so the registry must then be the current tracking URI); with `alias` (e.g.
  `tracker.CHAMPION`, the accepted set) the alias is moved to the version holding the set's text of
  every stage, reused or new: `@champion` is always the last accepted set, never a duplicate.
- `load_registered_prompt_set` loads one version (a number, "latest", or another alias) of the
  given stages back into a `PromptSet`; `load_registered_set` also gives the set's knobs (what
  `prompts=registry:<system>@<alias>` loads, `pipeline.tracking.prompt_sources`);
  `load_prompt_set_from_uris` loads the exact URIs that `register_prompt_set` returned.

MLflow facts this relies on (MLflow 3.17, checked on a SQLite store):

- Prompt names may contain only letters, digits, `_`, `-` and `.`; other characters are replaced
  by `_` here, and the tags above keep the real names (checked on load).
- A template is stored verbatim as a version tag (at most 100,000 characters). `{x}`, `{{y}}` and
  `{% ... %}` are only interpreted by `PromptVersion.format`, which this module never calls; it
  reads `PromptVersion.template`, so instructions with braces round-trip unchanged.
- Every `register_prompt` call creates a new version (1, 2, ...), even for an unchanged template (so
  this module compares with the existing versions first); the alias "latest" resolves to the highest
  version. Versions are per prompt: the stages of a set have different version numbers once one stage
  changed without the others (the alias, or the returned URIs, name the set).
- Loads read the store directly (`MlflowClient.get_prompt_version` / `get_prompt_version_by_alias`)
  rather than through `load_prompt`, whose process-wide cache can serve a stale "latest" for 60 s
  and which starts a background thread that writes an experiment tag on every load.

What it does not do: it does not decide which prompt set is accepted, does not write files (see
`pipeline.core.prompt_files`) and does not set the tracking URI (pass `registry_uri`, or the current MLflow
tracking URI is used, e.g. the one `MlflowTracker.open_experiment` set). Registering is not
atomic: every input is validated before the first call, but a store failure midway leaves the
stages registered so far in place.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, cast

import mlflow
from memtrace_loop.pipeline.core.records import PromptSet
from mlflow import MlflowClient
from mlflow.entities.model_registry import PromptVersion
from mlflow.exceptions import MlflowException

NAME_PREFIX = "memtrace"
SYSTEM_TAG = "memtrace.system"
STAGE_TAG = "memtrace.stage"
EXPERIMENT_TAG = "memtrace.experiment"
KNOBS_TAG = "memtrace.knobs"  # the set's knob values, canonical JSON ("{}": none)
RESERVED_TAGS = (SYSTEM_TAG, STAGE_TAG, EXPERIMENT_TAG, KNOBS_TAG)
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
    knobs: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """Register the stages of `prompts` (a new version for each stage whose text and knobs no version
    holds yet); returns stage -> URI of the version holding the stage's text.

    `tags` go on every new version (string keys and values; the `memtrace.*` keys are reserved);
    `run_id` links the new versions to that run; `alias` is set on the set's version of every stage;
    `knobs` (JSON values) are the set's knob values, kept on every stage's version.
    """
    if len(prompts) == 0:
        raise PromptRegistryError(f"prompt set for memory system {system_name!r} has no stages to register")
    extra = dict(tags or {})
    for key, value in extra.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise PromptRegistryError(f"tags must map strings to strings, got {key!r}: {value!r}")
        if key in RESERVED_TAGS:
            raise PromptRegistryError(f"tag {key!r} is reserved")
    if alias is not None and (not _ALIAS.match(alias) or alias == LATEST or alias.isdigit()):
        raise PromptRegistryError(f"alias must be letters, digits, '_' or '-' (not 'latest'), got {alias!r}")
    names = _names(system_name, prompts.stages(), experiment)
    knobs_json = knobs_tag(knobs or {})
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
        version = _version_with(client, name, prompts[stage], knobs_json)
        if version is None:
            mine = {SYSTEM_TAG: system_name, STAGE_TAG: stage, KNOBS_TAG: knobs_json,
                    **({EXPERIMENT_TAG: experiment} if experiment else {})}
            version = client.register_prompt(
                name=name, template=prompts[stage], commit_message=commit_message, tags={**extra, **mine}
            )
            if run_id is not None:
                client.link_prompt_version_to_run(run_id, version)
        if alias is not None:
            client.set_prompt_alias(name, alias, int(version.version))
        uris[stage] = version.uri
    return uris


def knobs_tag(knobs: Mapping[str, Any]) -> str:
    """The `memtrace.knobs` tag of a set's knobs: canonical JSON (sorted keys), `{}` for none."""
    try:
        return json.dumps(dict(knobs), sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError) as error:
        raise PromptRegistryError(f"knobs must be JSON values, got {dict(knobs)!r}: {error}") from None


def knobs_of(version: PromptVersion) -> dict[str, Any]:
    """The knobs a version carries (`{}` for a version registered before knobs were kept)."""
    text = version.tags.get(KNOBS_TAG, "{}")
    try:
        knobs = json.loads(text)
    except ValueError:
        knobs = None
    if not isinstance(knobs, dict):
        raise PromptRegistryError(
            f"registry prompt {version.uri}: tag {KNOBS_TAG!r} is not a JSON object of knobs: {text[:80]!r}"
        )
    return knobs


def _versions(client: MlflowClient, name: str) -> Iterator[PromptVersion]:
    """Every version of prompt `name`, page by page (none when the prompt does not exist)."""
    if client.get_prompt(name) is None:
        return
    token: str | None = None
    while True:
        page = client.search_prompt_versions(name, page_token=token)
        yield from page
        token = page.token
        if not token:
            return


def _version_with(client: MlflowClient, name: str, template: str, knobs_json: str) -> PromptVersion | None:
    """The newest version of prompt `name` holding `template` with the knobs `knobs_json` (None when no
    version does; versions from before knobs were kept count as `{}`)."""
    same = [
        v for v in _versions(client, name)
        if v.template == template and v.tags.get(KNOBS_TAG, "{}") == knobs_json  # the tag is canonical JSON
    ]
    return max(same, key=lambda v: int(v.version)) if same else None


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


def _load(client: MlflowClient, uri: str, system_name: str | None, stage: str | None) -> PromptVersion:
    """The version at `uri`, checked to be a text prompt of `stage` (any stage when None) of `system_name`
    (any system when None)."""
    of = f" (stage {stage!r})" if stage is not None else ""
    try:
        version = _fetch(client, uri)
    except MlflowException as error:
        raise PromptRegistryError(f"cannot load registry prompt {uri}{of}: {error.message}") from None
    if version is None:
        raise PromptRegistryError(f"cannot load registry prompt {uri}{of}: not found")
    if not version.is_text_prompt or not isinstance(version.template, str):
        raise PromptRegistryError(f"registry prompt {uri}{of} is a chat prompt, not an instruction")
    found_stage = version.tags.get(STAGE_TAG)
    found_system = version.tags.get(SYSTEM_TAG)
    if not found_stage or not found_system:
        raise PromptRegistryError(f"registry prompt {uri} was not registered by memtrace (no {STAGE_TAG!r} tag)")
    if (stage is not None and found_stage != stage) or (system_name is not None and found_system != system_name):
        raise PromptRegistryError(
            f"registry prompt {uri} holds stage {found_stage!r} of memory system {found_system!r}, "
            f"expected stage {stage or found_stage!r}" + (f" of {system_name!r}" if system_name is not None else "")
        )
    return version


def _text(version: PromptVersion) -> str:
    """The template of a version `_load` checked to be a text prompt."""
    return cast(str, version.template)


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
    return load_registered_set(system_name, stages, version, registry_uri=registry_uri, experiment=experiment).prompts


def load_prompt_set_from_uris(uris: Mapping[str, str], *, registry_uri: str | None = None) -> PromptSet:
    """The prompt set behind the stage -> URI mapping that `register_prompt_set` returned."""
    if not uris:
        raise PromptRegistryError("no prompt URIs to load")
    client = _client(registry_uri)
    return PromptSet({stage: _text(_load(client, uri, None, stage)) for stage, uri in uris.items()})


@dataclass(frozen=True)
class RegisteredSet:
    """A prompt set read back from the registry: the stages' texts, the set's knobs, and stage -> the
    exact URI (`prompts:/<name>/<n>`) each text came from."""

    system: str
    prompts: PromptSet
    knobs: Mapping[str, Any]
    uris: Mapping[str, str]


def load_registered_set(
    system_name: str,
    stages: Iterable[str],
    version: int | str = LATEST,
    *,
    registry_uri: str | None = None,
    experiment: str | None = None,
) -> RegisteredSet:
    """`load_registered_prompt_set` with the set's knobs (the `memtrace.knobs` tag every stage's version
    carries; refused when the stages' versions disagree, i.e. were not registered as one set)."""
    stages = tuple(stages)
    if not stages:
        raise PromptRegistryError("no stages to load")
    client = _client(registry_uri)
    names = _names(system_name, stages, experiment)
    versions = {stage: _load(client, prompt_uri(system_name, stage, version, experiment), system_name, stage)
                for stage in names}
    knobs = {stage: knobs_of(v) for stage, v in versions.items()}
    if len({knobs_tag(k) for k in knobs.values()}) > 1:
        shown = ", ".join(f"{stage} {knobs_tag(k)}" for stage, k in knobs.items())
        raise PromptRegistryError(
            f"the stages at {version!r} were not registered as one set: their knobs differ ({shown})"
        )
    return RegisteredSet(
        system_name, PromptSet({stage: _text(v) for stage, v in versions.items()}),
        MappingProxyType(next(iter(knobs.values()))), MappingProxyType({s: v.uri for s, v in versions.items()}),
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
    return RegisteredStage(version.tags[SYSTEM_TAG], version.tags[STAGE_TAG], _text(version))
