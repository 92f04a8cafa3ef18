"""What our tracing costs the real `mem0ai` library per `add`, and how its graphs grow with conversation length.

`python -m memtrace_loop.experiments.lab.bench.mem0ai_bench` feeds the first 20, 40, 80, 160 turns of
one sim conversation, one `add()` per turn, to mem0 alone (`open_memory(observe=False)`: no observer,
no graph) and through our adapter (`Mem0aiMemory.ingest`), `--repeats` times each way, alternating;
each turn keeps its fastest time and the first add is left out. Both must end with the same live
memories. One table: ms per add (median, mean) both ways, their ratio, the graph's size per length.
It sets no targets.
"""

from __future__ import annotations

import gc
import itertools
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("MEM0_TELEMETRY", "False")
os.environ.setdefault("MEM0_DIR", tempfile.mkdtemp(prefix="memtrace-mem0ai-bench-"))

from memtrace_loop.experiments.lab.bench.common import parser, rich_table, sim_dataset, sim_lm
from memtrace_loop.memory_systems.mem0ai.bridge import EXTRACTION, UPDATE
from memtrace_loop.memory_systems.mem0ai.hooks import with_session_date
from memtrace_loop.memory_systems.mem0ai.memory import close_memory, new_folder, open_memory
from memtrace_loop.memory_systems.mem0ai.observers import AddRecorder
from memtrace_loop.memory_systems.mem0ai.system import Mem0aiMemory
from memtrace_loop.pipeline.backends.embeddings import Embedder, HashingEmbedder
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.records import Conversation
from memtrace_loop.pipeline.core.tracing import Tracer
from rich.console import Console
from rich.table import Table

LENGTHS = (20, 40, 80, 160)


@dataclass(frozen=True)
class GraphSize:
    """Variables, operations and edges (operation inputs + outputs) of a graph."""

    variables: int
    operations: int
    edges: int


@dataclass(frozen=True)
class Feed:
    """One conversation fed turn by turn: ms per add (the first left out) and live memories at the end."""

    ms_per_add: tuple[float, ...]
    memories: int

    @property
    def median(self) -> float:
        return statistics.median(self.ms_per_add) if self.ms_per_add else 0.0

    @property
    def mean(self) -> float:
        return statistics.fmean(self.ms_per_add) if self.ms_per_add else 0.0


def graph_size(graph: ExecutionGraph) -> GraphSize:
    """The size of `graph` (a pure function of it)."""
    return GraphSize(graph.n_variables, graph.n_operations, graph.n_edges)


def feed_alone(conversation: Conversation, lm: Any, embedder: Embedder, texts: dict[str, str]) -> Feed:
    """mem0 alone: the adapter's `Memory` (its config, a fresh folder, our LLM and embedder objects) with
    no observer (`open_memory(observe=False)`); one add per turn as the adapter feeds it."""
    folder = new_folder(f"{conversation.id}-alone")
    memory, bridge = open_memory(folder, embedder, AddRecorder(), observe=False)
    bridge.bind({EXTRACTION: lm, UPDATE: lm})  # its recorder never records: the bridge's notes are dropped
    times = []
    try:
        for turn in conversation.turns:
            started = time.perf_counter()
            memory.config.custom_fact_extraction_prompt = with_session_date(texts[EXTRACTION], turn.time[:10])
            memory.config.custom_update_memory_prompt = texts[UPDATE]
            memory.add([{"role": "user", "content": f"{turn.speaker}: {turn.text}"}],
                       user_id=conversation.id, metadata={"session_date": turn.time[:10], "turn": turn.id})
            times.append(1e3 * (time.perf_counter() - started))
        live = len(memory.get_all(user_id=conversation.id, limit=10_000)["results"])
    finally:
        close_memory(memory, folder)
    return Feed(tuple(times[1:]), live)


