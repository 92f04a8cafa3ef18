"""Parse failures of a real small model with and without JSON-schema constrained output (`make bench-local`).

Runs `memtrace run lm=local` (SmolLM2-135M-Instruct, llama.cpp) per system (`--systems`, default
`mem0,mem0ai`) and `lm.task.structured_output` setting (`--settings`, default `off,json_schema`) on the
tiny LoCoMo fixture (extra arguments are Hydra overrides for every run) and prints a table of, per run, the
LM operations of its graphs, failed ones and parse failures (`operation_failures`), and a JSON line.
`max_tokens` defaults to `MAX_TOKENS` per system. It tunes neither the model nor the prompts.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from memtrace_loop.experiments.lab.bench.common import rich_table, timed
from memtrace_loop.memory_systems.mem0ai.schemas import is_parse_failure
from memtrace_loop.pipeline.core.graph_io import load_graph
from memtrace_loop.pipeline.tracking.run_logging import ARTIFACTS_DIR, GRAPHS_DIR
from rich.console import Console

FIXTURE = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "locomo_tiny.json"
SETTINGS = ("off", "json_schema")
SYSTEMS = ("mem0", "mem0ai")
# max_tokens per system unless given: mem0's update reply (pretty-printed like its prompt's example,
# one action ~100 tokens for this model) is cut at 64 whatever the output constraint
MAX_TOKENS = {"mem0": 64, "mem0ai": 128}
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

# Plain text (no markup, highlighting or wrapping): the JSON line is read by scripts.
STDOUT = Console(markup=False, highlight=False, soft_wrap=True, width=120)
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
                parse_failed += PARSE_ERROR in (op.error or "") or is_parse_failure(op.error)
    return OperationFailures(operations, failed, parse_failed)


def default_overrides(extra: list[str], system: str = "mem0") -> list[str]:
    """lm=local, one worker, the system's `MAX_TOKENS` and (unless `extra` picks a dataset) the tiny fixture."""
    chosen = {arg.split("=", 1)[0] for arg in extra}
    data = [] if "dataset" in chosen else ["dataset=locomo", f"dataset.path={FIXTURE}"]
    base = {"lm": "lm=local", "workers": "workers=1",
            "lm.task.max_tokens": f"lm.task.max_tokens={MAX_TOKENS.get(system, 64)}"}
    return [*(arg for key, arg in base.items() if key not in chosen), *data]


def run_setting(system: str, setting: str, extra: list[str], root: Path) -> tuple[OperationFailures, float, int]:
    out = root / f"{system}-{setting}"
    overrides = [*default_overrides(extra, system), *extra, f"memory_system={system}",
                 f"lm.task.structured_output={setting}", f"hydra.run.dir={out}",
                 f"cache_dir={root / f'cache-{system}-{setting}'}", f"tracking.uri=sqlite:///{root / 'mlflow.db'}"]
    done, elapsed = timed(lambda: subprocess.run([sys.executable, "-m", "memtrace_loop.experiments.cli", "run",
                                                  *overrides], capture_output=True, text=True, check=False))
    if done.returncode != 0:
        STDERR.print(f"[{system} {setting}] exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
    return operation_failures(out), elapsed, done.returncode


def _option(argv: list[str], flag: str, default: tuple[str, ...], alias: str | None = None) -> tuple[str, ...]:
    """The comma-separated values of `--<flag>=a,b` (or of the Hydra override `<alias>=a`), removed from
    `argv`; `default` when absent."""
    chosen = default
    for arg in list(argv):
        key, _, value = arg.partition("=")
        if key in (f"--{flag}", alias):
            chosen = tuple(value.split(","))
            argv.remove(arg)
    return chosen


def main(argv: list[str]) -> int:
    settings = _option(argv, "settings", SETTINGS)
    systems = _option(argv, "systems", SYSTEMS, alias="memory_system")
    root = Path(tempfile.mkdtemp(prefix="memtrace-local-bench-"))
    STDERR.print(f"runs in {root}")
    rows, counts_by_run = [], {}
    for system in systems:
        # the `lm.task.max_tokens` the last override sets (what the run uses)
        tokens = [a.split("=", 1)[1] for a in [*default_overrides(argv, system), *argv]
                  if a.startswith("lm.task.max_tokens=")][-1]
        for setting in settings:
            c, elapsed, code = run_setting(system, setting, argv, root)
            STDERR.print(f"[{system} {setting}] {c} in {elapsed:.0f} s, exit {code}")
            rows.append((system, setting, tokens, c.operations, c.failed, c.parse_failed, f"{c.rate:.1%}",
                         f"{elapsed:.0f}", code))
            counts_by_run[f"{system}/{setting}"] = {"operations": c.operations, "failed": c.failed,
                                                    "parse_failed": c.parse_failed}
    STDOUT.print(rich_table("parse failures of the local model", ("system", "structured_output", "max_tok", "ops",
                                                                  "failed", "parse", "rate", "time s", "exit"),
                            rows, ("system", "structured_output")))
    STDOUT.print(json.dumps(counts_by_run))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
