"""Checking one config node against its schema: the one way configuration is read.

`parse_config(schema, mapping, where)` validates strictly (pydantic strict mode on the node's JSON form: no
coercion, NaN refused; an unknown key, wrong type or out-of-range value is a `ConfigError` naming the full
key); `defaults_of(schema)` gives the defaults the Hydra tree is composed from; `require` is the range check;
`describe_error` renders one pydantic error. It knows no group and reads no files or environment.
"""

from __future__ import annotations

import dataclasses
import json
import math
import typing
from collections.abc import Iterable, Mapping
from pathlib import PurePath
from typing import Any, TypeVar

import pydantic

T = TypeVar("T")


class ConfigError(ValueError):
    """A config value that cannot be used; the message names its full key."""


def field_names(schema: Any) -> tuple[str, ...]:
    if isinstance(schema, type) and issubclass(schema, pydantic.BaseModel):
        return tuple(schema.model_fields)
    return tuple(f.name for f in dataclasses.fields(schema))


def plain_of(value: Any) -> Any:
    """A record (or a value inside one) as a plain config node: records as mappings, tuples as lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {k: plain_of(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, pydantic.BaseModel):
        return {k: plain_of(v) for k, v in value.model_dump().items()}
    if isinstance(value, tuple | list):
        return [plain_of(v) for v in value]
    return value


def defaults_of(schema: Any) -> dict[str, Any]:
    """Every field of `schema` that has a default, with it (tuples as lists, records as mappings); required
    fields are left out, except required records, which give their own defaults."""
    if issubclass(schema, pydantic.BaseModel):
        return {n: plain_of(f.default) for n, f in schema.model_fields.items() if not f.is_required()}
    found: dict[str, Any] = {}
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        if f.default is not dataclasses.MISSING:
            found[f.name] = plain_of(f.default)
        elif f.default_factory is not dataclasses.MISSING:
            found[f.name] = plain_of(f.default_factory())
        elif dataclasses.is_dataclass(hints.get(f.name)) and defaults_of(hints[f.name]):
            found[f.name] = defaults_of(hints[f.name])  # a required record: the defaults of its own fields
    return found


def dotted_key(where: str, loc: Iterable[Any]) -> str:
    """`where` and `loc` as one key: `memory_system.top_k`, `splits.fractions[0]`."""
    key = where
    for part in loc:
        key = f"{key}[{part}]" if isinstance(part, int) else f"{key}.{part}" if key else str(part)
    return key


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, pydantic.BaseModel):
        return value.model_dump()
    if isinstance(value, PurePath):
        return str(value)
    raise TypeError(f"not a plain config value: {type(value).__name__}")


def non_finite_keys(node: Any, where: str) -> list[tuple[str, float]]:
    """(full key, value) of every NaN or infinite number in `node` (a plain mapping / list tree)."""
    if isinstance(node, float):
        return [] if math.isfinite(node) else [(where or "config", node)]
    if isinstance(node, Mapping):
        return [k for key, value in node.items() for k in non_finite_keys(value, dotted_key(where, [key]))]
    if isinstance(node, list | tuple):
        return [k for i, value in enumerate(node) for k in non_finite_keys(value, dotted_key(where, [i]))]
    return []


def parse_config(schema: type[T], mapping: Mapping[str, Any] | T | None, where: str, label: str = "") -> T:
    """`mapping` validated as `schema`; a `ConfigError` naming `where.<key>` otherwise."""
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
            f"{label}: unknown keys {unknown} ({', '.join(dotted_key(where, [k]) for k in unknown)}); "
            f"allowed keys: {sorted(names)}"
        )
    bad_numbers = non_finite_keys(dict(mapping), where)
    if bad_numbers:
        raise ConfigError("; ".join(f"{key}: expected a finite number, got {value}" for key, value in bad_numbers))
    try:
        text = json.dumps(dict(mapping), default=_jsonable)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{label}: {error}") from None
    try:
        # the JSON form in strict mode: no str -> int/list, float -> int or int/str -> bool coercion
        return pydantic.TypeAdapter(schema).validate_json(text, strict=True)
    except pydantic.ValidationError as exc:
        errors = sorted(exc.errors(), key=lambda e: len(e["loc"]))  # the outermost key first
        messages = (describe_error(where, e, _fields_at(schema, e["loc"])) for e in errors)
        raise ConfigError("; ".join(dict.fromkeys(messages))) from None


def _fields_at(schema: Any, loc: Iterable[Any]) -> tuple[str, ...]:
    """The field names of the record found at `loc` inside `schema` (empty when it is not a record)."""
    for part in loc:
        try:
            hints = typing.get_type_hints(schema)
        except TypeError:
            return ()
        schema = hints.get(str(part))
    if isinstance(schema, type) and (dataclasses.is_dataclass(schema) or issubclass(schema, pydantic.BaseModel)):
        return field_names(schema)
    return ()


_EXPECTED_BY_TYPE = {
    "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
    "float_type": "a number", "float_parsing": "a number", "finite_number": "a finite number",
    "bool_type": "true or false", "bool_parsing": "true or false",
    "string_type": "a string", "tuple_type": "a list", "list_type": "a list",
    "dict_type": "a mapping", "dataclass_type": "a mapping", "model_type": "a mapping",
}

_BOUND_BY_TYPE = {"greater_than": (">", "gt"), "greater_than_equal": (">=", "ge"), "less_than": ("<", "lt"),
                  "less_than_equal": ("<=", "le")}


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def describe_error(where: str, error: Mapping[str, Any], fields: Iterable[str] = (), show_input: bool = True) -> str:
    """One pydantic error as `<where>.<key>: <what was expected>, got <value>`.

    A record's own check (`__post_init__`, a model validator) has no location; when its message starts
    with one of `fields` (as `require`'s do: `top_k must be >= 1, got 0`) that field is named as the key.
    `show_input=False` leaves the value out (a secret pasted into a wrong field must not reach a log)."""
    loc = [part for part in error["loc"] if not (isinstance(part, str) and part.startswith("function-"))]
    message = str(error["msg"]).removeprefix("Value error, ")
    kind = error["type"]
    if kind == "value_error":
        head, _, rest = message.partition(" ")
        if head in set(fields) and rest:
            return f"{dotted_key(where, [*loc, head])}: {rest}"
        prefix = dotted_key(where, loc)
        return f"{prefix}: {message}" if prefix else message
    if kind == "missing" and loc and isinstance(loc[-1], int):  # a fixed-length list that is too short
        return f"{dotted_key(where, loc[:-1])}: too few items"
    if kind in ("unexpected_keyword_argument", "extra_forbidden"):
        return f"{dotted_key(where, loc)}: unknown key"
    value = error.get("input")
    got = "" if isinstance(value, Mapping) or not show_input else f", got {_shown(value)}"
    if kind in _EXPECTED_BY_TYPE:
        return f"{dotted_key(where, loc)}: expected {_EXPECTED_BY_TYPE[kind]}{got}"
    bound = _BOUND_BY_TYPE.get(kind)
    if bound is not None:
        limit = (error.get("ctx") or {}).get(bound[1])
        return f"{dotted_key(where, loc)}: must be {bound[0]} {limit}{got}"
    if kind == "string_too_short":
        return f"{dotted_key(where, loc)}: must be a non-empty string"
    if kind == "literal_error":
        return f"{dotted_key(where, loc)}: expected {message.removeprefix('Input should be ')}{got}"
    return f"{dotted_key(where, loc)}: {message}{got}"


def require(record: object, **bounds: tuple[float | None, float | None]) -> None:
    """Raise ValueError `<field> must be >= lo` / `<= hi` for the first field of `record` out of its bounds."""
    for name, (low, high) in bounds.items():
        value = getattr(record, name)
        if low is not None and value < low:
            raise ValueError(f"{name} must be >= {low}, got {value!r}")
        if high is not None and value > high:
            raise ValueError(f"{name} must be <= {high}, got {value!r}")


def require_text(record: object, *names: str) -> None:
    """Raise ValueError `<field> must be a non-empty string` for the first of `names` that is empty or
    blank (None is left to the field's type)."""
    for name in names:
        value = getattr(record, name)
        if isinstance(value, str) and not value.strip():
            raise ValueError(f"{name} must be a non-empty string, got {value!r}")


def require_categories(record: object, name: str = "exclude_categories", known: Iterable[int] = ()) -> None:
    """Raise ValueError unless every item of the field `name` is a category number >= 1 (and one of
    `known` when given: excluding a category the data cannot have would silently exclude nothing)."""
    values = list(getattr(record, name))
    allowed = sorted(set(known))
    if any(value < 1 for value in values) or (allowed and any(value not in allowed for value in values)):
        expected = f"one of {allowed}" if allowed else "category numbers >= 1"
        raise ValueError(f"{name} must list {expected}, got {values}")
