"""Prompt files: the plain JSON/YAML file of an exported prompt set (and knobs), written and read back.

- `ExportedPrompts`: one exported prompt set (system, stage -> instruction `PromptSet`, source MLflow run,
  metrics, creation time, the accepted knob changes); constructing one applies `read_prompts`' rules, so
  whatever can be written can be read back.
- `write_prompts`: JSON (`.json`) or YAML (`.yaml`/`.yml`), UTF-8, keys in `FIELD_ORDER` (metrics, stages
  and knobs sorted; `knobs` only when non-empty): the same record gives identical bytes.
- `read_prompts` = `load_document` (the file parsed, any layout; duplicate keys refused) then
  `prompts_from_document` (our layout, validated by pydantic): every problem is a `PromptFileError` naming
  the file and the field (`pipeline.core.prompt_formats` reads other layouts with the first half).
- `apply_prompts`: a copy of a memory system (`PromptTarget`) with a set's instructions and knobs; a file
  for another system, or naming stages or knobs it lacks, is a `PromptFileError`.

It does not talk to MLflow (`pipeline.tracking.prompt_registry`) nor choose which prompt set to export.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Protocol, TypeVar

import yaml
from memtrace_loop.pipeline.core.records import PromptSet
from pydantic import AfterValidator, AllowInfNan, BaseModel, BeforeValidator, ConfigDict, ValidationError

FORMAT_VERSION = 1
FORMAT_BY_SUFFIX = {".json": "json", ".yaml": "yaml", ".yml": "yaml"}
FIELD_ORDER = ("format_version", "system", "created", "source_run", "metrics", "prompts", "knobs")
KnobValue = bool | int | float | str


class PromptFileError(ValueError):
    """A prompt file that cannot be read, or that does not fit the memory system it is applied to."""


SystemT = TypeVar("SystemT", bound="PromptTarget")


class PromptTarget(Protocol):
    """What `apply_prompts` needs of a memory system (`memory_systems.base.MemorySystem`): its copies
    with other knobs or prompts raise a `ValueError` (`KnobError`, `PromptSetError`) when they do not fit."""

    @property
    def name(self) -> str: ...

    def stage_names(self) -> tuple[str, ...]: ...

    def with_knobs(self: SystemT, changes: Mapping[str, Any]) -> SystemT: ...

    def with_prompts(self: SystemT, prompts: PromptSet) -> SystemT: ...


# --------------------------------------------------------------------------- the file schema


def _non_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must be a non-empty string")
    return value


def _iso_time(value: Any) -> Any:
    """YAML turns unquoted timestamps into datetimes; accept them as their ISO text."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    return value


def _valid_iso_time(value: str) -> str:
    try:
        datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"must be an ISO-8601 date-time, got {value!r}") from None
    return value


def _supported_version(value: int) -> int:
    if value != FORMAT_VERSION:
        raise ValueError(f"unsupported format version {value} (this version of memtrace reads {FORMAT_VERSION})")
    return value


def _some_stages(value: dict[str, str]) -> dict[str, str]:
    if not value:
        raise ValueError("must name at least one stage")
    return value


NonBlank = Annotated[str, AfterValidator(_non_blank)]


