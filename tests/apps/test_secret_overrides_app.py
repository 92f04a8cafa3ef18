"""A key passed in an override of any name is refused before Hydra writes anything: exit 2, one line
naming the override's key, and the key itself nowhere — not on stdout/stderr, not in any file under
the output folder (`.hydra/` included), the working directory or the temporary directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

KEY = "sk-proj-R4canary" + "Zq8Xw2Lm5Np7Tv3Kd9Hf6Gb1" * 2  # a distinctive key, shaped as OpenAI's
PLAIN = "plainkeyvaluewithoutshape"  # no key shape: only its place in OPENAI_API_KEY makes it a secret

NAMES = ["lm.task.key", "+openai_key", "+access_key", "hydra.job.env_set.X", "+lm.task.api_key",
         "lm.taks.model", "+lm.task.headers.X-Custom"]  # (a misspelt key: Hydra would suggest and echo it)


def _memtrace(tmp_path: Path, *args: str, module: str | None = None, key_env: str = "") -> subprocess.CompletedProcess:
    temp = tmp_path / "tmp"
    temp.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(temp), "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlflow.db",
           "OPENAI_API_KEY": key_env}
    app = f"from {module} import main; main()"  # the app's own `main` (guarded), as `python -m` would start it
    command = [sys.executable, "-c", app] if module else [str(Path(sys.executable).parent / "memtrace"), "run"]
    return subprocess.run([*command, *args, f"hydra.run.dir={tmp_path}/out"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def _files_holding(root: Path, value: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and value.encode() in p.read_bytes()]


@pytest.mark.parametrize(("value", "key_env"), [(KEY, ""), (PLAIN, PLAIN)], ids=["key-shaped", "key-variable"])
@pytest.mark.parametrize("name", NAMES)
def test_a_key_in_any_override_is_refused_and_written_nowhere(tmp_path, name, value, key_env):
    done = _memtrace(tmp_path, "workers=1", f"{name}={value}", key_env=key_env)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and repr(name.lstrip("+")) in lines[0] and "refused" in lines[0], lines
    assert value not in done.stdout + done.stderr
    assert _files_holding(tmp_path, value) == []
    assert not (tmp_path / "out").exists()  # Hydra never started


@pytest.mark.slow  # imports every app (seconds)
def test_an_app_started_without_the_dispatcher_refuses_too(tmp_path):
    done = _memtrace(tmp_path, f"+access_key={KEY}", module="memtrace_loop.experiments.optimize")
    assert done.returncode == 2 and "'access_key'" in done.stderr and KEY not in done.stdout + done.stderr
    assert _files_holding(tmp_path, KEY) == []


@pytest.mark.slow  # imports every app and composes (seconds)
def test_hydras_error_about_a_misspelt_key_does_not_echo_its_value(tmp_path):
    value = "ordinaryvalue42"  # no key shape, no key variable: it passes the guard and reaches Hydra
    done = _memtrace(tmp_path, f"lm.task.modle={value}")
    assert done.returncode != 0 and "lm.task.modle" in done.stderr, done.stderr[-2000:]
    assert value not in done.stdout + done.stderr