def feed_ours(conversation: Conversation, system: Mem0aiMemory) -> tuple[Feed, GraphSize]:
    """Ours: the adapter's `ingest` (observers, recorder, graph); ms between the ends of successive turns."""
    graph = ExecutionGraph(conversation.id)
    ends: list[float] = []
    state = system.ingest(conversation, Tracer(graph), on_turn=lambda _: ends.append(time.perf_counter()))
    live = len(state.units)
    del state
    gc.collect()  # the state's finalizer closes its memory and removes its folder
    return Feed(tuple(1e3 * (b - a) for a, b in itertools.pairwise(ends)), live), graph_size(graph)


def fastest(feeds: Sequence[Feed]) -> Feed:
    """Per turn, the fastest of the repeated feeds (which must agree on the memories they end with)."""
    memories = {feed.memories for feed in feeds}
    return Feed(tuple(min(times) for times in zip(*(f.ms_per_add for f in feeds), strict=True)),
                memories.pop() if len(memories) == 1 else -1)


def bench(lengths: Sequence[int], seed: int = 0, repeats: int = 3) -> list[tuple[int, Feed, Feed, GraphSize]]:
    """Per length: turns, mem0 alone and ours (the fastest per turn of `repeats`, alternating) and the graph."""
    # no reply reuse: both feeds send the same requests, and the second must not be served from the first
    lm = sim_lm(reuse_calls=False)
    embedder = HashingEmbedder()
    system = Mem0aiMemory(embedder)
    system.set_lm(lm)
    texts = {stage: system.prompt_set()[stage] for stage in (EXTRACTION, UPDATE)}
    full = sim_dataset(seed, 1, max(1, -(-max(lengths) // 20)), 20).conversations[0]  # enough sessions
    if len(full.turns) < max(lengths):
        raise ValueError(f"the simulated conversation has {len(full.turns)} turns, not {max(lengths)}")
    warm = replace(full, turns=full.turns[:4])
    feed_alone(warm, lm, embedder, texts)  # imports, first-call costs: in neither row
    feed_ours(warm, system)
    rows = []
    for n in lengths:
        part = replace(full, turns=full.turns[:n])
        alone, ours = [], []
        for repeat in range(repeats):
            first_alone = repeat % 2 == 0
            if first_alone:
                alone.append(feed_alone(part, lm, embedder, texts))
            ours_feed, size = feed_ours(part, system)
            ours.append(ours_feed)
            if not first_alone:
                alone.append(feed_alone(part, lm, embedder, texts))
        rows.append((n, fastest(alone), fastest(ours), size))
    return rows


def render(rows: Sequence[tuple[int, Feed, Feed, GraphSize]]) -> Table:
    """ms per add: median and mean over the turns; ratio: ours / alone (medians); same: equal live memories."""
    per_turn = [size.operations / turns for turns, _, _, size in rows]
    growth = per_turn[-1] / per_turn[0] if per_turn and per_turn[0] else 0.0
    return rich_table(
        "mem0ai: ms per add, mem0 alone vs through our adapter (same process, lm sim), and graph "
        f"size by conversation length (ops/turn at the longest / at the shortest: {growth:.2f})",
        ("turns", "alone med", "alone mean", "ours med", "ours mean", "ratio", "vars", "ops", "ops/turn", "same"),
        ((turns, f"{alone.median:.1f}", f"{alone.mean:.1f}", f"{ours.median:.1f}", f"{ours.mean:.1f}",
          f"{ours.median / alone.median if alone.median else 0.0:.2f}", size.variables, size.operations,
          f"{ops:.2f}", "yes" if alone.memories == ours.memories else f"no ({alone.memories} vs {ours.memories})")
         for (turns, alone, ours, size), ops in zip(rows, per_turn, strict=True)))


def main(argv: Sequence[str] | None = None) -> int:
    cli = parser(__doc__)
    cli.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS), help="conversation lengths (turns)")
    cli.add_argument("--seed", type=int, default=0)
    cli.add_argument("--repeats", type=int, default=3, help="feeds per length and way (fastest per turn kept)")
    args = cli.parse_args(argv)
    console = Console(width=max(Console().width, 100))  # the table's ten columns unabridged in a log too
    with console.status("feeding mem0 alone and through the adapter..."):
        rows = bench(sorted(args.lengths), args.seed, max(1, args.repeats))
    console.print(render(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
