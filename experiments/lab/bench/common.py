"""What the benches share: the sim dataset and a sim run at a given size, the sim LM, the argument parser
with the size options, a timer, a progress callback, the comma-separated option reader and the table
writers (rich for the console, Markdown for docs/results.md). It measures and prints nothing itself.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import dspy
from memtrace_loop.memory_systems.base import MemorySystem
from memtrace_loop.memory_systems.registry import build_memory_system
from memtrace_loop.pipeline.analysis.judge import make_judge
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.backends.lm import SimLMConfig
from memtrace_loop.pipeline.backends.registry import build_lm
from memtrace_loop.pipeline.core.records import Dataset
from memtrace_loop.pipeline.data.registry import load_dataset
from memtrace_loop.pipeline.loop.runner import RunResult, run_dataset
from rich.console import Console
from rich.progress import Progress, TaskID
from rich.table import Table

T = TypeVar("T")


def sim_lm(reuse_calls: bool = True, paraphrase: bool = False) -> dspy.LM:
    """The simulated world's stand-in LM, DSPy's cache off (every call made); with `paraphrase`, its
    construction stages paraphrase."""
    return build_lm(SimLMConfig(model="stand-in", cache=False, reuse_calls=reuse_calls, paraphrase=paraphrase))


def build(config: Mapping[str, Any]) -> MemorySystem:
    """A memory system from its `memory_system` config node, on the hashing embedder."""
    return build_memory_system(config, HashingEmbedder())


def sim_dataset(seed: int, conversations: int, sessions: int | None = None,
                turns_per_session: int | None = None) -> Dataset:
    """The sim dataset of `seed` at this size (None: the sim's default)."""
    sizes = {"sessions_per_conversation": sessions, "turns_per_session": turns_per_session}
    return load_dataset({"kind": "sim", "seed": seed, "n_conversations": conversations,
                         **{k: v for k, v in sizes.items() if v is not None}})


def sim_run(system: str, conversations: int, sessions: int, turns_per_session: int,
            workers: int) -> tuple[Dataset, RunResult]:
    """`system` run (answers and judge included) on the sim dataset of seed 0 at this size."""
    dataset = sim_dataset(0, conversations, sessions, turns_per_session)
    lm = sim_lm()
    memory = build({"name": system})
    memory.set_lm(lm)
    return dataset, run_dataset(memory, make_judge(lm), dataset, workers=workers)


def parser(doc: str | None, workers: int | None = None) -> argparse.ArgumentParser:
    """The bench's parser (its docstring's first line); with `workers`, the size options of a sim run at
    LoCoMo scale (10 conversations x 30 sessions x 20 turns) and `--workers`."""
    parsed = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    if workers is not None:
        parsed.add_argument("--conversations", type=int, default=10)
        parsed.add_argument("--sessions", type=int, default=30, help="sessions per conversation")
        parsed.add_argument("--turns-per-session", type=int, default=20)
        parsed.add_argument("--workers", type=int, default=workers)
    return parsed


def timed(work: Callable[[], T]) -> tuple[T, float]:
    """`work()` and the seconds it took."""
    started = time.perf_counter()
    return work(), time.perf_counter() - started


def advance(progress: Progress, task: TaskID, *_: object) -> None:
    """A progress callback (`on_case`, `on_run`): one more step of `task` done."""
    progress.advance(task)


def names(option: str) -> list[str]:
    """A comma-separated option's values."""
    return [name.strip() for name in option.split(",") if name.strip()]


def rich_table(title: str, columns: Sequence[str], rows: Iterable[Sequence[object]],
               left: Collection[str] = ()) -> Table:
    """Rows as a rich table (None as "-"): the `left` columns left-justified, the others right."""
    table = Table(title=title)
    for column in columns:
        table.add_column(column, justify="left" if column in left else "right")
    for row in rows:
        table.add_row(*("-" if cell is None else str(cell) for cell in row))
    return table


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence[object]], align: str = "") -> str:
    """Rows as a Markdown table (None as "–"); `align` holds one `l` or `r` per column (default: left)."""
    marks = ["---:" if a == "r" else "---" for a in align.ljust(len(columns), "l")]
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join(marks) + "|"]
    lines += ["| " + " | ".join("–" if cell is None else str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def print_plain(console: Console, text: str) -> None:
    """`text` as is (no markup, highlighting or wrapping): Markdown tables and lines read by scripts."""
    console.print(text, markup=False, highlight=False, soft_wrap=True)
