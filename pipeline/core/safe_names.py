"""File names made from data: `file_stem(id)` and `confined(root, name)`, the one sanitizer.

`file_stem` keeps an id that is already a safe, portable, lower-case name, and otherwise sanitizes it and
appends `~` and a short hash of the id, so distinct ids get distinct names; `confined` refuses a name
that escapes `root`. The file keeps the original id inside it.

>>> file_stem("conv-26")
'conv-26'
>>> file_stem("../../../x")
'x~0274b71897'
>>> file_stem("/tmp/x")
'tmp_x~2e56aa36f5'
>>> file_stem("a/b")
'a_b~c14cddc033'
>>> file_stem("CON"), file_stem("con"), file_stem("nul.txt")
('_con~a3dbc4b644', '_con~1143da2bc5', '_nul.txt~7f3cbdd58a')
>>> file_stem("Conv-1") != file_stem("conv-1")
True
>>> file_stem("")
'id~e3b0c44298'
>>> len(file_stem("x" * 300))
91
>>> confined(Path("/runs/r1"), file_stem("../../x"))
PosixPath('/runs/r1/x~9cdf6a5010')
>>> confined(Path("/runs/r1"), "../x")
Traceback (most recent call last):
...
ValueError: '../x' is not a name inside /runs/r1
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

MAX_KEPT = 80  # characters of an id kept in a name (a changed one adds `~` and the hash)
HASH_SEP = "~"  # never in a kept name: it marks a changed one
_HASH_CHARS = 10  # hex digits of sha256(id): 40 bits
_KEPT = re.compile(r"[a-z0-9][a-z0-9._-]*")
_OTHER = re.compile(r"[^a-z0-9._-]+")
# names Windows reserves for devices, whatever their extension (`nul.txt` is `nul`)
_DEVICES = frozenset({"con", "prn", "aux", "nul", "conin$", "conout$"}
                     | {f"{p}{i}" for p in ("com", "lpt") for i in (*"0123456789", "¹", "²", "³")})


def _device(name: str) -> bool:
    return name.split(".", 1)[0].rstrip(" ") in _DEVICES


def _kept(identifier: str) -> bool:
    return (
        len(identifier) <= MAX_KEPT and _KEPT.fullmatch(identifier) is not None
        and not identifier.endswith(".") and not _device(identifier)
    )


def file_stem(identifier: str) -> str:
    """A safe, distinct, single-component file name for `identifier` (see the module doc)."""
    if _kept(identifier):
        return identifier
    base = _OTHER.sub("_", identifier.lower()).strip("._")[:MAX_KEPT].rstrip(".") or "id"
    if _device(base):
        base = "_" + base
    digest = hashlib.sha256(identifier.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_CHARS]
    return f"{base}{HASH_SEP}{digest}"


def confined(root: Path, name: str) -> Path:
    """`root / name`, refused (`ValueError`) unless it is a path below `root` (no `..`, no absolute path)."""
    path = root / name
    resolved_root = root.resolve()
    if name in ("", ".") or not path.resolve().is_relative_to(resolved_root) or path.resolve() == resolved_root:
        raise ValueError(f"{name!r} is not a name inside {root}")
    return path
