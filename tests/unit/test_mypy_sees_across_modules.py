"""mypy resolves our own `memtrace_loop.<top>...` imports to our source files, so a type error at a
seam between two modules fails the check (before the mapping folder `memtrace_loop/`, every
cross-module type was `Any` and both errors planted here passed "mypy clean").

A copy of the tree (the git-tracked Python files, pyproject.toml and the mapping folder's symlinks) is
checked as it is, then with a wrong constructor argument and a call of a method that does not exist
planted in `pipeline/loop/runner.py`. The runs share a cache kept under the repository's
`.mypy_cache/` (ignored by git), so only the first run of a checkout pays for the whole tree. Also:
importing from the repository root (pytest's `pythonpath = ["."]`) goes through the mapping folder
without loading any file twice under two names.
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

CACHE = REPO / ".mypy_cache" / "planted-copy"
PLANTED = '''

def _planted_seam_errors() -> None:
    graph = ExecutionGraph(12345)
    graph.no_such_method()
'''


def run_mypy(tree: Path, *targets: str) -> subprocess.CompletedProcess[str]:
    CACHE.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "mypy", "--cache-dir", str(CACHE), "--no-error-summary", *targets]
    return subprocess.run(command, cwd=tree, capture_output=True, text=True, check=False, timeout=1200)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The files mypy reads (Python sources, pyproject.toml, the mapping's symlinks)."""
    return copy_checkout(tmp_path_factory.mktemp("tree"), keep=lambda name: name.endswith((".py", ".toml", ".typed")))


def test_the_unplanted_copy_passes(tree: Path) -> None:
    done = run_mypy(tree)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_planted_cross_module_error_fails(tree: Path) -> None:
    runner = tree / "pipeline" / "loop" / "runner.py"
    source = runner.read_text()
    assert "ExecutionGraph" in source  # imported from pipeline.core.graph, another module
    runner.write_text(source + PLANTED)
    try:
        done = run_mypy(tree, "memtrace_loop/pipeline/loop/runner.py")
    finally:
        runner.write_text(source)
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
