"""mypy resolves our own `memtrace_loop.<top>...` imports to our source files, so a type error at a
seam between two modules fails the check (before the mapping folder `memtrace_loop/`, every
cross-module type was `Any` and both errors planted here passed "mypy clean").

A copy of the tree (the git-tracked Python files, pyproject.toml and the mapping folder's symlinks) gets
one planted module beside `pipeline/core/graph.py` that imports `ExecutionGraph` through the prefix,
calls it with a wrong argument and calls a method it does not have; mypy checks that module (and so
`graph.py` and what it imports, a few files: seconds, not the whole tree). That the unplanted tree is
clean is `make lint`'s mypy run, which CI runs before the tests. Also: importing from the repository
root (pytest's `pythonpath = ["."]`) goes through the mapping folder without loading any file twice
under two names.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO
from tests.support.tree_copy import copy_checkout

pytestmark = pytest.mark.slow

PLANTED = '''"""A module that uses another module's type wrongly (planted by the test)."""

from memtrace_loop.pipeline.core.graph import ExecutionGraph


def _planted_seam_errors() -> None:
    graph = ExecutionGraph(12345)
    graph.no_such_method()
'''


def test_a_planted_cross_module_error_fails(tmp_path: Path) -> None:
    tree = copy_checkout(tmp_path, keep=lambda name: name.endswith((".py", ".toml", ".typed")))
    (tree / "pipeline" / "core" / "planted_seam.py").write_text(PLANTED)
    command = [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "mypy-cache"), "--no-error-summary",
               "memtrace_loop/pipeline/core/planted_seam.py"]
    done = subprocess.run(command, cwd=tree, capture_output=True, text=True, check=False, timeout=600)
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert 'Argument 1 to "ExecutionGraph" has incompatible type "int"' in out, out
    assert '"ExecutionGraph" has no attribute "no_such_method"' in out, out


def test_imports_from_the_repo_root_load_each_file_once() -> None:
    probe = (
        "import os, sys\n"
        "import memtrace_loop, memtrace_loop.experiments.report, memtrace_loop.pipeline.loop.runner\n"
        "names = {}\n"
        "for name, module in list(sys.modules.items()):\n"
        "    path = getattr(module, '__file__', None)\n"
        "    if path and name.startswith('memtrace_loop'):\n"
        "        names.setdefault(os.path.realpath(path), []).append(name)\n"
        "assert all(len(v) == 1 for v in names.values()), [v for v in names.values() if len(v) > 1]\n"
        "print(os.path.dirname(memtrace_loop.__file__), len(names))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    folder, count = done.stdout.split()
    assert Path(folder) == REPO / "memtrace_loop" and int(count) > 50
