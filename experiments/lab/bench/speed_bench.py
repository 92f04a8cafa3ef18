"""Speed targets the tests do not assert: `python -m memtrace_loop.experiments.lab.bench.speed_bench`.

The hashing embedder on 10,000 cold texts and the sim world at benchmark size, best of `--repeat`,
each against `TARGET_S`.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable, Sequence

from memtrace_loop.experiments.lab.bench.common import rich_table
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.data.registry import load_dataset
from rich.console import Console

TARGET_S = 2.0


def embed_10k_texts() -> Callable[[], object]:
    chooser = random.Random(0)
    vocabulary = [f"word{i}" for i in range(5000)] + ["the", "a", "to", "of", "and", "in", "on", "at"]
    texts = [" ".join(chooser.choices(vocabulary, k=14)) for _ in range(10_000)]
    return lambda: HashingEmbedder().embed(texts)


def generate_benchmark_world() -> Callable[[], object]:
    config = {"kind": "sim", "seed": 1, "n_conversations": 10, "sessions_per_conversation": 30, "turns_per_session": 20}
    return lambda: load_dataset(config)


CASES: dict[str, Callable[[], Callable[[], object]]] = {
    "hashing embedder: 10,000 texts, cold": embed_10k_texts,
    "sim world: 10 x 30 sessions x 20 turns": generate_benchmark_world,
}


def best_of(work: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return best


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    rows = []
    for name, prepare in CASES.items():
        seconds = best_of(prepare(), args.repeat)
        verdict = "[green]met[/]" if seconds < TARGET_S else "[red]missed[/]"
        rows.append((name, f"{seconds:.2f}", f"{TARGET_S:.1f}", verdict))
    table = rich_table(f"Speed targets (best of {args.repeat})", ("what", "seconds", "target s", "target"), rows,
                       ("what", "target"))
    Console().print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
