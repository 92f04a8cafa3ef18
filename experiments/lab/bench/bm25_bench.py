"""BM25: our `BM25Index` against `bm25s` and `rank_bm25`: `python -m memtrace_loop.experiments.lab.bench.bm25_bench`.

The workloads are the ones the pipeline has, many small indexes over short documents:
- `evermemos episodes`: every BM25 index an EverMemOS run on the simulated world builds (one per
  conversation, over its episode documents) with every query it searches, recorded during the run;
- `pseudo-evidence (sim)`: per conversation of the same run, an index over the turn variables of its
  graph, queried with "question + gold answer" for every question (what attribution does for a
  question without evidence);
- `pseudo-evidence (LoCoMo)`: the same over a real LoCoMo file (`--locomo`, skipped if absent).

Each library is set up to compute our formula (Lucene idf `log(1 + (N - df + 0.5) / (df + 0.5))`,
term weight `tf (k1 + 1) / (tf + k1 (1 - b + b len / avglen))`, each query term once, k1=1.5,
b=0.75) and is ranked by (score desc, document index asc) like `BM25Index.top`:
- `bm25s`: `method="atire", idf_method="lucene", dtype="float64"`, full score vector per query;
- `rank_bm25`: `BM25Okapi` with its idf replaced by the Lucene idf (stock `BM25Okapi` uses another
  idf with an epsilon floor; its row shows how many rankings that changes).
The table gives, per workload and library: indexes, queries, build and query time (ms, best of
`--repeat`), the largest score difference from ours and the number of queries whose ranking (the
documents with a positive score, in order) differs from ours. The libraries are not dependencies of
the project: a library that is not installed (`pip install bm25s rank_bm25`) is left out.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import numpy as np
from memtrace_loop.memory_systems.evermemos import system as evermemos_system
from memtrace_loop.memory_systems.registry import build_memory_system
from memtrace_loop.pipeline.analysis.judge import make_judge
from memtrace_loop.pipeline.backends.bm25 import BM25Index
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.backends.lm import LMConfig
from memtrace_loop.pipeline.backends.registry import build_lm
from memtrace_loop.pipeline.backends.text import alnum_words
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.records import Dataset
from memtrace_loop.pipeline.data.locomo import load_locomo
from memtrace_loop.pipeline.data.registry import load_dataset
from memtrace_loop.pipeline.loop.runner import run_dataset
from rich.console import Console
from rich.table import Table

K1, B = 1.5, 0.75


@dataclass(frozen=True)
class Workload:
    name: str
    indexes: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]  # (documents, queries) per index

    @property
    def n_queries(self) -> int:
        return sum(len(queries) for _, queries in self.indexes)


# --------------------------------------------------------------------------- workloads


def evermemos_workload(dataset: Dataset) -> tuple[Workload, dict[str, ExecutionGraph]]:
    """Run EverMemOS on the sim LM, recording every BM25 index it builds and every query it ranks."""
    recorded: list[tuple[list[str], list[str]]] = []

    class Recording(BM25Index):
        def __init__(self, documents: Sequence[str], k1: float = K1, b: float = B) -> None:
            super().__init__(documents, k1, b)
            recorded.append((list(documents), []))
            self._queries = recorded[-1][1]

        def top(self, query: str, k: int) -> list[tuple[int, float]]:
            self._queries.append(query)
            return super().top(query, k)

    lm = build_lm(LMConfig(backend="sim", model="stand-in", cache=False))
    system = build_memory_system({"name": "evermemos"}, HashingEmbedder())
    system.set_lm(lm)
    original = evermemos_system.BM25Index
    evermemos_system.BM25Index = Recording  # type: ignore[misc]  # the benchmark's own probe; restored below
    try:
        result = run_dataset(system, make_judge(lm), dataset, workers=1)
    finally:
        evermemos_system.BM25Index = original  # type: ignore[misc]  # the probe removed
    indexes = tuple((tuple(docs), tuple(queries)) for docs, queries in recorded)
    return Workload("evermemos episodes (sim)", indexes), dict(result.graph_by_conversation)


def pseudo_evidence_workload(name: str, dataset: Dataset, turn_texts: Callable[[str], list[str]]) -> Workload:
    indexes = []
    for conversation in dataset.conversations:
        queries = tuple(f"{q.text} {q.gold}" for q in dataset.questions if q.conversation_id == conversation.id)
        indexes.append((tuple(turn_texts(conversation.id)), queries))
    return Workload(name, tuple(indexes))


# --------------------------------------------------------------------------- implementations

Ranking = tuple[list[int], list[float]]  # documents with a positive score, best first; all scores


def _rank(scores: Sequence[float]) -> list[int]:
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    return [i for i in order if scores[i] > 0]


def _query_terms(query: str) -> list[str]:
    return list(dict.fromkeys(alnum_words(query)))


def run_ours(documents: Sequence[str], queries: Sequence[str]) -> tuple[float, float, list[Ranking]]:
    t0 = time.perf_counter()
    index = BM25Index(documents, K1, B)
    t1 = time.perf_counter()
    out = []
    for query in queries:
        ranked = index.top(query, len(documents))
        out.append(([i for i, s in ranked if s > 0], [s for _, s in sorted(ranked)]))
    return t1 - t0, time.perf_counter() - t1, out


def run_bm25s(documents: Sequence[str], queries: Sequence[str]) -> tuple[float, float, list[Ranking]]:
    import bm25s

    t0 = time.perf_counter()
    retriever = bm25s.BM25(k1=K1, b=B, method="atire", idf_method="lucene", dtype="float64")
    retriever.index([alnum_words(d) for d in documents], show_progress=False)
    t1 = time.perf_counter()
    out = []
    for query in queries:
        ids = retriever.get_tokens_ids(_query_terms(query))
        scores = retriever.get_scores_from_ids(ids) if ids else np.zeros(len(documents))
        values = [float(s) for s in scores[: len(documents)]]
        out.append((_rank(values), values))
    return t1 - t0, time.perf_counter() - t1, out


def _rank_bm25(lucene_idf: bool) -> Callable[[Sequence[str], Sequence[str]], tuple[float, float, list[Ranking]]]:
    def run(documents: Sequence[str], queries: Sequence[str]) -> tuple[float, float, list[Ranking]]:
        from rank_bm25 import BM25Okapi

        class LuceneIdf(BM25Okapi):
            def _calc_idf(self, nd: dict[str, int]) -> None:
                n = self.corpus_size
                self.idf = {t: math.log(1 + (n - df + 0.5) / (df + 0.5)) for t, df in nd.items()}

        t0 = time.perf_counter()
        index = (LuceneIdf if lucene_idf else BM25Okapi)([alnum_words(d) for d in documents], k1=K1, b=B)
        t1 = time.perf_counter()
        out = []
        for query in queries:
            values = [float(s) for s in index.get_scores(_query_terms(query))]
            out.append((_rank(values), values))
        return t1 - t0, time.perf_counter() - t1, out

    return run


def implementations() -> dict[str, Callable[[Sequence[str], Sequence[str]], tuple[float, float, list[Ranking]]]]:
    """Ours and each library that is installed (they are not dependencies: `pip install bm25s rank_bm25`)."""
    found: dict[str, Callable[[Sequence[str], Sequence[str]], tuple[float, float, list[Ranking]]]] = {
        "ours (BM25Index)": run_ours
    }
    if importlib.util.find_spec("bm25s"):
        found["bm25s"] = run_bm25s
    if importlib.util.find_spec("rank_bm25"):
        found["rank_bm25 (Lucene idf)"] = _rank_bm25(lucene_idf=True)
        found["rank_bm25 (stock BM25Okapi)"] = _rank_bm25(lucene_idf=False)
    return found


@dataclass(frozen=True)
class Row:
    workload: str
    implementation: str
    indexes: int
    queries: int
    build_ms: float
    query_ms: float
    max_score_diff: float
    rankings_differ: int


def measure(workload: Workload, repeat: int) -> list[Row]:
    reference = [run_ours(docs, queries)[2] for docs, queries in workload.indexes]
    rows = []
    for name, run in implementations().items():
        best_build = best_query = math.inf
        for _ in range(repeat):
            build = query = 0.0
            results = []
            for docs, queries in workload.indexes:
                b, q, ranked = run(docs, queries)
                build, query = build + b, query + q
                results.append(ranked)
            best_build, best_query = min(best_build, build), min(best_query, query)
        diff, differ = 0.0, 0
        for ours, theirs in zip(reference, results, strict=True):
            for (our_rank, our_scores), (their_rank, their_scores) in zip(ours, theirs, strict=True):
                diff = max(diff, max((abs(a - b) for a, b in zip(our_scores, their_scores, strict=True)), default=0))
                differ += our_rank != their_rank
        rows.append(Row(workload.name, name, len(workload.indexes), workload.n_queries,
                        1e3 * best_build, 1e3 * best_query, diff, differ))
    return rows


def render(rows: Sequence[Row]) -> Table:
    table = Table(title="BM25 on the pipeline's workloads (time: best of --repeat; diffs against ours)")
    for column in ("workload", "implementation", "indexes", "queries", "build ms", "query ms", "total ms",
                   "max |score diff|", "rankings differ"):
        table.add_column(column, justify="left" if column in ("workload", "implementation") else "right")
    for row in rows:
        table.add_row(row.workload, row.implementation, str(row.indexes), str(row.queries), f"{row.build_ms:.1f}",
                      f"{row.query_ms:.1f}", f"{row.build_ms + row.query_ms:.1f}", f"{row.max_score_diff:.1e}",
                      str(row.rankings_differ))
    return table


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=8)
    parser.add_argument("--locomo", type=Path, default=Path("../shared/data/locomo/locomo2.json"))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    console = Console()
    with console.status("recording the BM25 workloads of an EverMemOS run on the simulated world..."):
        dataset = load_dataset({"kind": "sim", "seed": 0, "n_conversations": args.conversations})
        episodes, graph_by_conversation = evermemos_workload(dataset)
    turns_by_conversation = {
        cid: [v.value for v in g.variables() if v.kind == "turn"] for cid, g in graph_by_conversation.items()
    }
    sim_turns = pseudo_evidence_workload("pseudo-evidence (sim)", dataset, turns_by_conversation.__getitem__)
    workloads = [episodes, sim_turns]
    if args.locomo.is_file():
        real = load_locomo(args.locomo)
        texts = {c.id: [f"{t.speaker}: {t.text}" for t in c.turns] for c in real.conversations}
        workloads.append(pseudo_evidence_workload("pseudo-evidence (LoCoMo)", real, texts.__getitem__))
    rows = []
    for workload in workloads:
        with console.status(f"measuring {workload.name}..."):
            rows.extend(measure(workload, args.repeat))
    console.print(render(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
