"""What the apps print reads in an 80-column log, and Hydra's job log holds the run.

Every app runs as a user pipes it into a file: stdout not a terminal, COLUMNS unset (rich then lays out
at 80 columns). No line is longer than 80 columns unless it is one unbreakable thing (a path, or a
`memtrace ...`/`mlflow ...` command to copy), no cell is cut ('…'), and the values the summaries show
appear whole. The `<app>.log` of each run's output folder holds its log lines, what it printed, and
the one-line error of a failed command (secrets masked)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.store import fresh_store

MEMTRACE = str(Path(sys.executable).parent / "memtrace")
LAB_COMPARE = (sys.executable, "-m", "memtrace_loop.experiments.lab.compare")  # the lab's comparison
WIDTH = 80
SECRET = "sk-live-abcdef1234567890"


def unbreakable(line: str) -> bool:
    """A line that may be longer than the width: a single word (a path), or a command to copy."""
    stripped = line.strip()
    return len(stripped.split()) == 1 or bool(re.match(r"(\S*/)?(memtrace|mlflow) [a-z]", stripped))  # a path: off PATH


def too_wide(output: str) -> list[str]:
    return [line for line in output.splitlines() if len(line) > WIDTH and not unbreakable(line)]


class Session:
    """One directory a user works in, with the environment of a log file (no terminal, no COLUMNS)."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        if not (cwd / "mlflow.db").exists():
            fresh_store(cwd / "mlflow.db")  # migrated already (a copy of the tests' template)
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        self.env = env | {"MLFLOW_TRACKING_URI": f"sqlite:///{cwd}/mlflow.db",
                          "MEMTRACE_CACHE_DIR": str(cwd / "cache"), "MEMTRACE_TEST_KEY": SECRET}

    def memtrace(
        self, *args: str, ok: bool = True, program: tuple[str, ...] = (MEMTRACE,)
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([*program, *args], cwd=self.cwd, env=self.env, capture_output=True, text=True,
                              timeout=600, check=False)
        if ok:
            assert done.returncode == 0, done.stderr[-3000:]
        return done

    def latest(self, app: str) -> Path:
        return max((self.cwd / "outputs" / app).iterdir())


@pytest.fixture(scope="module")
def session(tmp_path_factory) -> Session:
    return Session(tmp_path_factory.mktemp("log80"))


@pytest.fixture(scope="module")
def run_output(session):
    done = session.memtrace("run", "dataset.n_conversations=1", "tracking.traces=false")
    return done.stdout, session.latest("run")


@pytest.fixture(scope="module")
def optimize_output(session):
    done = session.memtrace("optimize", "dataset.n_conversations=3", "loop.max_iterations=1")
    return done.stdout, session.latest("optimize")


@pytest.mark.slow  # a real `memtrace run` (~10 s)
def test_run_prints_for_an_80_column_log(run_output):
    stdout, out_dir = run_output
    assert not too_wide(stdout), too_wide(stdout)
    assert "…" not in stdout
    record = json.loads((out_dir / "run_record.json").read_text())
    accuracy = record["metrics"]["eval/judge_accuracy"]
    assert f"{100 * accuracy:.1f}" in stdout  # the overall judge accuracy, whole
    blame = json.loads((out_dir / "artifacts" / "blame.json").read_text())
    for row in blame:  # every blamed stage with its error types, never cut
        assert f"stage {row['stage']}" in stdout or f"│ {row['stage']} " in stdout
        for key, count in row.items():
            if key.startswith("n_"):
                assert f"{key.removeprefix('n_').removesuffix('Error')} {count}" in stdout
    command = f"memtrace attribute run_dir={out_dir}"  # a command to copy, never broken
    assert any(line.endswith(command) for line in stdout.splitlines())


@pytest.mark.slow  # attribute, report and stages on the saved run
def test_attribute_report_and_stages_print_for_an_80_column_log(session, run_output):
    _, out_dir = run_output
    for args in (("attribute", f"run_dir={out_dir}"), ("report", f"run_dir={out_dir}"),
                 ("stages", "memory_system=evermemos")):
        stdout = session.memtrace(*args).stdout
        assert not too_wide(stdout), (args, too_wide(stdout))
        assert "…" not in stdout, args
    assert "detect_boundary" in stdout and "check_sufficiency" in stdout  # the stages table, last


@pytest.mark.slow  # one optimization iteration, then export and compare of its MLflow run (~30 s)
def test_optimize_export_and_compare_print_for_an_80_column_log(session, optimize_output):
    stdout, out_dir = optimize_output
    assert not too_wide(stdout), too_wide(stdout)
    assert "…" not in stdout
    assert "test final: " in stdout or "test final" in stdout
    checkpoint = json.loads((out_dir / "checkpoint.json").read_text())
    assert checkpoint  # the loop finished and wrote it
    run_id = re.search(r"MLflow run (\w{32})", stdout).group(1)
    export = ("export", f"run_id={run_id}", f"out={session.cwd}/prompts.yaml")
    for program, args in (((MEMTRACE,), export), (LAB_COMPARE, ("tracking.experiment=memtrace",))):
        printed = session.memtrace(*args, program=program).stdout
        assert not too_wide(printed), (args, too_wide(printed))
        assert "…" not in printed, args
        if program == LAB_COMPARE:
            assert "optimizer attribution" in printed or "│ attribution" in printed


@pytest.mark.slow
def test_the_job_log_holds_the_run_log_lines_and_what_was_printed(run_output):
    _, out_dir = run_output
    log = (out_dir / "run.log").read_text()
    assert "[memtrace.run][INFO] - running mem0 on" in log
    assert "judge acc %" in log and "Saved cases and graphs in" in log  # the printed summary, as plain text
    assert "\x1b[" not in log  # no colour codes
    assert not re.search(r"(?m)^(ingest|answer) +━", log)  # no progress bars


@pytest.mark.slow
def test_the_job_log_of_optimize_holds_its_iterations(optimize_output):
    _, out_dir = optimize_output
    log = (out_dir / "optimize.log").read_text()
    assert "iteration 1: dev" in log and "accepted candidates" in log


@pytest.mark.slow  # seconds each (measured): out of `make test-fast`
def test_a_failed_command_leaves_its_error_in_the_job_log_with_secrets_masked(session, tmp_path):
    out = tmp_path / "failed"
    # (a key as the bad value itself is refused before Hydra: tests/apps/test_secret_overrides_app.py)
    done = session.memtrace("run", "lm=openai", "lm.task.api_key_env=MEMTRACE_TEST_KEY", "memory_system.top_k=ten",
                            f"tracking.uri=http://user:{SECRET}@127.0.0.1:9", f"hydra.run.dir={out}", ok=False)
    assert done.returncode == 2
    log = (out / "run.log").read_text()
    assert "[ERROR] - memtrace run: memory_system.top_k: expected an integer" in log
    assert "Traceback" in log  # at DEBUG, in the file only
    assert "Traceback" not in done.stdout + done.stderr
    assert done.stderr.count("memtrace run: memory_system.top_k") == 1  # said once, not twice
    assert SECRET not in log and SECRET not in done.stdout + done.stderr


@pytest.mark.slow  # seconds each (measured): out of `make test-fast`
def test_every_job_of_a_multirun_has_its_log(session, tmp_path):
    sweep = tmp_path / "sweep"
    session.memtrace("stages", "-m", "memory_system=rag,mem0", f"hydra.sweep.dir={sweep}")
    logs = sorted(sweep.glob("*/stages.log"))
    assert len(logs) == 2
    for log, stage in zip(logs, ("chunk", "extract"), strict=True):
        assert stage in log.read_text()
