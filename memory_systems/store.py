"""An in-process vector store of memory units that keeps every version of every unit.

Search is cosine over current, non-deleted units, ties to the older unit. It knows no graphs or LLMs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from memtrace_loop.pipeline.backends.embeddings import Embedder


@dataclass(frozen=True, slots=True)
class MemoryUnit:
    """One version of a memory unit. `time` is the ISO time of the turn that wrote this version."""

    id: str
    version: int
    text: str
    time: str
    deleted: bool = False


@dataclass(frozen=True, slots=True)
class Hit:
    unit: MemoryUnit
    score: float


class InMemoryVectorStore:
    """A numpy-backed store of memory units. Writes are single-threaded; concurrent searches are safe."""

    def __init__(self, embedder: Embedder, id_prefix: str = "m") -> None:
        self._embedder = embedder
        self._id_prefix = id_prefix
        self._vectors = np.zeros((16, embedder.dim), dtype=np.float32)
        self._alive = np.zeros(16, dtype=bool)
        self._row_by_id: dict[str, int] = {}
        self._id_by_row: list[str] = []
        self._history_by_id: dict[str, list[MemoryUnit]] = {}

    def __len__(self) -> int:
        return int(self._alive[: len(self._id_by_row)].sum())

    def copy(self) -> InMemoryVectorStore:
        """An independent copy (units, vectors and histories); writes to it leave this store unchanged."""
        twin = InMemoryVectorStore(self._embedder, self._id_prefix)
        twin._vectors = self._vectors.copy()
        twin._alive = self._alive.copy()
        twin._row_by_id = dict(self._row_by_id)
        twin._id_by_row = list(self._id_by_row)
        twin._history_by_id = {unit_id: list(history) for unit_id, history in self._history_by_id.items()}
        return twin

    def _embed_one(self, text: str, vector: np.ndarray | None = None) -> np.ndarray:
        return self._embedder.embed([text])[0] if vector is None else vector

    def add(self, text: str, time: str, vector: np.ndarray | None = None) -> MemoryUnit:
        """Add a unit; `vector` (the embedding of `text`) saves an embedding call when already known."""
        row = len(self._id_by_row)
        if row == len(self._alive):
            self._vectors = np.concatenate([self._vectors, np.zeros_like(self._vectors)])
            self._alive = np.concatenate([self._alive, np.zeros_like(self._alive)])
        unit = MemoryUnit(f"{self._id_prefix}{row + 1}", 1, text, time)
        self._vectors[row] = self._embed_one(text, vector)
        self._alive[row] = True
        self._row_by_id[unit.id] = row
        self._id_by_row.append(unit.id)
        self._history_by_id[unit.id] = [unit]
        return unit

    def _live(self, unit_id: str) -> MemoryUnit:
        history = self._history_by_id.get(unit_id)
        if not history or history[-1].deleted:
            raise KeyError(f"no live memory unit {unit_id!r}")
        return history[-1]

    def update(self, unit_id: str, text: str, time: str, vector: np.ndarray | None = None) -> MemoryUnit:
        old = self._live(unit_id)
        unit = MemoryUnit(unit_id, old.version + 1, text, time)
        self._vectors[self._row_by_id[unit_id]] = self._embed_one(text, vector)
        self._history_by_id[unit_id].append(unit)
        return unit

    def delete(self, unit_id: str, time: str) -> MemoryUnit:
        old = self._live(unit_id)
        unit = MemoryUnit(unit_id, old.version + 1, old.text, time, deleted=True)
        self._alive[self._row_by_id[unit_id]] = False
        self._history_by_id[unit_id].append(unit)
        return unit

    def get(self, unit_id: str) -> MemoryUnit | None:
        history = self._history_by_id.get(unit_id)
        return None if not history or history[-1].deleted else history[-1]

    def search(self, query: str, k: int, vector: np.ndarray | None = None) -> list[Hit]:
        """The `k` live units most similar to `query` (or to its precomputed `vector`)."""
        n = len(self._id_by_row)
        if n == 0 or k <= 0:
            return []
        scores = self._vectors[:n] @ self._embed_one(query, vector)
        scores = np.where(self._alive[:n], scores, -np.inf)
        k = min(k, int(self._alive[:n].sum()))
        # stable sort on -score keeps older units first among equal scores
        order = np.argsort(-scores, kind="stable")[:k]
        return [Hit(self._history_by_id[self._id_by_row[r]][-1], float(scores[r])) for r in order]

    def current(self) -> list[MemoryUnit]:
        return [h[-1] for h in self._history_by_id.values() if not h[-1].deleted]

    def history(self, unit_id: str) -> tuple[MemoryUnit, ...]:
        return tuple(self._history_by_id.get(unit_id, ()))
