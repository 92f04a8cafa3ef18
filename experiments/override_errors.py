"""A misspelt override (`memory_system.top_kk=5`, `memory_sytem=rag`, `+memory_system.top_kk=5`) found
before Hydra runs the app: one line with a did-you-mean, exit 2.

`override_error(argv, config_name, program)` parses the command line with Hydra's own parser and
grammar and composes the config with the compose API; a key Hydra refuses, a group option with no file,
or an appended `+key` that nearly matches a key already there becomes one line naming the key and the
closest valid key or option. It never shows an override's value (it may be a secret). What Hydra refuses
for another reason (syntax, `--help`) is left to Hydra.
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from hydra import compose, initialize_config_module
from hydra._internal.utils import get_args_parser
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, ValueType
from hydra.errors import ConfigCompositionException, HydraException, MissingConfigException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

CONFIG_MODULE = "memtrace_loop.conf"
_OVERRIDE_KEY = re.compile(r"(?:Could not override|Could not delete from config\. No match for) '([^']+)'")
_APPEND_EXISTING = re.compile(r"Could not append to config\. An item is already at '([^']+)'")
_NEAR = 0.6  # difflib ratio for a did-you-mean of a key Hydra refuses
_NEAR_APPEND = 0.8  # stricter for `+key`: an appended key may be meant to be new


@dataclass(frozen=True)
class Schema:
    """What an override may name: the composed config's dotted keys and each config group's options."""

    keys: tuple[str, ...]
    groups: Mapping[str, tuple[str, ...]]

    def suggest(self, key: str, cutoff: float = _NEAR) -> str | None:
        """The closest key (or group) to `key`: a sibling first, else a key of the same depth elsewhere."""
        parent, _, leaf = key.rpartition(".")
        siblings = {k.rpartition(".")[2]: k for k in self.keys if k.rpartition(".")[0] == parent and "." in k}
        if not parent:
            siblings = {k: k for k in self.keys if "." not in k} | {g: f"{g} (a config group)" for g in self.groups}
        found = difflib.get_close_matches(leaf, list(siblings), n=1, cutoff=cutoff)
        if found:
            return siblings[found[0]]
        elsewhere = [k for k in self.keys if k.count(".") == key.count(".") and k.rpartition(".")[0] != parent]
        found = difflib.get_close_matches(key, elsewhere, n=1, cutoff=max(cutoff, _NEAR_APPEND))
        return found[0] if found else None


def refuse_misspelt_overrides(argv: Iterable[str], config_name: str, program: str) -> None:
    """Exit with code 2 and one line on stderr when an override names no key or group option."""
    line = override_error(list(argv), config_name, program)
    if line is not None:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
        raise SystemExit(2)


def override_error(argv: Sequence[str], config_name: str, program: str) -> str | None:
    """The one-line error for the first misspelt override of `argv`, or None (Hydra decides the rest)."""
    if GlobalHydra.instance().is_initialized():  # inside a Hydra job (a sweep's worker): composed already
        return None
    try:
        args, unknown = get_args_parser().parse_known_args(list(argv))
        overrides = OverridesParser.create().parse_overrides(args.overrides)
    except (HydraException, SystemExit, ValueError):
        return None
    if unknown or args.help or args.hydra_help or args.info or args.shell_completion:
        return None
    try:
        with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
            problem = _problem(args.config_name or config_name, overrides)
    except (HydraException, OmegaConfBaseException, ValueError, KeyError, TypeError):
        return None  # not a misspelling this check knows: Hydra reports it as it does
    return f"{program}: {problem}" if problem else None


def _problem(config_name: str, overrides: list[Override]) -> str | None:
    loader = GlobalHydra.instance().config_loader()
    groups = {g: tuple(loader.get_group_options(g)) for g in loader.list_groups("") if g != "hydra"}
    appended = [o for o in overrides if o.is_add() and not _is_group(o, groups)]
    composed = [(o.key_or_group, _first_value(o)) for o in overrides if o not in appended]
    try:
        cfg = compose(config_name, overrides=[line for _, line in composed if line], return_hydra_config=True)
    except MissingConfigException as error:
        return _missing_option(error, groups)
    except ConfigCompositionException as error:
        return _refused_key(str(error), config_name, groups, composed)
    schema = Schema(tuple(_dotted_keys(cfg)), groups)
    sweeps = (o for o in overrides if _listed(o) and o.key_or_group in groups)  # a glob: Hydra's
    for sweep in sweeps:
        for option in sweep.sweep_string_iterator():
            if option not in groups[sweep.key_or_group]:
                return _no_option(sweep.key_or_group, option, groups[sweep.key_or_group])
    return next(filter(None, (_appended_problem(o.key_or_group, schema) for o in appended)), None)


def _listed(override: Override) -> bool:
    """A sweep over values written out (`a,b`, `choice(a,b)`), not a glob."""
    return override.value_type in (ValueType.SIMPLE_CHOICE_SWEEP, ValueType.CHOICE_SWEEP)


def _is_group(override: Override, groups: Mapping[str, tuple[str, ...]]) -> bool:
    return override.key_or_group in groups or override.key_or_group.split("/")[0] in groups


def _first_value(override: Override) -> str | None:
    """The override as one composable `key=value` (a sweep's first value; a glob or interval: left out)."""
    if not override.is_sweep_override():
        return override.input_line
    if not (_listed(override) or override.is_range_sweep()):
        return None
    try:
        first = next(iter(override.sweep_string_iterator()))
    except (HydraException, StopIteration):
        return None
    return f"{override.get_key_element()}={first}"


def _dotted_keys(node: object, prefix: str = "") -> Iterable[str]:
    if isinstance(node, DictConfig):
        for key in node:
            path = f"{prefix}{key!s}"
            yield path
            yield from _dotted_keys(node._get_node(key), f"{path}.")  # the node, not resolved


def _schema_without(config_name: str, groups: Mapping[str, tuple[str, ...]], overrides: list[str]) -> Schema:
    """The schema the other overrides compose (the chosen group options' keys), else the defaults'."""
    try:
        cfg = compose(config_name, overrides=overrides, return_hydra_config=True)
    except ConfigCompositionException:
        cfg = compose(config_name, overrides=[], return_hydra_config=True)
    return Schema(tuple(_dotted_keys(cfg)), groups)


def _refused_key(message: str, config_name: str, groups: Mapping[str, tuple[str, ...]],
                 composed: list[tuple[str, str | None]]) -> str | None:
    existing = _APPEND_EXISTING.search(message)
    if existing:
        return f"{existing.group(1)!r} is already in the config: set it without '+' ({existing.group(1)}=...)"
    match = _OVERRIDE_KEY.search(message)
    if match is None:
        return None
    key = match.group(1)
    others = [line for name, line in composed if line and name != key]
    return _unknown_key(key, _schema_without(config_name, groups, others))


def _unknown_key(key: str, schema: Schema, cutoff: float = _NEAR) -> str:
    guess = schema.suggest(key, cutoff)
    if guess is not None:
        return f"no key {key!r} in the config; did you mean {guess}?"
    parent = key.rpartition(".")[0]
    siblings = [k.rpartition(".")[2] for k in schema.keys if k.rpartition(".")[0] == parent]
    where = f"under {parent!r}" if parent else "at the top level"
    return f"no key {key!r} in the config; the keys {where}: {', '.join(siblings) or '(none)'}"


def _appended_problem(key: str, schema: Schema) -> str | None:
    """`+key`: fine when new and no near miss of a key already there; refused when it is one."""
    if key in schema.keys:
        return f"{key!r} is already in the config: set it without '+' ({key}=...)"
    guess = schema.suggest(key, _NEAR_APPEND)
    if guess is None:
        return None
    return f"no key {key!r} in the config (appended with '+'); did you mean {guess}?"


def _missing_option(error: MissingConfigException, groups: Mapping[str, tuple[str, ...]]) -> str | None:
    missing = error.missing_cfg_file or ""
    group, _, option = missing.rpartition("/")
    if not group:
        return None
    options = tuple(error.options or groups.get(group, ()))
    return _no_option(group, option, options)


def _no_option(group: str, option: str, options: Sequence[str]) -> str:
    """One line for a group option with no file; the option itself (the override's value) is not shown."""
    found = difflib.get_close_matches(option, list(options), n=1, cutoff=_NEAR)
    hint = f"did you mean {group}={found[0]}? " if found else ""
    return f"no such option for config group {group!r}; {hint}(options: {', '.join(options)})"