class _PromptFile(BaseModel):
    """The on-disk layout. Strict: no coercion, no extra keys, every key present."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    format_version: Annotated[int, AfterValidator(_supported_version)]
    system: NonBlank
    created: Annotated[str, BeforeValidator(_iso_time), AfterValidator(_valid_iso_time)]
    source_run: NonBlank | None
    metrics: dict[NonBlank, Annotated[float, AllowInfNan(False)]]
    prompts: Annotated[dict[NonBlank, NonBlank], AfterValidator(_some_stages)]
    knobs: dict[NonBlank, KnobValue] = {}  # optional: accepted knob changes (files without it load as before)


def _field_name(loc: tuple[int | str, ...]) -> str:
    """`('prompts', 'answer.predict')` -> `prompts['answer.predict']` (stage names contain dots)."""
    if not loc:
        return "<top level>"
    head, *rest = loc
    return str(head) + "".join(f"[{part!r}]" for part in rest if part != "[key]")


def _describe(error: ValidationError) -> str:
    parts = []
    for item in error.errors(include_url=False):
        message = str(item["msg"]).removeprefix("Value error, ")
        if item["type"] == "missing":
            message = "required key is missing"
        elif item["type"] == "extra_forbidden":
            message = "unknown key (allowed: " + ", ".join(FIELD_ORDER) + ")"
        elif item["loc"] and item["loc"][-1] == "[key]":
            message = f"key {message}"
        parts.append(f"field {_field_name(tuple(item['loc']))}: {message}")
    return "; ".join(parts)


# --------------------------------------------------------------------------- the record


@dataclass(frozen=True)
class ExportedPrompts:
    """One exported prompt set. `origin` (the file it was read from, if any) is not part of the
    content: it only names the file in error messages and is ignored by `==`."""

    system: str
    prompts: PromptSet
    source_run: str | None
    metrics: Mapping[str, float]
    created: str
    format_version: int = FORMAT_VERSION
    origin: str | None = field(default=None, compare=False)
    knobs: Mapping[str, KnobValue] = field(default_factory=lambda: MappingProxyType({}))  # knob -> value

    def __post_init__(self) -> None:
        if not isinstance(self.prompts, PromptSet):
            raise TypeError(f"prompts must be a PromptSet, got {type(self.prompts).__name__}")
        metrics = {
            k: float(v) if isinstance(v, int | float) and not isinstance(v, bool) else v
            for k, v in dict(self.metrics).items()
        }
        object.__setattr__(self, "metrics", MappingProxyType(dict(sorted(metrics.items()))))
        object.__setattr__(self, "knobs", MappingProxyType(dict(sorted(dict(self.knobs).items()))))
        try:
            _PromptFile.model_validate(self.to_dict())
        except ValidationError as error:
            raise ValueError(f"invalid exported prompt set: {_describe(error)}") from None

    @classmethod
    def create(
        cls,
        system: str,
        prompts: PromptSet,
        source_run: str | None = None,
        metrics: Mapping[str, float] | None = None,
        now: datetime | None = None,
        knobs: Mapping[str, KnobValue] | None = None,
    ) -> ExportedPrompts:
        """A record stamped with the current UTC time (or `now`), to the second; metrics that are not
        finite (a score over no questions) are left out."""
        created = (now or datetime.now(UTC)).isoformat(timespec="seconds")
        finite = {k: v for k, v in (metrics or {}).items() if math.isfinite(v)}
        return cls(
            system=system, prompts=prompts, source_run=source_run, metrics=finite, created=created,
            knobs=MappingProxyType(dict(knobs or {})),
        )

    @property
    def description(self) -> str:
        """How error messages name this record: its file, else its run."""
        if self.origin is not None and self.origin.startswith(("registry:", "prompts:/")):
            return f"registered prompt set {self.origin}"  # `prompts=` read from the registry
        if self.origin is not None:
            return f"prompt file {self.origin}"
        if self.source_run is not None:
            return f"exported prompt set of run {self.source_run}"
        return "exported prompt set"

    def to_dict(self) -> dict[str, Any]:
        """The file content, keys in `FIELD_ORDER`, metrics, stages and knobs sorted (no `knobs` key when
        there are none, so a prompt-only export reads exactly as before)."""
        data = {
            "format_version": self.format_version,
            "system": self.system,
            "created": self.created,
            "source_run": self.source_run,
            "metrics": dict(sorted(self.metrics.items())),
            "prompts": dict(sorted(self.prompts.to_dict().items())),
        }
        return {**data, "knobs": dict(sorted(self.knobs.items()))} if self.knobs else data


# --------------------------------------------------------------------------- YAML dialect


class _Dumper(yaml.SafeDumper):
    """Safe YAML; multi-line strings as literal blocks (PyYAML falls back to quoting when a block
    cannot represent the text exactly, e.g. trailing spaces)."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)


