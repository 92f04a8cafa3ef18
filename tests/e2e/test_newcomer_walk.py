"""A newcomer's walk, repeated: a fresh clone, the README's demo, and every follow-up command the console
prints, each pasted into a fresh bash shell whose PATH does not hold the venv.

The clone is of this checkout's HEAD (`git clone`; a copy when there is no `.git`); it reuses the installed
`.venv` (a link to the one running the tests: no second install), so `make demo` has nothing to install
and runs `.venv/bin/memtrace optimize` (checked with `make -n`). The demo runs as that command with small
overrides (as the other e2e tests keep it cheap), in the clone, with the tests' temporary environment
(tests/conftest.py: caches and stores in temporary folders; MLflow in the clone's `mlflow.db`, as a user
gets it). Then, as the user would:

1. Ctrl-C (SIGINT to the shell's process group) once the first checkpoint is written; the last line says
   how to resume;
2. the resume line, run as printed, finishes the loop and exports the prompts;
3. "Load them with": the exported prompts loaded into a run (its prompts are the exported ones);
4. "Open MLflow with" / "Open it with": the `mlflow ui` command resolves to an executable that accepts its
   options (`--help` added, so no server is left running) and its store holds the printed run;
5. "attribute them with": the saved run attributed.

Each exits 0 from a shell where bare `memtrace` and `mlflow` are "command not found" (asserted first: the
bare commands printed before issue 25 would fail here with exit 127).
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.support.store import fresh_store

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(sys.prefix)  # the installed venv running these tests
SMALL = "dataset.n_conversations=4 loop.max_iterations=2"
TIMEOUT_S = 300


def _inside(entry: str, folder: Path) -> bool:
    try:
        return Path(entry).resolve().is_relative_to(folder.resolve())
    except OSError:
        return False


# a fresh shell is in no venv, no make (`make test` sets MAKELEVEL: a sub-make then prints "Entering directory")
FRESH_SHELL_HAS_NO = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "MLFLOW_TRACKING_URI", "MAKELEVEL", "MAKEFLAGS",
                      "MFLAGS", "MAKEOVERRIDES")


def fresh_shell_env() -> dict[str, str]:
    """The tests' environment (offline, temporary caches) as a fresh shell has it: no venv on PATH, none
    active, no MLflow URI set (the default store: `mlflow.db` in the folder the user is in, the clone)."""
    env = {key: value for key, value in os.environ.items() if key not in FRESH_SHELL_HAS_NO}
    entries = env.get("PATH", os.defpath).split(os.pathsep)
    env["PATH"] = os.pathsep.join(entry for entry in entries if entry and not _inside(entry, VENV))
    return env


def sh(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`command` exactly as printed, through `bash -c` in `cwd`."""
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=fresh_shell_env(), capture_output=True, text=True,
                          timeout=TIMEOUT_S)


def printed(output: str, label: str) -> str:
    """The command printed after `label` (words of the label may be wrapped; the command is never broken:
    on the label's line or the next)."""
    pattern = r"\s+".join(re.escape(word) for word in label.split())
    found = re.search(pattern, output)
    assert found, f"{label!r} not printed:\n{output[-3000:]}"
    return output[found.end():].lstrip().splitlines()[0].strip()


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh clone of this checkout's HEAD with the installed venv linked in, as `make demo` leaves it."""
    stamp = VENV / ".installed"
    if not stamp.is_file() or shutil.which("make") is None:
        pytest.skip("needs the venv installed by `make install` and make")
    dest = tmp_path_factory.mktemp("walk") / "memtrace-loop"
    if (ROOT / ".git").exists():
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        subprocess.run(["git", "clone", "--quiet", "--no-checkout", str(ROOT), str(dest)], check=True)
        subprocess.run(["git", "-C", str(dest), "checkout", "--quiet", head], check=True)
    else:
        shutil.copytree(ROOT, dest, symlinks=True, ignore=shutil.ignore_patterns(
            ".venv", "outputs", "multirun", "mlflow.db", "mlartifacts", ".cache", "__pycache__"))
    (dest / ".venv").symlink_to(VENV, target_is_directory=True)
    fresh_store(dest / "mlflow.db")  # the store a first run creates, already migrated (saves its ~5 s)
    installed = stamp.stat().st_mtime  # the clone's files are newer than the stamp: make would reinstall
    os.utime(dest / "pyproject.toml", (installed - 60, installed - 60))
    return dest


