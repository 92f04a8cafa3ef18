"""The entry points' side of keeping secrets (the functions are `pipeline.core.redaction`'s):

- `refuse_secret_overrides(argv, program)`: before Hydra parses the command line (and so before it
  echoes an override, suggests a misspelt key with its value, or writes anything into its output
  folder), an override that would put a secret into the config ends the program with exit code 2 and
  one line naming the key, never the value: a secret-named key (`+lm.task.api_key=...`,
  `...headers.Authorization=...`, a key pasted into `api_key_env`), and whatever the key's name
  (`lm.task.key`, `+openai_key`, `hydra.job.env_set.X`) a value holding a key variable's value or a
  key-like token (`redaction.secret_override`). The key variables: every `api_key_env` of the
  config files (`conf/**.yaml`) and of `*_env=NAME` overrides, the well-known ones, and every set
  variable whose name looks secret (`redaction.key_values`).
- `guarded`: the decorator every Hydra app's `main` wears on top of `@hydra.main`, so an app started
  without the `memtrace` dispatcher is checked too; it also puts the console behind `protect_console`
  and refuses a misspelt override with a did-you-mean (`override_errors`), exit 2, before Hydra runs.
- `protect_console(argv)`: `sys.stdout`/`sys.stderr` wrapped in a `RedactingStream` (URL credentials
  always; the values of variables named by `*_env=NAME` overrides; more once `protect` knows them),
  so a traceback, Hydra's own error echo or a third party's print cannot show a key; until the app
  starts, an override's `key=value` is shown as `key=<value not shown>` (Hydra's message about a
  misspelt key, "To append to your config use +key=value", never echoes the value).
- `protect(plain)`: what each app calls first thing, with its composed config: the secrets of the
  config (`config_secrets`), Hydra's `.hydra/*.yaml` (and a sweep's `multirun.yaml`) rewritten
  redacted (`scrub_hydra_output`), a `SecretFilter` on every logging handler, the console streams told
  (in a Hydra job they are wrapped when they are not yet: a sweep's job in a joblib/submitit worker
  process never passed through `guarded`); a Hydra task override holding one of the composed config's
  secrets (an `api_key_env` only an experiment file names) is refused there too, exit 2, once Hydra's
  files are scrubbed;
  returns the secrets for everything the app stores (`log_params`, `save_run`, `RedactingTracker`).
- `known_secrets()`: what the console masks so far, for a top-level error line printed outside the app.

A credential inside a URL (`api_base=http://user:KEY@proxy/v1`) is legitimate for some proxies: it is not
refused, the run uses it, and every stored or printed copy is scrubbed. This module runs nothing else.
"""

from __future__ import annotations

import functools
import inspect
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from hydra.core.hydra_config import HydraConfig
from memtrace_loop.experiments.override_errors import refuse_misspelt_overrides
from memtrace_loop.pipeline.core.redaction import (
    RedactingStream,
    config_secrets,
    install_secret_filter,
    key_values,
    redact,
    secret_override,
    url_credentials,
)

F = TypeVar("F", bound=Callable[..., Any])

__all__ = [
    "guarded", "known_secrets", "protect", "protect_console", "redact", "refuse_secret_overrides", "scrub_hydra_output",
]

USE_KEY_VARIABLE = (
    "put the key in an environment variable and name it with api_key_env "
    "(e.g. lm.task.api_key_env=OPENAI_API_KEY)"
)


_KEY_ENV_LINE = re.compile(r"^\s*api_key_env:\s*['\"]?([A-Za-z_][A-Za-z0-9_]*)", re.MULTILINE)
_HYDRA_ESCAPE = re.compile(r"\\(.)")
_ENV_OVERRIDE = re.compile(r"^[~+]{0,2}[^=]*_env=['\"]?([A-Za-z_][A-Za-z0-9_]*)['\"]?$")


def configured_key_variables(argv: Iterable[str]) -> tuple[str, ...]:
    """The variable names every `api_key_env` of the config files and of the overrides names."""
    conf = Path(__file__).resolve().parent.parent / "conf"
    named = [m.group(1) for path in sorted(conf.rglob("*.yaml")) for m in _KEY_ENV_LINE.finditer(_text(path))]
    named += [m.group(1) for m in (_ENV_OVERRIDE.match(arg.strip()) for arg in argv) if m]
    return tuple(dict.fromkeys(named))


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def _refuse(reason: str, program: str) -> None:
    sys.stderr.write(f"{program}: refused: {reason}; {USE_KEY_VARIABLE}\n")
    sys.stderr.flush()
    raise SystemExit(2)


def refuse_secret_overrides(argv: Iterable[str], program: str = "memtrace") -> None:
    """Exit with code 2 and one line on stderr when an override would put a secret into the config."""
    argv = list(argv)
    reason = secret_override(argv, key_values(os.environ, configured_key_variables(argv)))
    if reason is not None:
        _refuse(reason, program)


def _argv_secrets(argv: Iterable[str], environ: Mapping[str, str]) -> list[str]:
    found: list[str] = []
    for arg in argv:
        found.extend(url_credentials(arg))
        key, sep, value = arg.partition("=")
        if sep and key.split(".")[-1].endswith("_env") and environ.get(value.strip()):
            found.append(environ[value.strip()])
    return found


class _ConsoleStream(RedactingStream):
    """The console's `RedactingStream`; until the app starts (`protect`), each `key=value` override of
    the command line is also shown as `key=<value not shown>`: Hydra's errors about an override
    (a misspelt key's "To append to your config use +key=value", a parse error) never echo a value."""

    echoes: tuple[tuple[str, str], ...] = ()

    def write(self, text: str) -> int:
        shown = text
        for override, hidden in self.echoes:
            shown = shown.replace(override, hidden)
        self.stream.write(redact(shown, self.secrets))
        return len(text)


