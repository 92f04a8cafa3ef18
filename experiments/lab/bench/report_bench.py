"""report.html at LoCoMo scale: `python -m memtrace_loop.experiments.lab.bench.report_bench`.

Per system, a sim run's failures attributed (lineage) and its report written: seconds, megabytes and
the largest drawing's nodes, against the targets. Timing lives here, never in a test.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from memtrace_loop.experiments.app_setup import no_lm_history
from memtrace_loop.experiments.lab.bench.common import parser, rich_table, sim_run, timed
from memtrace_loop.memory_systems.registry import SYSTEMS
from memtrace_loop.pipeline.analysis.attribution.lineage import attribute_failures
from memtrace_loop.pipeline.report.data import DEFAULT_MAX_NODES, ReportData
from memtrace_loop.pipeline.report.render import failures_payload
from memtrace_loop.pipeline.report.run_report import report_for_run
from rich.console import Console

TARGET_SECONDS = 5.0
TARGET_MB = 10.0


def bench_system(name: str, conversations: int, sessions: int, turns_per_session: int,
                 workers: int) -> tuple[object, ...]:
    """The table's row of system `name`."""
    dataset, result = sim_run(name, conversations, sessions, turns_per_session, workers)
    by_id = {c.id: c for c in dataset.conversations}
    attributions, attribution_s = timed(lambda: attribute_failures(
        result.results, result.graph_by_conversation, by_id, result.report.excluded_categories))
    with tempfile.TemporaryDirectory() as tmp:
        path, report_s = timed(lambda: report_for_run(result, Path(tmp), attributions=attributions,
                                                      conversation_by_id=by_id))
        megabytes = path.stat().st_size / 1e6
    data = ReportData("bench", result.report, result.results, result.graph_by_conversation, attributions)
    drawn = max((len(f["graph"]["nodes"]) for f in failures_payload(data)["failures"] if f["graph"]), default=0)
    ok = report_s < TARGET_SECONDS and megabytes < TARGET_MB and drawn <= DEFAULT_MAX_NODES
    return (name, sum(len(c.turns) for c in dataset.conversations), len(data.failures()), f"{attribution_s:.2f}",
            f"{report_s:.2f}", f"{megabytes:.2f}", drawn, "yes" if ok else "NO")


def main(argv: list[str] | None = None) -> int:
    cli = parser(__doc__, workers=2)
    cli.add_argument("--systems", nargs="*", default=list(SYSTEMS.compared()))
    args = cli.parse_args(argv)
    no_lm_history()  # DSPy's record of every call: nobody reads it (app_setup)
    rows = [bench_system(name, args.conversations, args.sessions, args.turns_per_session, args.workers)
            for name in args.systems]
    Console().print(rich_table(
        f"report.html at LoCoMo scale (targets: < {TARGET_SECONDS:g} s, < {TARGET_MB:g} MB, "
        f"<= {DEFAULT_MAX_NODES} nodes per failure)",
        ("system", "turns", "failures", "attribute s", "report s", "MB", "max nodes", "ok"), rows, ("system",)))
    return 0 if all(row[-1] == "yes" for row in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
