"""Every command `memtrace run` prints for the user to paste ("Open it with: ...mlflow ui ...", "attribute
them with: ...memtrace attribute ...") runs as printed from a fresh shell in the user's folder whose PATH
does not hold the venv (after `make demo` it is not activated): bare `memtrace`/`mlflow` gave "command not
found". The program-name rule itself: tests/unit/test_command_line.py."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("mlflow_db")  # sqlite:///mlflow.db in the user's folder, migrated

BIN = Path(sys.executable).parent
PRINTED = re.compile(r"\bwith:\s+(\S*\b(?:memtrace|mlflow) .*)$")  # "... with: <command>" (a command: one line)
SAFE = ("LITELLM_LOCAL_MODEL_COST_MAP", "MLFLOW_DISABLE_TELEMETRY", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE",
        "MEM0_TELEMETRY", "MEM0_DIR", "MEMTRACE_MAX_TRACES", "DSPY_CACHEDIR", "HF_HOME", "HF_DATASETS_CACHE")


def _fresh_env(tmp_path: Path) -> dict[str, str]:
    """A new login's environment: a PATH without the venv's bin, HOME, and the suite's offline settings."""
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p and Path(p).resolve() != BIN.resolve())
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {"PATH": path, "HOME": str(home), "LANG": "C.UTF-8", "COLUMNS": "80",
            **{name: os.environ[name] for name in SAFE if name in os.environ}}


def _bash(line: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
                          check=False)


@pytest.mark.slow  # a small sim run, then its printed `attribute` command (two app processes)
def test_every_printed_command_runs_as_printed_from_a_fresh_shell_without_the_venv(tmp_path):
    env = _fresh_env(tmp_path)
    assert _bash("command -v memtrace mlflow", tmp_path, env).stdout == ""  # neither is on this PATH
    done = subprocess.run([str(BIN / "memtrace"), "run", "dataset.n_conversations=1"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    stdout = re.sub(r"with:\n", "with: ", done.stdout)  # at 80 columns a long command starts a line of its own
    commands = [m.group(1) for m in map(PRINTED.search, stdout.splitlines()) if m]
    programs = {Path(shlex.split(c)[0]).name: c for c in commands}
    assert set(programs) == {"memtrace", "mlflow"}, done.stdout[-3000:]  # "Open it with", "attribute them with"
    mlflow = shlex.split(programs["mlflow"])[0]
    found = _bash(f"command -v {shlex.quote(mlflow)} && {shlex.quote(mlflow)} --version", tmp_path, env)
    assert found.returncode == 0 and "version" in found.stdout, found.stderr[-2000:]  # no server started
    for command in (c for c in commands if Path(shlex.split(c)[0]).name == "memtrace"):
        ran = _bash(command, tmp_path, env)
        assert "command not found" not in ran.stderr and ran.returncode == 0, (command, ran.stderr[-3000:])
