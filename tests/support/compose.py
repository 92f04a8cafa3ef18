"""Compose once and copy: a Hydra composition per (config, group choices), cached for the process and
deep-copied per use, with the value overrides applied to the copy (the lightning-hydra template's
tests/conftest.py pattern).

A Hydra composition of the apps' configs costs ~0.4 s; the same config with a changed knob is the
cached composition with that knob set. Values are parsed by Hydra's own override grammar (`2.5` a
float, `ten` a string, `[a,b]` a list, `''` empty, `null` None) and set before interpolations are
resolved (so `seed=...` reaches `splits.seed` and `dataset.seed` as it does through Hydra), on a config
in struct mode (an unknown key is refused as Hydra refuses it; `+key=value` adds one).
`tests/unit/test_knob_validation.py` proves this path gives what a full composition gives.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import memtrace_loop.conf
from hydra import compose, initialize_config_module
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf, open_dict

CONF = Path(memtrace_loop.conf.__file__).parent
# the config groups: a `group=option` override chooses a file, so it is part of the composition
GROUPS = frozenset(p.name for p in CONF.iterdir() if p.is_dir() and any(p.glob("*.yaml")))


def hydra_plain(config: str, *overrides: str) -> dict[str, Any]:
    """A full Hydra composition of `config` with `overrides`, resolved to plain containers."""
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        return OmegaConf.to_container(compose(config, overrides=list(overrides)), resolve=True)  # type: ignore[return-value]


@functools.cache
def _composed(config: str, choices: tuple[str, ...]) -> DictConfig:
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        return compose(config, overrides=list(choices))


def composed(config: str, *overrides: str) -> DictConfig:
    """`config` with `overrides`: the cached composition of its group choices, copied, values set."""
    parsed = OverridesParser.create().parse_overrides(list(overrides))
    choices = tuple(o.input_line for o in parsed if o.key_or_group in GROUPS and not o.is_add())
    cfg = copy.deepcopy(_composed(config, choices))
    for override in parsed:
        if override.key_or_group in GROUPS and not override.is_add():
            continue
        if override.is_delete() or override.is_sweep_override() or override.package:
            raise ValueError(f"not supported by tests.support.compose: {override.input_line}")
        value = override.value()
        if override.is_add():
            with open_dict(cfg):
                OmegaConf.update(cfg, override.key_or_group, value, merge=False)
        else:
            if OmegaConf.select(cfg, override.key_or_group, throw_on_missing=False, default=_ABSENT) is _ABSENT:
                raise KeyError(f"Could not override '{override.key_or_group}': no such key")
            OmegaConf.update(cfg, override.key_or_group, value, merge=False)
    return cfg


def plain(config: str, *overrides: str) -> dict[str, Any]:
    """`composed(...)` resolved to plain containers (what the apps validate)."""
    return OmegaConf.to_container(composed(config, *overrides), resolve=True)  # type: ignore[return-value]


_ABSENT = object()
