"""The apps' glue to `pipeline.core.redaction`: secrets refused on the command line, masked once known.

- `refuse_secret_overrides(argv, program)`: an override that would put a secret into the config ends
  the program before Hydra echoes or saves it (exit 2, one line naming the key, never the value).
- `protect_console(argv)`: stdout/stderr behind a `RedactingStream`; until `protect` runs, an
  override's `key=value` shows as `key=<value not shown>`.
- `guarded`: both, and the misspelt-override refusal, on top of an app's `@hydra.main` started without
  the `memtrace` dispatcher; `unguarded` undoes it.
- `protect(plain)`: each app's first step: its secrets found, Hydra's saved YAML rewritten redacted, a
  task override holding one refused, log handlers filtered, the console told; returns the secrets.
- `known_secrets()`: what the console masks so far.

A credential inside a URL (`api_base=http://user:KEY@proxy/v1`) is not refused: every copy is scrubbed.
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
    refuse,
    scrub_files,
    secret_override,
    url_credentials,
)

F = TypeVar("F", bound=Callable[..., Any])

USE_KEY_VARIABLE = ("put the key in an environment variable and name it with api_key_env "
                    "(e.g. lm.task.api_key_env=OPENAI_API_KEY)")
_KEY_ENV_LINE = re.compile(r"^\s*api_key_env:\s*['\"]?([A-Za-z_][A-Za-z0-9_]*)", re.MULTILINE)
_ENV_OVERRIDE = re.compile(r"^[~+]{0,2}[^=]*_env=['\"]?([A-Za-z_][A-Za-z0-9_]*)['\"]?$")


def configured_key_variables(argv: Iterable[str]) -> tuple[str, ...]:
    """The variable names every `api_key_env` of the config files and of the overrides names."""
    conf = Path(__file__).resolve().parent.parent / "conf"
    named = [m.group(1) for path in sorted(conf.rglob("*.yaml"))
             for m in _KEY_ENV_LINE.finditer(path.read_text(encoding="utf-8", errors="replace"))]
    return tuple(dict.fromkeys(named + [m.group(1) for m in (_ENV_OVERRIDE.match(a.strip()) for a in argv) if m]))


def refuse_secret_overrides(argv: Iterable[str], program: str = "memtrace") -> None:
    """Exit with code 2 and one line on stderr when an override would put a secret into the config."""
    argv = list(argv)
    reason = secret_override(argv, key_values(os.environ, configured_key_variables(argv)))
    if reason is not None:
        refuse(reason, program, USE_KEY_VARIABLE)


def _tell_console(secrets: Iterable[str], wrap: bool = True) -> list[RedactingStream]:
    secrets = tuple(secrets)
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if isinstance(stream, RedactingStream):
            stream.add(secrets)
        elif wrap:
            setattr(sys, name, RedactingStream(stream, secrets))
    return [s for s in (sys.stdout, sys.stderr) if isinstance(s, RedactingStream)]


def protect_console(argv: Iterable[str] = ()) -> None:
    """`sys.stdout`/`sys.stderr` behind a `RedactingStream` (once) with the secrets visible in argv."""
    argv = [a for a in argv if not a.startswith("-")]
    found = [v for a in argv for v in url_credentials(a)]
    for key, _, value in (a.lstrip("+~").partition("=") for a in argv):
        if key.split(".")[-1].endswith("_env") and os.environ.get(value.strip()):
            found.append(os.environ[value.strip()])
    pairs = [a.lstrip("+~").partition("=") for a in argv]
    for stream in _tell_console(found):
        stream.echoes = tuple((f"{k}={v}", f"{k}=<value not shown>") for k, sep, v in pairs if sep and v)


def known_secrets() -> tuple[str, ...]:
    """The secrets the console's `RedactingStream` masks (none when it is not installed)."""
    return sys.stderr.secrets if isinstance(sys.stderr, RedactingStream) else ()


def guarded(app_main: F) -> F:
    """On top of a Hydra app's `@hydra.main`: started from the command line, refuse secret overrides,
    protect the console and refuse a misspelt override before Hydra parses `sys.argv`."""
    config_name = inspect.getclosurevars(app_main).nonlocals.get("config_name")
    if not isinstance(config_name, str):
        config_name = app_main.__module__.rpartition(".")[2]

    @functools.wraps(app_main)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not args and not kwargs:
            argv, program = sys.argv[1:], Path(sys.argv[0]).name if sys.argv else "memtrace"
            refuse_secret_overrides(argv, program)
            protect_console(argv)
            refuse_misspelt_overrides(argv, config_name, program)
        return app_main(*args, **kwargs)

    wrapper.unguarded = app_main  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


def unguarded(app_main: Callable[[], object]) -> Callable[[], object]:
    """`app_main` without its `guarded` checks (the `memtrace` dispatcher made them already)."""
    inner = getattr(app_main, "unguarded", app_main)
    return inner if callable(inner) else app_main


def scrub_hydra_output(output_dir: str | Path, secrets: Iterable[str], subdir: str | None = ".hydra") -> list[Path]:
    """Hydra's saved files (`<output_dir>/<subdir>/*.yaml`) rewritten redacted; returns those changed."""
    folder = Path(output_dir) / subdir if subdir else None
    return scrub_files(sorted(folder.glob("*.yaml")), secrets) if folder is not None and folder.is_dir() else []


def _scrub_this_hydra_job(secrets: tuple[str, ...]) -> None:
    """This job's Hydra files scrubbed; a task override holding one of the secrets refused (exit 2)."""
    hydra_cfg = HydraConfig.get()
    scrub_hydra_output(hydra_cfg.runtime.output_dir, secrets, hydra_cfg.output_subdir)
    if hydra_cfg.mode is not None and hydra_cfg.mode.name == "MULTIRUN" and hydra_cfg.sweep.dir:
        scrub_files([Path(hydra_cfg.runtime.cwd) / hydra_cfg.sweep.dir / "multirun.yaml"], secrets)
    task = [re.sub(r"\\(.)", r"\1", override) for override in hydra_cfg.overrides.task]  # a sweep's `http\://`
    reason = secret_override(task, secrets)
    if reason is not None:
        refuse(reason, f"memtrace {hydra_cfg.job.name}", USE_KEY_VARIABLE)


def protect(plain: Mapping[str, Any]) -> tuple[str, ...]:
    """An app's first step with its composed (resolved, plain) config; returns its secrets."""
    secrets = config_secrets(plain, os.environ)
    in_hydra = HydraConfig.initialized()
    if in_hydra:
        _scrub_this_hydra_job(secrets)
    install_secret_filter(secrets)
    for stream in _tell_console(secrets, wrap=in_hydra):  # a library call: only a protected console is told
        stream.echoes = ()  # the app runs: its own lines (`resume=...` hints) are shown as they are
    return secrets
