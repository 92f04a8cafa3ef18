"""A small RAG over its own store, written as a user of MemTrace Loop writes one (docs/custom_system.md).

Turns kept as chunks, the `top_k` sharing the most rare words with the question, one `respond` call; it uses
only the public API. The default target of `memory_system=custom`.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import memtrace_loop.memory_systems.custom.api as memtrace

RESPOND = memtrace.LLMStage(
    name="respond",
    prompt="Answer the question about the conversation using only the chunks given. "
    "Answer with a short phrase, not a full sentence.",
    inputs=("context", "question"),  # the field names the simulated world reads for an answer
    outputs=("answer",),
)
STOP_WORDS = frozenset("a an and the of to in on at is was were did do does what when where who how i you".split())


def words(text: str) -> frozenset[str]:
    return frozenset(w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in STOP_WORDS)


@dataclass(frozen=True)
class Chunk:
    key: str
    text: str
    words: frozenset[str]


@dataclass
class ChunkStore:
    """One conversation's chunks (the user's own store)."""

    chunks: list[Chunk] = field(default_factory=list)

    def add(self, text: str) -> Chunk:
        chunk = Chunk(f"c{len(self.chunks) + 1}", text, words(text))
        self.chunks.append(chunk)
        return chunk

    def search(self, question: str, depth: int) -> list[Chunk]:
        """The chunks sharing the most question words, rarer words weighing more (idf), best first."""
        n = len(self.chunks)
        frequency = Counter(w for c in self.chunks for w in c.words)
        weight = {w: math.log(1 + n / frequency[w]) for w in words(question) if frequency[w]}
        scored = [(sum(weight.get(w, 0.0) for w in c.words), -i, c) for i, c in enumerate(self.chunks)]
        ranked = sorted(scored, key=lambda t: (t[0], t[1]), reverse=True)
        return [c for score, _, c in ranked[:depth] if score > 0]


@dataclass(frozen=True)
class WordOverlapRag:
    top_k: int = 10

    def stages(self) -> tuple[memtrace.Stage | memtrace.LLMStage, ...]:
        return (memtrace.Stage("store", builds_memory=True), memtrace.Stage("search", knobs=("top_k",)), RESPOND)

    def knobs(self) -> Mapping[str, memtrace.Knob]:
        return {"top_k": self.top_k}

    def with_knobs(self, changes: Mapping[str, memtrace.Knob]) -> WordOverlapRag:
        top_k = changes.get("top_k", self.top_k)
        if not isinstance(top_k, int) or top_k < 1:
            raise ValueError(f"top_k must be a positive integer, got {top_k!r}")
        return replace(self, top_k=top_k)

    def new_memory(self, conversation_id: str) -> ChunkStore:
        return ChunkStore()

    def add_turn(self, memory: ChunkStore, turn: memtrace.Turn, lm: memtrace.LM) -> None:
        with memtrace.op("store_turn", stage="store", kind="extraction") as op:
            chunk = memory.add(f"[{turn.time[:10]}] {turn.speaker}: {turn.text}")
            op.reads_turn(turn.id).writes_unit(chunk.key, chunk.text)

    def answer(self, memory: ChunkStore, question: str, lm: memtrace.LM) -> memtrace.Answer:
        with memtrace.op("search_chunks", stage="search", kind="retrieval") as op:
            ranked = memory.search(question, 2 * self.top_k)
            hits, missed = ranked[: self.top_k], ranked[self.top_k :]
            context = "\n".join(c.text for c in hits)
            op.reads_question().reads_units(*[c.key for c in hits]).ranked_below(*[c.key for c in missed])
            op.annotate(k=self.top_k).writes_context(context)
        with memtrace.op("generate_answer", stage="respond", kind="response") as op:
            reply = lm.ask("respond", context=context, question=question)
            answer = str(reply["answer"]).strip()
            op.reads_question().reads_context().writes_answer(answer)
        return memtrace.Answer(answer, context)


def build() -> WordOverlapRag:
    return WordOverlapRag()
