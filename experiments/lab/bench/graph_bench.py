"""The execution graph at LoCoMo scale: `python -m memtrace_loop.experiments.lab.bench.graph_bench`.

Per system, the graphs of a sim run (10 conversations of ~600 turns by default): microseconds per
operation re-recorded through a fresh `Tracer`, size, JSON save + load, ancestor queries from each
answer, ExecNetwork export and import (best of `REPEATS`), and the growth of JSON bytes per turn from
a quarter-length run; one row each, judged against the `TARGET_*`s. No LLM time is measured.
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from memtrace_loop.experiments.app_setup import no_lm_history
from memtrace_loop.experiments.lab.bench.common import parser, rich_table, sim_run, timed
from memtrace_loop.memory_systems.registry import SYSTEMS
from memtrace_loop.pipeline.core.conventions import Namespace, is_in, prefix
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.graph_io import graph_to_json, load_graph, save_graph
from memtrace_loop.pipeline.core.run_folder import RunFolder
from memtrace_loop.pipeline.core.tracing import Tracer
from memtrace_loop.pipeline.interop.exec_network import document_bytes, from_exec_network, to_exec_network
from rich.console import Console
from rich.table import Table

TARGET_US_PER_OP = 20.0
TARGET_ANCESTORS_MS = 5.0
TARGET_SAVE_LOAD_S = 2.0
TARGET_EXPORT_S = 2.0
REPEATS = 3  # the ExecNetwork timings take the best of this many


@dataclass(frozen=True)
class BenchRow:
    system: str
    turns: int
    operations: int
    variables: int
    edges: int
    json_bytes: int
    us_per_op: float
    save_s: float
    load_s: float
    ancestors_mean_ms: float
    ancestors_max_ms: float
    run_s: float
    export_s: float
    import_s: float
    growth: float  # JSON bytes per turn at full length / at a quarter of the length (1 = linear, 4 = quadratic)


def replay_us_per_op(graphs: Sequence[ExecutionGraph]) -> float:
    """Re-record every variable and operation through a fresh Tracer; microseconds per operation."""
    total_ops = 0
    elapsed = 0.0
    for graph in graphs:
        variables = list(graph.variables())
        operations = list(graph.operations())
        producer_seq = {}
        for op in operations:
            for out in op.outputs:
                producer_seq[out] = op.seq
        # interleave as recorded: a variable is added just before the operation that produces it
        pending: dict[int, list[Any]] = {op.seq: [] for op in operations}
        free: list[Any] = []
        for var in variables:
            (pending[producer_seq[var.id]] if var.id in producer_seq else free).append(var)
        fresh = Tracer(ExecutionGraph(graph.graph_id))
        gc.collect()  # steady state: do not bill this graph for the garbage the run before it left
        started = time.perf_counter()
        for var in free:
            fresh.variable(var.name, var.kind, var.value, var.meta)
        for op in operations:
            for var in pending[op.seq]:
                fresh.variable(var.name, var.kind, var.value, var.meta)
            fresh.operation(
                op.name, op.stage, op.kind, op.inputs, op.outputs, op.prompt, op.status, op.error, op.usage, op.meta
            )
        elapsed += time.perf_counter() - started
        total_ops += len(operations)
    return 1e6 * elapsed / max(total_ops, 1)


def build_graphs(name: str, conversations: int, sessions: int, turns_per_session: int,
                 workers: int) -> tuple[list[ExecutionGraph], int, float]:
    """The graphs of a sim run (answers and judge included), the number of turns, and the run time."""
    (dataset, result), run_s = timed(lambda: sim_run(name, conversations, sessions, turns_per_session, workers))
    return list(result.graph_by_conversation.values()), sum(len(c.turns) for c in dataset.conversations), run_s


def json_bytes_per_turn(graphs: Sequence[ExecutionGraph], turns: int) -> float:
    return sum(len(graph_to_json(g).encode()) for g in graphs) / max(turns, 1)


def best(work: Callable[[], object]) -> float:
    """The fastest of `REPEATS` runs of `work`, as timeit does: the machine's noise is not the code's cost."""
    times = []
    for _ in range(REPEATS):
        gc.collect()
        times.append(timed(work)[1])
    return min(times)


def bench_system(name: str, conversations: int, sessions: int, turns_per_session: int, workers: int) -> BenchRow:
    graphs, turns, run_s = build_graphs(name, conversations, sessions, turns_per_session, workers)
    small, small_turns, _ = build_graphs(name, conversations, max(sessions // 4, 1), turns_per_session, workers)
    growth = json_bytes_per_turn(graphs, turns) / json_bytes_per_turn(small, small_turns)
    us_per_op = replay_us_per_op(graphs)
    save_s = load_s = 0.0
    json_bytes = 0
    with tempfile.TemporaryDirectory() as tmp:
        for graph in graphs:
            path = Path(tmp) / RunFolder.graph_file(graph.graph_id)
            save_s += timed(lambda: save_graph(graph, path))[1]  # noqa: B023 (called at once)
            load_s += timed(lambda: load_graph(path))[1]  # noqa: B023
            json_bytes += path.stat().st_size
    # ExecNetwork: `document_bytes` is what `save_exec_network` writes
    texts = [document_bytes(to_exec_network(graph)) for graph in graphs]
    export_s = sum(best(lambda: document_bytes(to_exec_network(graph))) for graph in graphs)  # noqa: B023
    import_s = sum(best(lambda: from_exec_network(json.loads(text))) for text in texts)  # noqa: B023
    timings = []
    for graph in graphs:
        for answer_name in graph.names(prefix(Namespace.ANSWER)):
            answer = graph.latest(answer_name)
            assert answer is not None  # the name is one of the graph's own
            up, seconds = timed(lambda: graph.ancestors(answer.id))  # noqa: B023
            timings.append(1e3 * seconds)
            if not any(is_in(node, Namespace.TURN) for node in up):
                raise RuntimeError(f"{graph.graph_id}: {answer.id} does not reach any turn")
    return BenchRow(
        name, turns, sum(g.n_operations for g in graphs), sum(g.n_variables for g in graphs),
        sum(g.n_edges for g in graphs), json_bytes, us_per_op, save_s, load_s,
        statistics.fmean(timings) if timings else 0.0, max(timings, default=0.0), run_s, export_s, import_s, growth,
    )


def render(rows: Sequence[BenchRow]) -> Table:
    def cells(row: BenchRow) -> tuple[object, ...]:
        missed = [name for name, met in (
            ("us/op", row.us_per_op <= TARGET_US_PER_OP), ("ancestors", row.ancestors_max_ms < TARGET_ANCESTORS_MS),
            ("save+load", row.save_s + row.load_s < TARGET_SAVE_LOAD_S), ("ExecNet", row.export_s < TARGET_EXPORT_S),
            ("growth", row.growth < 2.0),
        ) if not met]
        return (
            row.system, row.turns, row.operations, row.variables, row.edges, f"{row.json_bytes / 1e6:.1f}",
            f"{row.us_per_op:.1f}", f"{row.save_s:.2f}", f"{row.load_s:.2f}", f"{row.ancestors_mean_ms:.2f}",
            f"{row.ancestors_max_ms:.2f}", f"{row.run_s:.1f}", f"{row.export_s:.2f}", f"{row.import_s:.2f}",
            f"{row.growth:.2f}", "[green]met[/]" if not missed else f"[red]missed: {', '.join(missed)}[/]",
        )

    return rich_table(
        "Execution graph at LoCoMo scale (targets: <=20 us/op, ancestors <5 ms, save+load <2 s, "
        "ExecNetwork export <2 s, growth = bytes/turn at full vs 1/4 length < 2, i.e. linear)",
        ("system", "turns", "ops", "vars", "edges", "JSON MB", "us/op", "save s", "load s", "anc. mean ms",
         "anc. max ms", "run s", "ExecNet out s", "ExecNet in s", "growth", "targets"),
        map(cells, rows), ("system", "targets"))


def main(argv: Sequence[str] | None = None) -> int:
    cli = parser(__doc__, workers=2)
    cli.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=list(SYSTEMS))
    args = cli.parse_args(argv)
    no_lm_history()  # DSPy's record of every call: nobody reads it (app_setup)
    console = Console()
    rows = []
    for name in args.systems:
        with console.status(f"building the graph of a {name} run..."):
            rows.append(bench_system(name, args.conversations, args.sessions, args.turns_per_session, args.workers))
    console.print(render(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
