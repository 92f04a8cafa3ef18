"""The Long-Context memory system: the whole (recent) conversation is the context.

Turns are appended to one buffer (`append_turn` -> `entry:<id>`); past `window_tokens` the oldest entries
are trimmed (`trim_buffer`, blamed on the window knob; the newest always stays). One `build_context` per
buffer state writes `context:buffer`, shared by every question, so the graph grows linearly. It does not
judge, rank by relevance or summarize.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import dspy
from memtrace_loop.memory_systems.answering import record_query, record_turn
from memtrace_loop.memory_systems.base import (
    MemorySystem,
    ReplayUnsupportedError,
    RestoredUnit,
    Retrieved,
)
from memtrace_loop.memory_systems.long_context.schema import (
    APPEND_STAGE,
    CONTEXT_STAGE,
    STAGES,
    TRIM_STAGE,
    LongContextKnobs,
)
from memtrace_loop.memory_systems.signatures import AnswerQuestion, human_date
from memtrace_loop.pipeline.backends.tokens import TokenCounter, build_token_counter
from memtrace_loop.pipeline.core.conventions import BUFFER_CONTEXT_NAME, OpKind, VarKind, entry_name
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.records import Conversation, Question, Turn
from memtrace_loop.pipeline.core.tracing import Tracer

CONTEXT_NAME = BUFFER_CONTEXT_NAME
SEPARATOR = "\n"
SEPARATOR_TOKENS = 1  # each entry is followed by one newline in the rendered buffer


def render_entry(speaker: str, iso_time: str, text: str) -> str:
    """One buffer line: `Alice says: text Timestamp: 8 May 2023`."""
    return f"{speaker} says: {text} Timestamp: {human_date(iso_time)}"


@dataclass(frozen=True)
class BufferEntry:
    """One live buffer entry: the turn it came from, its text, its token cost, its graph variable."""

    turn_id: str
    text: str
    tokens: int
    var: str


@dataclass(frozen=True)
class LongContextState:
    """The buffer at the end of a conversation (read-only): its live entries and the shared context."""

    conversation_id: str
    entries: tuple[BufferEntry, ...]
    trimmed: tuple[str, ...]  # turn ids trimmed out of the window, oldest first
    context: str
    context_var: str

    @property
    def tokens(self) -> int:
        return sum(e.tokens for e in self.entries)


class LongContextMemory(MemorySystem):
    knobs: LongContextKnobs
    name = "long_context"
    stages = STAGES

    def __init__(self, knobs: LongContextKnobs | None = None, counter: TokenCounter | None = None) -> None:
        super().__init__()
        self.respond = dspy.Predict(AnswerQuestion)
        self.knobs = knobs or LongContextKnobs()
        self.counter = counter or build_token_counter(self.knobs.tokenizer)

    def construction_knobs(self) -> str:
        return f"window_tokens={self.knobs.window_tokens};tokenizer={self.counter.name}"

    def non_llm_stages(self) -> dict[str, str]:
        return {
            APPEND_STAGE: "appends each turn to the buffer as 'Speaker says: text Timestamp: date'",
            TRIM_STAGE: f"window_tokens={self.knobs.window_tokens} (oldest entries trimmed past it); "
            f"tokenizer={self.counter.name}",
            CONTEXT_STAGE: "the whole live buffer is the context",
        }

    # ------------------------------------------------------------------ construction

    def ingest(
        self, conversation: Conversation, tracer: Tracer, on_turn: Callable[[Turn], None] | None = None
    ) -> LongContextState:
        buffer: deque[BufferEntry] = deque()
        total = 0
        trimmed: list[str] = []
        for turn in conversation.turns:
            entry = self._append(turn, tracer)
            buffer.append(entry)
            total += entry.tokens
            if total > self.knobs.window_tokens and len(buffer) > 1:
                total = self._trim(buffer, total, turn, tracer, trimmed)
            if on_turn is not None:
                on_turn(turn)
        context = SEPARATOR.join(e.text for e in buffer)
        context_var = tracer.variable(CONTEXT_NAME, VarKind.CONTEXT, context, {"entries": len(buffer), "tokens": total})
        tracer.operation(
            "build_context", CONTEXT_STAGE, OpKind.RETRIEVAL, [e.var for e in buffer], [context_var],
            meta={"entries": len(buffer), "tokens": total, "window_tokens": self.knobs.window_tokens},
        )
        return LongContextState(conversation.id, tuple(buffer), tuple(trimmed), context, context_var)

    def _append(self, turn: Turn, tracer: Tracer) -> BufferEntry:
        turn_var = record_turn(tracer, turn)
        text = render_entry(turn.speaker, turn.time, turn.text)
        tokens = self.counter.count(text) + SEPARATOR_TOKENS
        entry_var = tracer.variable(entry_name(turn.id), VarKind.BUFFER, text, {"turn": turn.id, "tokens": tokens})
        tracer.operation(
            "append_turn", APPEND_STAGE, OpKind.EXTRACTION, [turn_var], [entry_var], meta={"tokens": tokens}
        )
        return BufferEntry(turn.id, text, tokens, entry_var)

    def _trim(self, buffer: deque[BufferEntry], total: int, turn: Turn, tracer: Tracer, trimmed: list[str]) -> int:
        """Drop the oldest entries until the buffer fits (keeping the newest); one traced operation."""
        before = total
        dropped: list[BufferEntry] = []
        while total > self.knobs.window_tokens and len(buffer) > 1:
            entry = buffer.popleft()
            total -= entry.tokens
            dropped.append(entry)
        outputs = [
            tracer.variable(
                entry_name(e.turn_id), VarKind.BUFFER, "", {"turn": e.turn_id, "deleted": True, "trimmed_at": turn.id},
            )
            for e in dropped
        ]
        tracer.operation(
            "trim_buffer", TRIM_STAGE, OpKind.UPDATE, [e.var for e in dropped], outputs,
            meta={
                "window_tokens": self.knobs.window_tokens, "tokens_before": before, "tokens_after": total,
                "trimmed": [e.turn_id for e in dropped], "tokenizer": self.counter.name,
            },
        )
        trimmed.extend(e.turn_id for e in dropped)
        return total

    # ------------------------------------------------------------------ answering

    def retrieve(self, question: Question, state: LongContextState, tracer: Tracer) -> Retrieved:
        return Retrieved(record_query(tracer, question), state.context_var, state.context)

    # ------------------------------------------------------------------ replay

    def restore(self, graph: ExecutionGraph) -> LongContextState:
        """The buffer at question time: the shared context variable the graph holds."""
        var = graph.latest(CONTEXT_NAME)
        if var is None:
            raise ReplayUnsupportedError(f"graph {graph.graph_id!r} holds no {CONTEXT_NAME} variable")
        return LongContextState(graph.graph_id, (), (), var.value, var.id)

    def with_units(self, state: LongContextState, units: Sequence[RestoredUnit], tracer: Tracer) -> LongContextState:
        """A copy whose buffer starts with `units` (restored entries are older than the live ones)."""
        context = SEPARATOR.join([*(u.text for u in units), state.context])
        context_var = tracer.variable(
            CONTEXT_NAME, VarKind.CONTEXT, context, {"restored_from": [u.source for u in units]}
        )
        return LongContextState(state.conversation_id, state.entries, state.trimmed, context, context_var)
