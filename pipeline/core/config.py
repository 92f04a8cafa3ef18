"""Checking one config node against its schema: the one way configuration is read.

A schema is a frozen dataclass (or a frozen pydantic model) whose field defaults are THE defaults of
that node. `parse_config(schema, mapping, where)` returns the validated record; an unknown key, a value
of the wrong type (`top_k=ten`, `exclude_categories=five`) or an out-of-range value (checked by the
schema's `__post_init__` / validators) is a `ConfigError` that names the full key (`memory_system.top_k`).
`defaults_of(schema)` gives the defaults as a plain mapping, which is what the Hydra config tree is
composed from (so a default is written once, in the schema). `require` is the range check schemas use.

It does not know any particular group and does not read files or the environment.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import pydantic

T = TypeVar("T")

__all__ = ["ConfigError", "defaults_of", "field_names", "parse_config", "require"]


class ConfigError(ValueError):
    """A config value that cannot be used; the message names its full key."""


def field_names(schema: Any) -> tuple[str, ...]:
    if isinstance(schema, type) and issubclass(schema, pydantic.BaseModel):
        return tuple(schema.model_fields)
    return tuple(f.name for f in dataclasses.fields(schema))


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {k: _plain(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def defaults_of(schema: Any) -> dict[str, Any]:
    """Every field of `schema` that has a default, with it (tuples as lists, records as mappings); required
    fields are left out, except required records, which give their own defaults."""
    if issubclass(schema, pydantic.BaseModel):
        return {n: _plain(f.default) for n, f in schema.model_fields.items() if not f.is_required()}
    found: dict[str, Any] = {}
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        if f.default is not dataclasses.MISSING:
            found[f.name] = _plain(f.default)
        elif f.default_factory is not dataclasses.MISSING:
            found[f.name] = _plain(f.default_factory())
        elif dataclasses.is_dataclass(hints.get(f.name)) and defaults_of(hints[f.name]):
            found[f.name] = defaults_of(hints[f.name])  # a required record: the defaults of its own fields
    return found


def _key(where: str, loc: Iterable[Any]) -> str:
    return ".".join([where, *(str(part) for part in loc)]) if where else ".".join(str(p) for p in loc)


def parse_config(schema: type[T], mapping: Mapping[str, Any] | T | None, where: str, label: str = "") -> T:
    """`mapping` validated as `schema`; a `ConfigError` naming `where.<key>` otherwise.

    `label` (default: `where`) is how the node is called in the message. Input values are not echoed
    for type errors of string fields beyond the pydantic summary (a key pasted into a wrong field must
    not end up in a log)."""
    if isinstance(mapping, schema):
        return mapping
    label = label or where or "config"
    if mapping is None:
        mapping = {}
    if not isinstance(mapping, Mapping):
        raise ConfigError(f"{where or 'config'}: must be a mapping of keys to values, got {type(mapping).__name__}")
    names = field_names(schema)
    unknown = sorted(str(key) for key in mapping if key not in names)
    if unknown:
        raise ConfigError(
            f"{label}: unknown keys {unknown} ({', '.join(_key(where, [k]) for k in unknown)}); "
            f"allowed keys: {sorted(names)}"
        )
    try:
        return pydantic.TypeAdapter(schema).validate_python(dict(mapping))
    except pydantic.ValidationError as exc:
        errors = sorted(exc.errors(), key=lambda e: len(e["loc"]))  # the outermost key first
        raise ConfigError("; ".join(_describe(where, error) for error in errors)) from None


def _describe(where: str, error: Mapping[str, Any]) -> str:
    loc = list(error["loc"])
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "value_error":  # a record's own check (__post_init__): its message starts with the field
        prefix = _key(where, loc)
        return f"{prefix}.{message}" if prefix else message
    if error["type"] == "unexpected_keyword_argument":
        return f"{_key(where, loc)}: unknown key"
    shown = "" if isinstance(error.get("input"), Mapping) else f" (got {error.get('input')!r})"
    return f"{_key(where, loc)}: {message}{shown}"


def require(record: object, **bounds: tuple[float | None, float | None]) -> None:
    """Raise ValueError `<field> must be >= lo` / `<= hi` for the first field of `record` out of its bounds."""
    for name, (low, high) in bounds.items():
        value = getattr(record, name)
        if low is not None and value < low:
            raise ValueError(f"{name} must be >= {low}, got {value!r}")
        if high is not None and value > high:
            raise ValueError(f"{name} must be <= {high}, got {value!r}")
