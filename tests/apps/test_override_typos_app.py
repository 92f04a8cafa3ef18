"""A misspelt override, as a user types it into the installed `memtrace` console script: exit 2, one line on
stderr naming the closest valid key or group option, the override's value nowhere on the console, and
nothing written (Hydra never started: no output folder, no `.hydra/`). Hydra's own answer was a 7-line
struct error, exit 1, advising `+key` (and, after that advice, a run with the misspelt key appended)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

VALUE = "7131"  # a value seen nowhere else on the console

# (app, misspelt override, what the one line must suggest): every app the dispatcher starts, the
# misspellings of the issue (a key, a group name, a nested key, a group option, an appended key)
TYPOS = [
    ("run", f"memory_system.top_kk={VALUE}", "memory_system.top_k"),
    ("optimize", "memory_sytem=rag", "memory_system"),
    ("run", f"lm.task.max_tokenz={VALUE}", "lm.task.max_tokens"),
    ("optimize", "optimizer=atribution", "optimizer=attribution"),
    ("optimize", f"+memory_system.top_kk={VALUE}", "memory_system.top_k"),
    ("upload", "run_dri=outputs/run/x", "run_dir"),  # the app that wore no guard
]  # every app and every kind of typo, in-process: tests/apps/test_override_errors.py


def _value(override: str) -> str:
    return override.partition("=")[2]


@pytest.fixture(scope="module")
def typed(tmp_path_factory) -> dict[tuple[str, str], tuple[subprocess.CompletedProcess, Path]]:
    """Every typo of `TYPOS` typed at once (the processes run side by side: each imports the apps)."""
    memtrace = Path(sys.executable).parent / "memtrace"
    started = {}
    for app, override, _ in TYPOS:
        folder = tmp_path_factory.mktemp(app)
        env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{folder}/mlflow.db"}
        process = subprocess.Popen([str(memtrace), app, override, f"hydra.run.dir={folder}/out"], cwd=folder, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        started[(app, override)] = (process, folder)
    done = {}
    for (app, override), (process, folder) in started.items():
        out, err = process.communicate(timeout=300)
        done[(app, override)] = (subprocess.CompletedProcess(process.args, process.returncode, out, err), folder)
    return done


@pytest.mark.slow  # six processes, each importing the apps (side by side)
@pytest.mark.parametrize(("app", "override", "suggestion"), TYPOS, ids=[f"{a}:{o}" for a, o, _ in TYPOS])
def test_a_misspelt_override_is_one_line_with_a_did_you_mean_and_exit_2(typed, app, override, suggestion):
    done, folder = typed[(app, override)]
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith(f"memtrace {app}: ") and f"did you mean {suggestion}" in line, line
    assert "+" + override.lstrip("+") not in line and "To append" not in line  # never Hydra's advice
    assert f"={_value(override)}" not in done.stdout + done.stderr  # the value is never echoed
    if _value(override) != "rag":  # a group option's misspelt value: not shown either
        assert _value(override) not in line
    assert not (folder / "out").exists()  # Hydra never started: no `.hydra/` holding the override
    assert not list(folder.rglob(".hydra"))
