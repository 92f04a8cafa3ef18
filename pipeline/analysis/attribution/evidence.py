"""Evidence finding: which turns of a conversation graph hold what a failed question needed.

Gold evidence ids when present, else pseudo-evidence: BM25 (and, with an embedder, cosine) rankings for
question + gold answer, fused by RRF. Pure and deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from memtrace_loop.memory_systems.fusion import reciprocal_rank_fusion
from memtrace_loop.pipeline.backends.bm25 import BM25Index
from memtrace_loop.pipeline.backends.embeddings import Embedder
from memtrace_loop.pipeline.core.conventions import VarKind, first_version, turn_name
from memtrace_loop.pipeline.core.graph import ExecutionGraph, Variable
from memtrace_loop.pipeline.core.records import Question


@dataclass(frozen=True)
class Evidence:
    """The turn variables an attribution starts from; `pseudo` when they were found, not given."""

    turn_vars: tuple[str, ...]
    pseudo: bool
    method: str  # "gold", "bm25", "bm25+embeddings", or "none"


class EvidenceFinder:
    """Finds the evidence of questions about one conversation graph (indexes built once per graph)."""

    def __init__(self, graph: ExecutionGraph, embedder: Embedder | None = None, k: int = 2) -> None:
        self.graph = graph
        self.embedder = embedder
        self.k = k
        self._vectors: np.ndarray | None = None

    @cached_property
    def _turns(self) -> list[Variable]:
        return [v for v in self.graph.variables() if v.kind == VarKind.TURN]

    @cached_property
    def _bm25(self) -> BM25Index | None:
        """Built on the first question without gold evidence (most questions have it)."""
        return BM25Index([v.value for v in self._turns]) if self._turns else None

    def find(self, question: Question) -> Evidence:
        given = tuple(i for i in (first_version(turn_name(e)) for e in question.evidence) if i in self.graph)
        if given:
            return Evidence(given, False, "gold")
        if self._bm25 is None:
            return Evidence((), True, "none")
        query = f"{question.text} {question.gold}"
        depth = max(self.k * 5, 10)
        rankings: list[Sequence[int]] = [[i for i, score in self._bm25.top(query, depth) if score > 0]]
        if self.embedder is not None:
            rankings.append(self._dense(query, depth))
        if not any(rankings):
            return Evidence((), True, "none")
        fused = [i for i, _ in reciprocal_rank_fusion(rankings)][: self.k]
        method = "bm25+embeddings" if self.embedder is not None else "bm25"
        return Evidence(tuple(self._turns[i].id for i in fused), True, method)

    def _dense(self, query: str, depth: int) -> list[int]:
        assert self.embedder is not None  # only called with an embedder
        if self._vectors is None:
            self._vectors = np.asarray(self.embedder.embed([v.value for v in self._turns]))
        vector = np.asarray(self.embedder.embed([query])[0])
        norms = np.linalg.norm(self._vectors, axis=1) * (np.linalg.norm(vector) or 1.0)
        scores = (self._vectors @ vector) / np.where(norms == 0, 1.0, norms)
        order = np.argsort(-scores, kind="stable")[:depth]
        return [int(i) for i in order if scores[i] > 0]
