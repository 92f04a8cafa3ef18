"""Command lines we print for the user to run (`memtrace run prompts=<path>`, `memtrace optimize
resume=<dir>`, ...): each override quoted so that the line runs as printed, in a POSIX shell and
through Hydra's override grammar.

A multirun job's folder is named by its overrides (`memory_system=rag,optimizer=none,seed=0`): an `=`
or `,` in an unquoted override value breaks Hydra's grammar (`,` even makes it a sweep), and a space or
quote breaks the shell. `override(key, value)` leaves a plain value bare (`prompts=/tmp/x/best.json`)
and otherwise writes it as a Hydra double-quoted string (quotes and the backslashes before them
escaped, `${` escaped so OmegaConf does not read an interpolation) inside shell quotes:
`'prompts="/tmp/memory_system=rag,seed=0/best.json"'`. `command_line(*words, **overrides)` joins a
command. This module builds strings; it runs nothing and does not import Hydra (tests parse its
output with Hydra's `OverridesParser` and `shlex`).
"""

from __future__ import annotations

import re
import shlex

# Characters Hydra's grammar accepts in an unquoted value that a shell leaves alone too.
_BARE_VALUE = re.compile(r"[A-Za-z0-9_./@%+:-]+")
_BACKSLASHES_BEFORE_QUOTE = re.compile(r"(\\+)(?=\"|$)")


def hydra_quoted(value: str) -> str:
    """`value` as a Hydra double-quoted string that Hydra and OmegaConf read back as exactly `value`."""
    escaped = _BACKSLASHES_BEFORE_QUOTE.sub(lambda m: m.group(1) * 2, value)
    escaped = escaped.replace('"', '\\"').replace("${", "\\${")
    return f'"{escaped}"'


def override(key: str, value: object) -> str:
    """`key=value` as one shell word that Hydra parses back to `value` (a string)."""
    text = str(value)
    if _BARE_VALUE.fullmatch(text) and not text.startswith("-"):
        return f"{key}={text}"
    return shlex.quote(f"{key}={hydra_quoted(text)}")


def command_line(*words: str, **overrides: object) -> str:
    """`words` (the command, e.g. "memtrace", "run") then each override, ready to paste into a shell."""
    return " ".join([*(shlex.quote(word) for word in words), *(override(k, v) for k, v in overrides.items())])
