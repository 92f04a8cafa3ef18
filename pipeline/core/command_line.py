"""Command lines we print for the user to run, quoted so they run as printed (POSIX shell and Hydra).

`override(key, value)` keeps a plain value bare, else writes a Hydra double-quoted string in shell quotes;
`program(name)` keeps a bare program name only when PATH finds that very file, else names the file;
`command_line(*words, **overrides)` joins a command. It builds strings, runs nothing, imports no Hydra.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from pathlib import Path

# The console scripts of our bin folder whose printed name `program` decides.
PROGRAMS = ("memtrace", "mlflow")

# Characters Hydra's grammar accepts in an unquoted value that a shell leaves alone too.
_BARE_VALUE = re.compile(r"[A-Za-z0-9_./@%+:-]+")
_BACKSLASHES_BEFORE_QUOTE = re.compile(r"(\\+)(?=\"|$)")


def hydra_quoted(value: str) -> str:
    """`value` as a Hydra double-quoted string that Hydra and OmegaConf read back as exactly `value`."""
    escaped = _BACKSLASHES_BEFORE_QUOTE.sub(lambda m: m.group(1) * 2, value)
    escaped = escaped.replace('"', '\\"').replace("${", "\\${")
    return f'"{escaped}"'


def program_path(name: str, *, path: str, executable: str, cwd: str | Path) -> str:
    """How to name the console script `name` of `executable`'s bin folder in a command typed in `cwd`: the
    bare name when `path` (a PATH value) finds that very file or there is no such file, else its path."""
    script = Path(os.path.abspath(executable)).parent / name
    if not script.is_file():
        return name
    found = shutil.which(name, path=path)
    if found is not None and os.path.samefile(found, script):
        return name
    return _shown_path(script, Path(cwd))


def _shown_path(target: Path, cwd: Path) -> str:
    """`target` relative to `cwd` when inside it (without `./` only when it has a folder part), else absolute."""
    try:
        relative = target.relative_to(os.path.abspath(cwd))
    except ValueError:
        return str(target)
    return str(relative) if relative.parent != Path() else f"./{relative}"


def program(name: str) -> str:
    """`program_path` for this process: its PATH, its interpreter, its working directory."""
    return program_path(name, path=os.environ.get("PATH", os.defpath), executable=sys.executable, cwd=os.getcwd())


def override(key: str, value: object) -> str:
    """`key=value` as one shell word that Hydra parses back to `value` (a string)."""
    text = str(value)
    if _BARE_VALUE.fullmatch(text) and not text.startswith("-"):
        return f"{key}={text}"
    return shlex.quote(f"{key}={hydra_quoted(text)}")


def command_line(*words: str, **overrides: object) -> str:
    """`words` then each override, ready to paste into a shell; a first word in `PROGRAMS` as `program` names it."""
    if words and words[0] in PROGRAMS:
        words = (program(words[0]), *words[1:])
    return " ".join([*(shlex.quote(word) for word in words), *(override(k, v) for k, v in overrides.items())])