class _Loader(yaml.SafeLoader):
    """Safe YAML that rejects duplicate keys instead of keeping the last one."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _format_of(path: Path) -> str:
    fmt = FORMAT_BY_SUFFIX.get(path.suffix.lower())
    if fmt is None:
        raise PromptFileError(
            f"prompt file {path}: unsupported suffix {path.suffix or '(none)'!r}; use .json, .yaml or .yml"
        )
    return fmt


# --------------------------------------------------------------------------- write / read / apply


def dump_document(data: Mapping[str, Any], fmt: str) -> str:
    """`data` as the text of a prompt file in `fmt` "json" (indented) or "yaml" (multi-line strings as
    literal blocks), keys in the given order: what every prompt file layout is written with."""
    if fmt == "json":
        return json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    if fmt == "yaml":
        return yaml.dump(
            data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, default_flow_style=False, width=10**6
        )
    raise ValueError(f"unknown prompt file format {fmt!r}; use 'json' or 'yaml'")


def write_prompts(exported: ExportedPrompts, path: str | Path) -> Path:
    """Write `exported` as JSON or YAML (chosen by the suffix); creates parent folders. Returns the path."""
    path = Path(path)
    text = dump_document(exported.to_dict(), _format_of(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode("utf-8"))
    return path


def read_prompts(path: str | Path) -> ExportedPrompts:
    """Parse a prompt file written by `write_prompts` (or by hand in the same layout)."""
    path = Path(path)
    return prompts_from_document(load_document(path), path)


def load_document(path: str | Path) -> Any:
    """The parsed content of a JSON or YAML file (chosen by the suffix; duplicate keys refused), whatever
    its layout: `PromptFileError` naming the file for a missing, unreadable or unparsable one."""
    path = Path(path)
    fmt = _format_of(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise PromptFileError(f"prompt file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as error:
        raise PromptFileError(f"prompt file {path} cannot be read: {error}") from None
    try:
        if fmt == "json":
            return json.loads(text, object_pairs_hook=_reject_duplicates)
        return yaml.load(text, Loader=_Loader)  # a SafeLoader subclass
    except (ValueError, yaml.YAMLError) as error:
        raise PromptFileError(f"prompt file {path} is not valid {fmt.upper()}: {error}") from None


def prompts_from_document(raw: Any, path: str | Path) -> ExportedPrompts:
    """The exported prompt set of a parsed prompt file (`load_document`) in our own layout."""
    if not isinstance(raw, dict):
        raise PromptFileError(
            f"prompt file {path}: field <top level>: must be a mapping with the keys {', '.join(FIELD_ORDER)}, "
            f"got {type(raw).__name__}"
        )
    try:
        parsed = _PromptFile.model_validate(raw)
    except ValidationError as error:
        raise PromptFileError(f"prompt file {path}: {_describe(error)}") from None
    return ExportedPrompts(
        system=parsed.system,
        prompts=PromptSet(parsed.prompts),
        source_run=parsed.source_run,
        metrics=parsed.metrics,
        created=parsed.created,
        format_version=parsed.format_version,
        origin=str(path),
        knobs=MappingProxyType(dict(parsed.knobs)),
    )


def apply_prompts(system: SystemT, exported: ExportedPrompts) -> SystemT:
    """A copy of `system` whose stages use the exported instructions (omitted stages keep theirs) and
    whose knobs take the exported values (omitted knobs keep theirs); `system` itself is never modified.
    A `PromptFileError` when the export belongs to another memory system, names stages or knobs the
    system lacks, or gives a knob a value it rejects."""
    if exported.system != system.name:
        raise PromptFileError(
            f"{exported.description} is for memory system {exported.system!r}, this run uses {system.name!r}"
        )
    known = set(system.stage_names())
    unknown = sorted(set(exported.prompts.stages()) - known)
    if unknown:
        raise PromptFileError(
            f"{exported.description} names stages {unknown} that memory system {system.name!r} does not have "
            f"(its stages: {sorted(known)})"
        )
    try:
        return system.with_knobs(exported.knobs).with_prompts(exported.prompts)
    except ValueError as error:  # KnobError, PromptSetError
        raise PromptFileError(f"{exported.description}: {error}") from error
