"""The naive RAG memory system: token-bounded chunks of turns, top-k chunks by cosine as the context.

Turns are packed in order into chunks of at most `max_chunk_tokens` (a longer turn split at words, each
piece keeping its `[date] Speaker:` prefix; `overlap_tokens` repeats the last turns), embedded into a vector
store; answering takes the `top_k` chunks and asks `respond`. Traced as `chunk_turns`, `retrieve_chunks`,
`question_answering`. It does not rerank or deduplicate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dspy
from memtrace_loop.memory_systems.answering import record_query, record_retrieval, record_turn
from memtrace_loop.memory_systems.base import MemorySystem, RestoredUnit, Retrieved, ranked_depth
from memtrace_loop.memory_systems.rag.schema import CHUNK_STAGE, RETRIEVE_STAGE, STAGES, RagKnobs
from memtrace_loop.memory_systems.signatures import AnswerQuestion, render_turn
from memtrace_loop.memory_systems.store import InMemoryVectorStore
from memtrace_loop.pipeline.backends.embeddings import Embedder
from memtrace_loop.pipeline.backends.tokens import TokenCounter, build_token_counter
from memtrace_loop.pipeline.core.conventions import (
    NEAR_MISSES,
    Namespace,
    OpKind,
    VarKind,
    chunk_name,
    first_version,
    prefix,
)
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.records import Conversation, Question, Turn
from memtrace_loop.pipeline.core.tracing import Tracer

SEPARATOR = "\n"
SEPARATOR_TOKENS = 1  # one newline between the turns of a chunk
CONTEXT_SEPARATOR = "\n\n"


@dataclass(frozen=True)
class Piece:
    """A turn, or one piece of a turn too long for a chunk, as rendered text with its token count."""

    turn_id: str
    text: str
    tokens: int
    part: int = 0  # 0 for a whole turn; 1, 2, ... for the pieces of a split turn


@dataclass(frozen=True)
class Chunk:
    index: int  # 1-based; the chunk's variable is `chunk:<index>`
    pieces: tuple[Piece, ...]

    @property
    def text(self) -> str:
        return SEPARATOR.join(p.text for p in self.pieces)

    @property
    def tokens(self) -> int:
        return sum(p.tokens for p in self.pieces) + SEPARATOR_TOKENS * (len(self.pieces) - 1)

    @property
    def turn_ids(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p.turn_id for p in self.pieces))


def split_turn(turn_id: str, prefix: str, text: str, limit: int, counter: TokenCounter) -> list[Piece]:
    """`prefix + text` as pieces of at most `limit` tokens, each starting with `prefix`; words are never split unless a
    single word is longer than a piece can hold."""
    prefix_tokens = counter.count(prefix)
    budget = limit - prefix_tokens
    if budget < 4:
        raise ValueError(f"a chunk of {limit} tokens cannot hold the turn prefix {prefix!r}")
    groups: list[list[str]] = []
    current: list[str] = []
    running = 0
    for word in text.split():
        for part in _split_word(word, budget - 1, counter):
            cost = counter.count(" " + part)
            if current and running + cost > budget:
                groups.append(current)
                current, running = [], 0
            current.append(part)
            running += cost
    groups.append(current)
    pieces: list[Piece] = []
    for group in groups:
        for words in _fit(prefix, group, limit, counter):
            pieces.append(Piece(turn_id, prefix + " ".join(words), counter.count(prefix + " ".join(words)),
                                len(pieces) + 1))
    return pieces


def _fit(prefix: str, words: list[str], limit: int, counter: TokenCounter) -> list[list[str]]:
    """`words` as one group if `prefix + words` fits in `limit` tokens, else halved until each fits."""
    if len(words) <= 1 or counter.count(prefix + " ".join(words)) <= limit:
        return [words]
    half = len(words) // 2
    return [*_fit(prefix, words[:half], limit, counter), *_fit(prefix, words[half:], limit, counter)]


def _split_word(word: str, budget: int, counter: TokenCounter) -> list[str]:
    if counter.count(word) <= budget:
        return [word]
    size = max(1, len(word) // 2)
    return [*_split_word(word[:size], budget, counter), *_split_word(word[size:], budget, counter)]


def turn_pieces(turn: Turn, limit: int, counter: TokenCounter) -> list[Piece]:
    """The rendered turn as one piece, or as several when it is longer than `limit` tokens."""
    text = render_turn(turn.speaker, turn.time, turn.text)
    tokens = counter.count(text)
    if tokens <= limit:
        return [Piece(turn.id, text, tokens)]
    prefix = render_turn(turn.speaker, turn.time, "")
    return split_turn(turn.id, prefix, turn.text, limit, counter)


def make_chunks(turns: Sequence[Turn], max_tokens: int, overlap_tokens: int, counter: TokenCounter) -> list[Chunk]:
    """Pack turns (split where needed) into chunks of at most `max_tokens` tokens, in order."""
    chunks: list[Chunk] = []
    current: list[Piece] = []
    fresh = 0  # pieces in `current` that are not overlap from the previous chunk
    size = 0
    for turn in turns:
        for piece in turn_pieces(turn, max_tokens, counter):
            added = piece.tokens + (SEPARATOR_TOKENS if current else 0)
            if fresh and size + added > max_tokens:
                chunks.append(Chunk(len(chunks) + 1, tuple(current)))
                current = _overlap(current, overlap_tokens)
                size = sum(p.tokens for p in current) + SEPARATOR_TOKENS * max(len(current) - 1, 0)
                while current and size + SEPARATOR_TOKENS + piece.tokens > max_tokens:
                    dropped = current.pop(0)
                    size -= dropped.tokens + (SEPARATOR_TOKENS if current else 0)
                fresh = 0
                added = piece.tokens + (SEPARATOR_TOKENS if current else 0)
            current.append(piece)
            size += added
            fresh += 1
    if fresh:
        chunks.append(Chunk(len(chunks) + 1, tuple(current)))
    return chunks


def _overlap(pieces: list[Piece], overlap_tokens: int) -> list[Piece]:
    """The last pieces of a closed chunk whose tokens (separators included) fit in `overlap_tokens`."""
    kept: list[Piece] = []
    size = 0
    for piece in reversed(pieces):
        added = piece.tokens + (SEPARATOR_TOKENS if kept else 0)
        if size + added > overlap_tokens:
            break
        kept.insert(0, piece)
        size += added
    return kept


@dataclass(frozen=True)
class RagState:
    """The chunks of one conversation and their store (read-only once ingestion is over)."""

    conversation_id: str
    chunks: tuple[Chunk, ...]
    store: InMemoryVectorStore
    chunk_by_unit: Mapping[str, int]  # store unit id -> chunk index


def chunk_var(index: int) -> str:
    """The id of the graph variable holding chunk `index` (chunks are written once)."""
    return first_version(chunk_name(index))


class RagMemory(MemorySystem):
    knobs: RagKnobs
    name = "rag"
    stages = STAGES

    def __init__(self, embedder: Embedder, knobs: RagKnobs | None = None, counter: TokenCounter | None = None) -> None:
        super().__init__()
        self.respond = dspy.Predict(AnswerQuestion)
        self.embedder = embedder
        self.knobs = knobs or RagKnobs()
        self.counter = counter or build_token_counter(self.knobs.tokenizer)

    def construction_knobs(self) -> str:
        k = self.knobs
        return (
            f"max_chunk_tokens={k.max_chunk_tokens};overlap_tokens={k.overlap_tokens};"
            f"embedder={self.embedder!r};tokenizer={self.counter.name}"
        )

    def non_llm_stages(self) -> dict[str, str]:
        k = self.knobs
        return {
            CHUNK_STAGE: f"max_chunk_tokens={k.max_chunk_tokens}; overlap_tokens={k.overlap_tokens}; "
            f"tokenizer={self.counter.name}; embedder={self.embedder!r}",
            RETRIEVE_STAGE: f"top_k={k.top_k} chunks by cosine similarity to the question",
        }

    # ------------------------------------------------------------------ construction

    def ingest(
        self, conversation: Conversation, tracer: Tracer, on_turn: Callable[[Turn], None] | None = None
    ) -> RagState:
        turn_vars: dict[str, str] = {}
        for turn in conversation.turns:
            turn_vars[turn.id] = record_turn(tracer, turn)
            if on_turn is not None:
                on_turn(turn)
        chunks = make_chunks(conversation.turns, self.knobs.max_chunk_tokens, self.knobs.overlap_tokens, self.counter)
        time_by_turn = {t.id: t.time for t in conversation.turns}
        store = InMemoryVectorStore(self.embedder, id_prefix="c")
        vectors: Iterable[Any] = self.embedder.embed([c.text for c in chunks]) if chunks else []
        chunk_by_unit: dict[str, int] = {}
        for chunk, vector in zip(chunks, vectors, strict=True):
            time = time_by_turn[chunk.pieces[-1].turn_id]
            unit = store.add(chunk.text, time, vector)
            chunk_by_unit[unit.id] = chunk.index
            meta: dict[str, Any] = {"turns": list(chunk.turn_ids), "tokens": chunk.tokens, "time": time}
            split = sorted({p.turn_id for p in chunk.pieces if p.part})
            if split:
                meta["split_turns"] = split
            out = tracer.variable(chunk_name(chunk.index), VarKind.CHUNK, chunk.text, meta)
            tracer.operation(
                "chunk_turns", CHUNK_STAGE, OpKind.EXTRACTION, [turn_vars[t] for t in chunk.turn_ids], [out],
                meta={"tokens": chunk.tokens, "max_chunk_tokens": self.knobs.max_chunk_tokens,
                      "overlap_tokens": self.knobs.overlap_tokens},
            )
        return RagState(conversation.id, tuple(chunks), store, chunk_by_unit)

    # ------------------------------------------------------------------ answering

    def retrieve(self, question: Question, state: RagState, tracer: Tracer) -> Retrieved:
        query_var = record_query(tracer, question)
        k = self.knobs.top_k
        ranked = state.store.search(question.text, ranked_depth(k))
        hits = ranked[:k]
        context = CONTEXT_SEPARATOR.join(h.unit.text for h in hits)
        context_var = record_retrieval(
            tracer, question, query_var, [chunk_var(state.chunk_by_unit[h.unit.id]) for h in hits], context,
            stage=RETRIEVE_STAGE, name="retrieve_chunks",
            meta={"k": k, "scores": [round(h.score, 4) for h in hits],
                  NEAR_MISSES: [chunk_var(state.chunk_by_unit[h.unit.id]) for h in ranked[k:]]},
        )
        return Retrieved(query_var, context_var, context)

    # ------------------------------------------------------------------ replay

    def restore(self, graph: ExecutionGraph) -> RagState:
        """The chunk store rebuilt from the graph's chunk variables (re-embedded, in chunk order)."""
        store = InMemoryVectorStore(self.embedder, id_prefix="c")
        chunk_by_unit: dict[str, int] = {}
        for name in sorted(graph.names(prefix(Namespace.CHUNK)), key=lambda n: int(n.split(":", 1)[1])):
            var = graph.variable(first_version(name))
            unit = store.add(var.value, str(var.meta.get("time", "")))
            chunk_by_unit[unit.id] = int(name.split(":", 1)[1])
        return RagState(graph.graph_id, (), store, chunk_by_unit)

    def with_units(self, state: RagState, units: Sequence[RestoredUnit], tracer: Tracer) -> RagState:
        store = state.store.copy()
        chunk_by_unit = dict(state.chunk_by_unit)
        next_index = max(chunk_by_unit.values(), default=-1) + 1
        for offset, restored in enumerate(units):
            unit = store.add(restored.text, restored.time)
            chunk_by_unit[unit.id] = next_index + offset
            tracer.variable(
                chunk_name(next_index + offset), VarKind.CHUNK, restored.text,
                {"time": restored.time, "restored_from": restored.source},
            )
        return RagState(state.conversation_id, state.chunks, store, chunk_by_unit)
