"""Speed targets the tests do not assert: `python -m memtrace_loop.experiments.lab.bench.speed_bench`.

The hashing embedder on 10,000 cold texts and the sim world at benchmark size, best of `--repeat`,
each against `TARGET_S`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from memtrace_loop.experiments.lab.bench.common import parser, rich_table, sim_dataset, timed
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from rich.console import Console

TARGET_S = 2.0


def embed_10k_texts() -> Callable[[], object]:
    chooser = random.Random(0)
    vocabulary = [f"word{i}" for i in range(5000)] + ["the", "a", "to", "of", "and", "in", "on", "at"]
    texts = [" ".join(chooser.choices(vocabulary, k=14)) for _ in range(10_000)]
    return lambda: HashingEmbedder().embed(texts)


CASES: dict[str, Callable[[], Callable[[], object]]] = {
    "hashing embedder: 10,000 texts, cold": embed_10k_texts,
    "sim world: 10 x 30 sessions x 20 turns": lambda: lambda: sim_dataset(1, 10, 30, 20),
}


def main(argv: Sequence[str] | None = None) -> int:
    cli = parser(__doc__)
    cli.add_argument("--repeat", type=int, default=3)
    repeat = cli.parse_args(argv).repeat
    rows = []
    for name, prepare in CASES.items():
        work = prepare()
        seconds = min(timed(work)[1] for _ in range(repeat))
        verdict = "[green]met[/]" if seconds < TARGET_S else "[red]missed[/]"
        rows.append((name, f"{seconds:.2f}", f"{TARGET_S:.1f}", verdict))
    Console().print(rich_table(f"Speed targets (best of {repeat})", ("what", "seconds", "target s", "target"), rows,
                               ("what", "target")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
