"""How fast `memtrace` starts: `python -m memtrace_loop.experiments.lab.bench.startup_bench`.

Each command runs in a fresh subprocess (this interpreter, `-m memtrace_loop.experiments.cli`) in a
scratch folder with its own MLflow store and DSPy cache, twice: once under `python -X importtime` (the
import time: the sum of the top-level imports' cumulative times, and which of dspy, mlflow, litellm it
loaded) and once plain (the wall time, start to exit). The commands: `memtrace --help`,
`memtrace run --help`, `memtrace optimize --cfg job`, `memtrace report --help`,
`memtrace report run_dir=<the finished run>` and `memtrace run` on the default sim world, whose timed
run wraps `pipeline.tracking.traces.log_question_traces` to measure the share of its wall time spent
logging the question traces to MLflow. The commands run the tree first on `PYTHONPATH` (run this file by
its path with an older commit's tree there to compare: it imports nothing of the lab). Prints one Markdown
table (rich). Timing lives here,
never in a test; the import fences themselves are tests/apps/test_startup.py. It changes nothing outside its
scratch folder.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

HEAVY = ("dspy", "mlflow", "litellm")
TRACES_MARK = "memtrace-bench-traces-s="
# the `run` whose wall time is measured: the trace writer timed, the command run as `memtrace` runs it
TIMED_RUN = f"""
import sys, time
from memtrace_loop.pipeline.tracking import traces
original, spent = traces.log_question_traces, [0.0]
def timed(*args, **kwargs):
    started = time.perf_counter()
    try:
        return original(*args, **kwargs)
    finally:
        spent[0] += time.perf_counter() - started
traces.log_question_traces = timed
from memtrace_loop.experiments.cli import main
try:
    code = main(sys.argv[1:])
finally:
    sys.stderr.write("{TRACES_MARK}%f\\n" % spent[0])
raise SystemExit(code)
"""
_IMPORT_LINE = re.compile(r"^import time:\s+(\d+)\s+\|\s+(\d+)\s+\|( *)(\S+)\s*$")


@dataclass(frozen=True)
class Timing:
    """One command: import seconds, wall seconds, heavy modules loaded, seconds logging traces (run only)."""

    command: str
    import_s: float
    wall_s: float
    heavy: tuple[str, ...]
    traces_s: float | None = None


def import_profile(stderr: str) -> tuple[float, tuple[str, ...]]:
    """(the total import seconds, the heavy top-level packages loaded) of `-X importtime` output."""
    total_us, loaded = 0, set()
    for line in stderr.splitlines():
        match = _IMPORT_LINE.match(line)
        if match is None:
            continue
        cumulative, indent, name = int(match.group(2)), match.group(3), match.group(4)
        if len(indent) <= 1:  # a top-level import (not one nested in another's)
            total_us += cumulative
        if name.split(".")[0] in HEAVY:
            loaded.add(name.split(".")[0])
    return total_us / 1e6, tuple(h for h in HEAVY if h in loaded)


def _call(argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=dict(env), capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[-3:])} exited {done.returncode}: {done.stderr[-2000:]}")
    return wall, done.stderr


def measure(args: Sequence[str], cwd: Path, env: Mapping[str, str]) -> Timing:
    """`memtrace <args>` once under -X importtime and once timed (the run: with its trace writer timed)."""
    _, profile = _call([sys.executable, "-X", "importtime", "-m", "memtrace_loop.experiments.cli", *args], cwd, env)
    import_s, heavy = import_profile(profile)
    is_run = list(args) == ["run"]
    command = [sys.executable, "-c", TIMED_RUN, *args] if is_run else \
        [sys.executable, "-m", "memtrace_loop.experiments.cli", *args]
    wall, stderr = _call(command, cwd, env)
    traces = None
    if is_run:
        traces = max(float(line.split("=", 1)[1]) for line in stderr.splitlines() if line.startswith(TRACES_MARK))
    return Timing(" ".join(("memtrace", *args)), import_s, wall, heavy, traces)


def _scratch_env(root: Path) -> dict[str, str]:
    """The environment of every command: the scratch stores, offline; the MLflow store's tables created
    before any timing (a fresh SQLite store migrates once)."""
    env = dict(os.environ)
    env.update({"MLFLOW_TRACKING_URI": f"sqlite:///{root}/mlflow.db", "MEMTRACE_CACHE_DIR": str(root / "cache"),
                "DSPY_CACHEDIR": str(root / "dspy"), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                "MLFLOW_DISABLE_TELEMETRY": "true", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                "MEM0_TELEMETRY": "False"})
    _call([sys.executable, "-c", "import mlflow; mlflow.MlflowClient().search_experiments()"], root, env)
    return env


def bench(root: Path) -> list[Timing]:
    env = _scratch_env(root)
    timings = [measure(args, root, env) for args in (["--help"], ["run", "--help"], ["optimize", "--cfg", "job"],
                                                     ["report", "--help"])]
    run = measure(["run"], root, env)
    timings.append(measure(["report", f"run_dir={max((root / 'outputs' / 'run').iterdir())}"], root, env))
    timings.append(run)
    return timings


def table(timings: Sequence[Timing]) -> str:
    """The Markdown table: command, import s, wall s, heavy modules imported, trace logging's share."""
    def row(t: Timing) -> tuple[str, ...]:
        share = "" if t.traces_s is None else f"{t.traces_s:.1f} s ({t.traces_s / t.wall_s:.0%})"
        command = re.sub(r"run_dir=\S+", "run_dir=<finished run>", t.command)
        return f"`{command}`", f"{t.import_s:.2f}", f"{t.wall_s:.1f}", ", ".join(t.heavy) or "none", share

    header = ("command", "import s", "wall s", "dspy / mlflow / litellm imported", "logging traces to MLflow")
    return "\n".join([f"| {' | '.join(header)} |", "|---|---:|---:|---|---|",
                      *(f"| {' | '.join(row(t))} |" for t in timings)])


def main(argv: Sequence[str] | None = None) -> int:
    argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0]).parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="startup-bench-") as scratch:
        timings = bench(Path(scratch))
    Console(soft_wrap=True).print(table(timings), markup=False, highlight=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
