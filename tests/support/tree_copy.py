"""A copy of this checkout for the tests that change the tree (a scratch memory system, a scratch
optimizer, a planted type error) and must not touch the real one.

`copy_checkout(dest)` copies the files git lists (tracked, and untracked but not ignored, so work in
progress is what gets tested) and recreates the symlinks, the `memtrace_loop/` mapping folder's among
them: with the copy's root first on `PYTHONPATH`, `import memtrace_loop` loads the copy, not this
checkout (the editable install's finder comes after the path finder). It copies; it runs nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from tests.support.paths import REPO


def listed_files() -> list[str]:
    """The checkout's files as git lists them (tracked, plus untracked files it does not ignore)."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
                            cwd=REPO, capture_output=True, text=True, check=True).stdout
    return sorted(set(filter(None, listed.split("\0"))))


def copy_checkout(dest: Path, keep: Callable[[str], bool] = lambda name: True) -> Path:
    """`dest` holding a copy of the checkout's files that `keep` accepts (symlinks always kept)."""
    for name in listed_files():
        source, target = REPO / name, dest / name
        if not (source.is_symlink() or (source.is_file() and keep(name))):
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            os.symlink(os.readlink(source), target)
        else:
            shutil.copy2(source, target)
    return dest
