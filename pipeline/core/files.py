"""Writing a file whole or not at all: `write_atomically` (a unique temporary file, then `os.replace`).

The folder is created. It does not lock, retry or fsync.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def write_atomically(path: str | Path, content: str | bytes) -> Path:
    """Write `content` to `path` in one step (see the module doc); returns the path. OSError as raised."""
    path = Path(path)
    data = content.encode("utf-8") if isinstance(content, str) else content
    temporary = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")  # mode from the umask
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with temporary.open("xb") as out:
            out.write(data)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return path
