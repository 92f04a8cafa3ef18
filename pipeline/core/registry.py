"""The one registry shape: a config name -> the spec a module exports (`SPEC`), imported on demand.

Every registry (memory systems, optimizers, attributors, LM backends, datasets) is a `Registry[SpecT]`;
a line may name the attribute itself (`module:NAME`: one DSPy-free module holding several specs). An
unknown name is a `ConfigError` listing the names. `compared()` lists the names whose spec sets
`compare`, which the default sweeps read. It validates no settings and builds nothing.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Generic, TypeVar

from memtrace_loop.pipeline.core.config import ConfigError

SpecT = TypeVar("SpecT")


class UnknownEntryError(ConfigError):
    """A config names an entry that no registry line provides."""


@dataclass(frozen=True)
class Registry(Generic[SpecT]):
    """`what` names the entry kind in messages ("memory system"), `key` the config key (`memory_system.name`);
    `modules`: name -> module exporting `attribute` (or `module:NAME`); `unknown`: the message for a name no
    line provides (fields `key`, `what`, `name`, `available` as "a, b", `choices` as a list)."""

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
        """The module that implements `name`; `UnknownEntryError` naming the key and the choices."""
        if name not in self:
            raise UnknownEntryError(self.unknown.format(
                key=key or self.key, what=self.what, name=name, available=", ".join(self._frozen),
                choices=list(self._frozen),
            ))
        return self._frozen[str(name)]

    def get(self, name: object, key: str | None = None) -> SpecT:
        """The spec of `name` (its module imported on first use); `key`: the config key named for an unknown
        name when not the registry's own (`lm.task.backend`)."""
        module, _, attribute = self.module_of(name, key).partition(":")
        spec: SpecT = getattr(importlib.import_module(module), attribute or self.attribute)
        return spec

    def items(self) -> Iterator[tuple[str, SpecT]]:
        """Every (name, spec), importing every module."""
        return ((name, self.get(name)) for name in self._frozen)

    def compared(self) -> tuple[str, ...]:
        """The names whose spec sets `compare = True` (the entries default sweeps cover)."""
        return tuple(name for name, spec in self.items() if getattr(spec, "compare", False))
