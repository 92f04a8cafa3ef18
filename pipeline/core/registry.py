"""The one registry shape: a config key's name -> the spec a module exports, imported on demand.

Every registry of the project (memory systems, optimizers, attributors, LM backends, datasets) is a
`Registry[SpecT]`: a mapping from the names a user writes in a config (`memory_system=rag`,
`optimizer=gepa`, `lm.task.backend=openai`) to the module that implements that name. Each such module
exports its spec as `SPEC` (the attribute name is the registry's `attribute`), or a line names the
attribute itself (`module:NAME`: one DSPy-free module holding several specs whose builders import
their implementations when called); the spec's type is the registry's contract (e.g.
`MemorySystemSpec`). Adding an implementation is its own module plus one line in the registry's
`modules` mapping plus its config file.

    >>> registry = Registry("demo", "demo.name", {"json": "json"}, attribute="dumps")
    >>> registry.names
    ('json',)
    >>> registry.get("json")({"a": 1})
    '{"a": 1}'
    >>> try:
    ...     registry.get("yaml")
    ... except ConfigError as error:
    ...     print(error)
    demo.name: unknown demo 'yaml' (available: json)
    >>> Registry("demo", "demo.name", {"loads": "json:loads"}).get("loads")("[1]")
    [1]

Modules are imported when first asked for (Python's import system caches them), so a registry line
costs nothing until it is used and an optional extra is only needed by the runs that choose it.
`compared()` lists the names whose spec says `compare = True`: the default sweeps are generated from
it, so an entry that needs an extra or a user's target is not swept unless it says so.
It does not validate settings (see `pipeline.core.config.parse_config`) or build anything.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Generic, TypeVar

from memtrace_loop.pipeline.core.config import ConfigError

__all__ = ["Registry", "UnknownEntryError"]

SpecT = TypeVar("SpecT")


class UnknownEntryError(ConfigError):
    """A config names an entry that no registry line provides."""


@dataclass(frozen=True)
class Registry(Generic[SpecT]):
    """`what` names the kind of entry in messages ("memory system"); `key` is the config key a user
    sets (`memory_system.name`); `modules` maps each name to the module exporting `attribute` (or to
    `module:NAME`, the spec's own name);
    `unknown` is the message for a name no line provides (fields: `key`, `what`, `name`, `available`
    as "a, b", `choices` as a list)."""

    what: str
    key: str
    modules: Mapping[str, str]
    attribute: str = "SPEC"
    unknown: str = "{key}: unknown {what} {name!r} (available: {available})"
    _frozen: Mapping[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_frozen", MappingProxyType(dict(self.modules)))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._frozen)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._frozen

    def __iter__(self) -> Iterator[str]:
        return iter(self._frozen)

    def module_of(self, name: object, key: str | None = None) -> str:
        """The module that implements `name`; `UnknownEntryError` naming the key (`key`, else the
        registry's) and the choices."""
        if name not in self:
            raise UnknownEntryError(self.unknown.format(
                key=key or self.key, what=self.what, name=name, available=", ".join(self._frozen),
                choices=list(self._frozen),
            ))
        return self._frozen[str(name)]

    def get(self, name: object, key: str | None = None) -> SpecT:
        """The spec of `name` (its module imported on first use); `key` names the config key in the
        message for an unknown name when it is not the registry's own (e.g. `lm.task.backend`)."""
        module, _, attribute = self.module_of(name, key).partition(":")
        spec: SpecT = getattr(importlib.import_module(module), attribute or self.attribute)
        return spec

    def items(self) -> Iterator[tuple[str, SpecT]]:
        """Every (name, spec), importing every module."""
        return ((name, self.get(name)) for name in self._frozen)

    def compared(self) -> tuple[str, ...]:
        """The names whose spec sets `compare = True` (the entries default sweeps cover)."""
        return tuple(name for name, spec in self.items() if getattr(spec, "compare", False))
