"""report.html at LoCoMo scale: `python -m memtrace_loop.experiments.lab.bench.report_bench`.

Per system, a sim run's failures attributed (lineage) and its report written: seconds, megabytes and
the largest drawing's nodes, against the targets. Timing lives here, never in a test.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from memtrace_loop.experiments.app_setup import no_lm_history
from memtrace_loop.experiments.lab.bench.common import rich_table, sim_run
from memtrace_loop.memory_systems.registry import SYSTEMS
from memtrace_loop.pipeline.analysis.attribution.lineage import attribute_failures
from memtrace_loop.pipeline.report.data import DEFAULT_MAX_NODES, ReportData
from memtrace_loop.pipeline.report.render import failures_payload
from memtrace_loop.pipeline.report.run_report import report_for_run
from rich.console import Console

TARGET_SECONDS = 5.0
TARGET_MB = 10.0


@dataclass(frozen=True)
class ReportRow:
    system: str
    turns: int
    failures: int
    attribution_s: float
    report_s: float
    megabytes: float
    max_drawn: int


def bench_system(name: str, conversations: int, sessions: int, turns_per_session: int, workers: int) -> ReportRow:
    dataset, result = sim_run(name, conversations, sessions, turns_per_session, workers)
    conversation_by_id = {c.id: c for c in dataset.conversations}
    started = time.perf_counter()
    attributions = attribute_failures(
        result.results, result.graph_by_conversation, conversation_by_id, result.report.excluded_categories
    )
    attribution_s = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        path = report_for_run(result, Path(tmp), attributions=attributions, conversation_by_id=conversation_by_id)
        report_s = time.perf_counter() - started
        size = path.stat().st_size
    data = ReportData("bench", result.report, result.results, result.graph_by_conversation, attributions)
    drawn = [len(f["graph"]["nodes"]) for f in failures_payload(data)["failures"] if f["graph"]]
    return ReportRow(
        name, sum(len(c.turns) for c in dataset.conversations), len(data.failures()), attribution_s, report_s,
        size / 1e6, max(drawn, default=0),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=10)
    parser.add_argument("--sessions", type=int, default=30)
    parser.add_argument("--turns-per-session", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--systems", nargs="*", default=list(SYSTEMS.compared()))
    args = parser.parse_args(argv)
    no_lm_history()  # DSPy's record of every call: nobody reads it (app_setup)
    rows = []
    for name in args.systems:
        row = bench_system(name, args.conversations, args.sessions, args.turns_per_session, args.workers)
        ok = row.report_s < TARGET_SECONDS and row.megabytes < TARGET_MB and row.max_drawn <= DEFAULT_MAX_NODES
        rows.append((row.system, row.turns, row.failures, f"{row.attribution_s:.2f}", f"{row.report_s:.2f}",
                     f"{row.megabytes:.2f}", row.max_drawn, "yes" if ok else "NO"))
    table = rich_table(f"report.html at LoCoMo scale (targets: < {TARGET_SECONDS:g} s, < {TARGET_MB:g} MB, "
                       f"<= {DEFAULT_MAX_NODES} nodes per failure)",
                       ("system", "turns", "failures", "attribute s", "report s", "MB", "max nodes", "ok"), rows,
                       ("system",))
    Console().print(table)
    return 0 if all(row[-1] == "yes" for row in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
