"""Per-`add` overhead of tracing the real mem0 library: `python -m memtrace_loop.experiments.bench.mem0ai_bench`.

One process, one simulated conversation (the `sim` dataset through the dataset registry; `--sessions`
sessions of 10 turns), the `sim` LM uncached and the hashing embedder. The same turns are fed twice per
repeat, in alternating order: once to an unmodified `mem0.Memory` alone (our LLM and embedder objects
in it, one `add()` per turn with the session-dated prompt: `memory_systems.mem0ai.memory.open_memory`
with `observe=False`), once through `memory_system=mem0ai`'s `ingest` (the same adds, observed by the
recorder's wrappers and written into an execution graph). The table gives, per way and conversation
length, the median milliseconds per add over `--repeat` runs and the graph's operations per turn (it
must not grow with the conversation), and the overhead of our tracing per add. Never timed in tests.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence

from memtrace_loop.memory_systems.mem0ai.bridge import EXTRACTION, UPDATE
from memtrace_loop.memory_systems.mem0ai.hooks import with_session_date
from memtrace_loop.memory_systems.mem0ai.memory import close_memory, new_folder, open_memory
from memtrace_loop.memory_systems.mem0ai.observers import AddRecorder
from memtrace_loop.memory_systems.mem0ai.system import Mem0aiMemory
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.backends.lm import LMConfig
from memtrace_loop.pipeline.backends.registry import build_lm
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.records import Conversation
from memtrace_loop.pipeline.core.tracing import Tracer
from memtrace_loop.pipeline.data.registry import load_dataset
from rich.console import Console
from rich.table import Table


def conversation(sessions: int) -> Conversation:
    config = {"kind": "sim", "seed": 3, "n_conversations": 1, "sessions_per_conversation": sessions,
              "turns_per_session": 10}
    return load_dataset(config).conversations[0]


def mem0_alone(system: Mem0aiMemory, talk: Conversation) -> float:
    """Seconds per add of a bare Memory with our LLM and embedder (no wrappers, no graph)."""
    folder = new_folder(f"bench-{talk.id}")
    memory, bridge = open_memory(folder, system.embedder, AddRecorder(), observe=False)
    bridge.bind({EXTRACTION: system.fact_extraction.lm, UPDATE: system.update_memory.lm})
    prompts = system.prompt_set()
    try:
        started = time.perf_counter()
        for turn in talk.turns:
            memory.config.custom_fact_extraction_prompt = with_session_date(prompts[EXTRACTION], turn.time[:10])
            memory.config.custom_update_memory_prompt = prompts[UPDATE]
            memory.add([{"role": "user", "content": f"{turn.speaker}: {turn.text}"}], user_id=talk.id,
                       metadata={"session_date": turn.time[:10], "turn": turn.id})
        return (time.perf_counter() - started) / len(talk.turns)
    finally:
        close_memory(memory, folder)


def traced(system: Mem0aiMemory, talk: Conversation) -> tuple[float, float]:
    """Seconds per add through the adapter, and the graph's operations per turn."""
    graph = ExecutionGraph(talk.id)
    started = time.perf_counter()
    state = system.ingest(talk, Tracer(graph))
    seconds = (time.perf_counter() - started) / len(talk.turns)
    del state
    return seconds, graph.n_operations / len(talk.turns)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", default="3,12", help="comma-separated conversation lengths (sessions of 10)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    system = Mem0aiMemory(HashingEmbedder())
    system.set_lm(build_lm(LMConfig(backend="sim", model="stand-in", cache=False)))
    table = Table(title="mem0ai: per-add time, mem0 alone vs traced (sim LM, hashing embedder)")
    for column in ("turns", "mem0 alone ms/add", "traced ms/add", "overhead ms/add", "overhead %", "ops/turn"):
        table.add_column(column, justify="right")
    for sessions in (int(s) for s in args.sessions.split(",")):
        talk = conversation(sessions)
        alone, ours, ops = [], [], 0.0
        for index in range(args.repeat):
            if index % 2 == 0:
                alone.append(mem0_alone(system, talk))
            seconds, ops = traced(system, talk)
            ours.append(seconds)
            if index % 2 == 1:
                alone.append(mem0_alone(system, talk))
        base, mine = statistics.median(alone) * 1000, statistics.median(ours) * 1000
        table.add_row(str(len(talk.turns)), f"{base:.1f}", f"{mine:.1f}", f"{mine - base:.1f}",
                      f"{100 * (mine - base) / base:.0f}", f"{ops:.1f}")
    Console().print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