def interrupted_demo(clone: Path, demo: str) -> subprocess.CompletedProcess[str]:
    """The demo, stopped by a Ctrl-C (SIGINT to the shell's process group) after its first checkpoint."""
    shell = subprocess.Popen(["bash", "-c", demo], cwd=clone, env=fresh_shell_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while not list(clone.glob("outputs/optimize/*/checkpoint.json")) and shell.poll() is None:
            assert time.monotonic() < deadline, "no checkpoint was written"
            time.sleep(0.05)
        os.killpg(shell.pid, signal.SIGINT)
        out, err = shell.communicate(timeout=TIMEOUT_S)
    finally:
        if shell.poll() is None:
            os.killpg(shell.pid, signal.SIGKILL)
    return subprocess.CompletedProcess(demo, shell.returncode, out, err)


def test_a_fresh_clone_runs_the_demo_and_every_printed_command_as_printed(clone: Path) -> None:
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    bare = sh("command -v memtrace; command -v mlflow; memtrace --help", clone)
    assert bare.stdout.strip() == "" and bare.returncode == 127, bare  # a bare printed command would fail here

    recipe = subprocess.run(["make", "-n", "demo"], cwd=clone, env=fresh_shell_env(), capture_output=True,
                            text=True, timeout=60)
    assert recipe.returncode == 0 and recipe.stdout.strip() == ".venv/bin/memtrace optimize", recipe  # no install

    stopped = interrupted_demo(clone, f"{recipe.stdout.strip()} {SMALL}")
    assert stopped.returncode == 130, stopped.stderr[-3000:]
    resume = printed(stopped.stderr, "resume with:")
    (run_dir,) = (path.parent for path in clone.glob("outputs/optimize/*/checkpoint.json"))
    assert not json.loads((run_dir / "checkpoint.json").read_text()).get("finished")

    resumed = sh(resume, clone)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "ignoring" not in resumed.stdout + resumed.stderr  # the printed resume typed no other override
    assert json.loads((run_dir / "checkpoint.json").read_text()).get("finished")
    exported = json.loads((run_dir / "best_prompts.json").read_text())

    load = sh(printed(resumed.stdout, "Load them with:"), clone)
    assert load.returncode == 0, load.stderr[-3000:]
    (loaded,) = clone.glob("outputs/run/*/artifacts/prompts.json")
    assert json.loads(loaded.read_text()) == exported["prompts"]  # the run answered with the exported prompts

    client = MlflowClient(tracking_uri=f"sqlite:///{clone / 'mlflow.db'}")
    for output, label in ((resumed.stdout, "Open MLflow with:"), (load.stdout, "Open it with:")):
        ui = printed(output, label)
        assert sh(f"command -v {ui.split()[0]}", clone).returncode == 0, ui
        usage = sh(f"{ui} --help", clone)  # the options parse; no server left running
        assert usage.returncode == 0 and "Usage: mlflow ui" in usage.stdout, usage
        assert ui.endswith("--backend-store-uri sqlite:///mlflow.db")  # the store in the folder the user is in
    for output in (resumed.stdout, load.stdout):
        run_id = re.search(r"MLflow run ([0-9a-f]{32})", output)
        assert run_id and client.get_run(run_id.group(1)).info.status == "FINISHED"

    attributed = sh(printed(load.stdout, "attribute them with:"), clone)
    assert attributed.returncode == 0, attributed.stderr[-3000:]
    blamed = re.search(r"(\d+) of (\d+) scored failures attributed", " ".join(attributed.stdout.split()))
    assert blamed and int(blamed.group(1)) > 0, attributed.stdout[-3000:]

    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (cpu_after.ru_utime + cpu_after.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime)
    print(f"walk: {cpu_s:.1f} s of CPU in the shells' processes")  # measured, not asserted (no timing in tests)