def _consoles() -> list[_ConsoleStream]:
    return [stream for stream in (sys.stdout, sys.stderr) if isinstance(stream, _ConsoleStream)]


def _add_console_secrets(secrets: Iterable[str]) -> None:
    secrets = tuple(secrets)
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if isinstance(stream, RedactingStream):
            stream.add(secrets)
        else:
            setattr(sys, name, _ConsoleStream(stream, secrets))


def _echoes(argv: Iterable[str]) -> tuple[tuple[str, str], ...]:
    pairs = (arg.lstrip("+~").partition("=") for arg in argv if not arg.startswith("-"))
    return tuple((f"{key}={value}", f"{key}=<value not shown>") for key, sep, value in pairs if sep and value)


def protect_console(argv: Iterable[str] = ()) -> None:
    """Put `sys.stdout`/`sys.stderr` behind a `RedactingStream` (once) with the secrets visible in argv;
    until `protect` runs, the overrides' values are not echoed either."""
    argv = list(argv)
    _add_console_secrets(_argv_secrets(argv, os.environ))
    for stream in _consoles():
        stream.echoes = _echoes(argv)


def known_secrets() -> tuple[str, ...]:
    """The secrets the console's `RedactingStream` masks (none when it is not installed): for a top-level
    error handler outside the app, `redact(str(exc), known_secrets())`."""
    stream = sys.stderr
    return stream.secrets if isinstance(stream, RedactingStream) else ()


def guarded(app_main: F) -> F:
    """For a Hydra app's `main` (on top of `@hydra.main`): started from the command line (no config
    passed), refuse secret overrides, protect the console and refuse a misspelt override (one line with a
    did-you-mean, `override_errors`) before Hydra parses `sys.argv`. The app's config is the one its
    `@hydra.main` names (else, as for every app of ours, its module's name)."""
    config_name = inspect.getclosurevars(app_main).nonlocals.get("config_name")
    if not isinstance(config_name, str):
        config_name = app_main.__module__.rpartition(".")[2]

    @functools.wraps(app_main)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not args and not kwargs:
            argv = sys.argv[1:]
            program = Path(sys.argv[0]).name if sys.argv else "memtrace"
            refuse_secret_overrides(argv, program)
            protect_console(argv)
            refuse_misspelt_overrides(argv, config_name, program)
        return app_main(*args, **kwargs)

    wrapper.unguarded = app_main  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


def unguarded(app_main: Callable[[], object]) -> Callable[[], object]:
    """`app_main` without its `guarded` checks: for the `memtrace` dispatcher, which made them already
    (each composes the config once more)."""
    inner = getattr(app_main, "unguarded", app_main)
    return inner if callable(inner) else app_main


def _rewrite(path: Path, secrets: tuple[str, ...]) -> bool:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    clean = redact(text, secrets)
    if clean == text:
        return False
    path.write_text(clean, encoding="utf-8")
    return True


def scrub_hydra_output(output_dir: str | Path, secrets: Iterable[str], subdir: str | None = ".hydra") -> list[Path]:
    """Rewrite Hydra's saved files (`<output_dir>/<subdir>/*.yaml`: config, hydra, overrides) with the
    secrets masked and URLs scrubbed; returns the files changed."""
    secrets = tuple(secrets)
    folder = Path(output_dir) / subdir if subdir else None
    if folder is None or not folder.is_dir():
        return []
    return [path for path in sorted(folder.glob("*.yaml")) if _rewrite(path, secrets)]


def _scrub_this_hydra_job(secrets: tuple[str, ...]) -> None:
    if not HydraConfig.initialized():
        return
    hydra_cfg = HydraConfig.get()
    scrub_hydra_output(hydra_cfg.runtime.output_dir, secrets, hydra_cfg.output_subdir)
    sweep_dir = hydra_cfg.sweep.dir if hydra_cfg.mode is not None and hydra_cfg.mode.name == "MULTIRUN" else None
    if sweep_dir:
        multirun = Path(sweep_dir) / "multirun.yaml"
        if not multirun.is_absolute():
            multirun = Path(hydra_cfg.runtime.cwd) / multirun
        if multirun.is_file():
            _rewrite(multirun, secrets)


def _refuse_task_overrides(secrets: tuple[str, ...]) -> None:
    """A Hydra job's overrides holding a secret of the composed config: refused (Hydra's files are
    scrubbed already), as the entry point would have refused them had it known that key variable."""
    if not HydraConfig.initialized():
        return
    hydra_cfg = HydraConfig.get()
    task = [_HYDRA_ESCAPE.sub(r"\1", override) for override in hydra_cfg.overrides.task]  # a sweep's `http\://`
    reason = secret_override(task, secrets)
    if reason is not None:
        _refuse(reason, f"memtrace {hydra_cfg.job.name}")


def protect(plain: Mapping[str, Any]) -> tuple[str, ...]:
    """An app's first step with its composed (resolved, plain) config: its secrets found, Hydra's output
    files scrubbed, every logging handler filtered, the console told. Returns the secrets."""
    secrets = config_secrets(plain, os.environ)
    for stream in _consoles():  # the app runs: its own lines (`resume=...` hints) are shown as they are
        stream.echoes = ()
    _scrub_this_hydra_job(secrets)
    _refuse_task_overrides(secrets)
    install_secret_filter(secrets)
    if HydraConfig.initialized():  # a job in a launcher's worker process (joblib, submitit) was never guarded
        _add_console_secrets(secrets)
    else:  # a library call: only a console the entry point protected is told
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            if isinstance(stream, RedactingStream):
                stream.add(secrets)
    return secrets
