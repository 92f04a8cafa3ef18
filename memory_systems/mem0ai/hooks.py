"""The real `mem0ai` library's two prompt hooks: our stages, and their default texts.

`fact_extraction` and `update_memory` start from mem0's own defaults, with the date line as
`Today's date is {session_date}.` (filled per turn by `with_session_date`, so nothing depends on the day of
a run). `import_mem0` turns telemetry off and keeps `MEM0_DIR` away from `~/.mem0` first.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import tempfile
from collections.abc import Mapping
from types import MappingProxyType, ModuleType

# our stage name -> the mem0 config key holding its text
HOOK_BY_STAGE: Mapping[str, str] = MappingProxyType({
    "fact_extraction": "custom_fact_extraction_prompt",
    "update_memory": "custom_update_memory_prompt",
})
DATE_PLACEHOLDER = "{session_date}"
_DATE_LINE = re.compile(r"(Today's date is )(\d{4}-\d{2}-\d{2}|\{session_date\})")
SUPPORTED = "mem0ai>=1.0.5,<2"


class Mem0MissingError(ImportError):
    """The `mem0ai` package is not installed (or not a supported version)."""


def import_mem0() -> ModuleType:
    """The `mem0` package, imported with telemetry off and `MEM0_DIR` set (unless already set)."""
    os.environ.setdefault("MEM0_TELEMETRY", "False")
    os.environ.setdefault("MEM0_DIR", os.path.join(tempfile.gettempdir(), "memtrace-mem0"))
    try:
        import mem0  # after the environment above: mem0 reads both at import
    except ImportError as error:
        raise Mem0MissingError(
            f"memory_system=mem0ai needs the mem0 library: pip install '{SUPPORTED}' "
            f"(or `pip install -e '.[mem0]'`; `make install` does): {error}"
        ) from error
    version = installed_version()
    if not version.startswith("1."):
        raise Mem0MissingError(f"memory_system=mem0ai supports {SUPPORTED}; mem0ai {version} is installed")
    return mem0


def installed_version() -> str:
    """The installed `mem0ai` version ("" when it is not installed)."""
    try:
        return importlib.metadata.version("mem0ai")
    except importlib.metadata.PackageNotFoundError:
        return ""


def with_session_date(text: str, session_date: str) -> str:
    """`text` with its "Today's date is ..." line set to `session_date` (ISO `YYYY-MM-DD`).

    >>> with_session_date("- Today's date is {session_date}.", "2023-05-08")
    "- Today's date is 2023-05-08."
    """
    return _DATE_LINE.sub(lambda m: m.group(1) + session_date, text)


def default_hooks() -> dict[str, str]:
    """Stage -> the installed library's default text of its hook, the date line as a placeholder."""
    import_mem0()
    from mem0.configs import prompts
    texts = {
        "fact_extraction": prompts.USER_MEMORY_EXTRACTION_PROMPT,
        "update_memory": prompts.DEFAULT_UPDATE_MEMORY_PROMPT,
    }
    return {stage: _DATE_LINE.sub(lambda m: m.group(1) + DATE_PLACEHOLDER, text) for stage, text in texts.items()}
