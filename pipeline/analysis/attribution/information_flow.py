"""Where one piece of information went in a conversation graph (no LLM): the lineage attributor's reading.

A `Track` (the gold answer, or what an evidence turn says) followed from its turns: which variables carry it
and which construction operations dropped it (`Drop`); `live_memories` and `content_survivors` at question
time. It never blames (`lineage` does). Pure over one graph, which must not change while read (memoized).

>>> graph = ExecutionGraph("c1")
>>> prompt = graph.add_variable("prompt:extract", "prompt", "List the facts in the turn.").id
>>> said = graph.add_variable("turn:D1:1", "turn", "[8 May 2023] Alice: I moved to Lisbon in May.").id
>>> fact = graph.add_variable("memory:m1", "memory", "Alice moved in May 2023").id
>>> _ = graph.add_operation("extract_facts", "extract", OpKind.EXTRACTION, [said], [fact], prompt=prompt)
>>> flow = InformationFlow(graph, speakers=["Alice"])
>>> lisbon = Track('the answer "Lisbon"', content_tokens("Lisbon"), (said,), is_gold=True, text="Lisbon")
>>> live, drops = flow.follow(lisbon)
>>> sorted(live), [(drop.op.name, drop.carrier.id) for drop in drops]
(['turn:D1:1@1'], [('extract_facts', 'turn:D1:1@1')])
>>> [unit.id for unit in flow.live_memories], flow.content_survivors(lisbon)
(['memory:m1@1'], [])
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from memtrace_loop.pipeline.analysis.attribution.carrying import (
    content_tokens,
    coverage_needed,
    is_date_like,
    relative_date,
    turn_text,
)
from memtrace_loop.pipeline.backends.embeddings import Embedder
from memtrace_loop.pipeline.core.conventions import (
    CONSTRUCTION_OP_KINDS,
    MEMORY_KINDS,
    QUESTION_SIDE_KINDS,
    OpKind,
    VarKind,
    name_of,
)
from memtrace_loop.pipeline.core.graph import ExecutionGraph, Operation, Variable
from memtrace_loop.pipeline.core.records import CaseResult


@dataclass(frozen=True)
class Track:
    """One piece of information the answer needs, followed from its source turns."""

    label: str
    target: frozenset[str]
    sources: tuple[str, ...]  # turn variable ids
    is_gold: bool
    text: str = ""  # what the information says, for a match by meaning (the source turn, or the gold answer)


@dataclass(frozen=True)
class Drop:
    """A construction operation that consumed a carrier of a track and output none."""

    op: Operation
    carrier: Variable  # the carrier the operation consumed
    output: Variable | None  # what it produced instead (None when it produced nothing)


class InformationFlow:
    """Where information went in one conversation graph (memoized: the graph must not change)."""

    def __init__(
        self, graph: ExecutionGraph, speakers: Iterable[str] = (), embedder: Embedder | None = None,
        semantic_threshold: float = 0.8,
    ) -> None:
        """With an `embedder`, a variable also carries a turn's information when it says the same by the
        embedder's cosine (at least `semantic_threshold`). The `speakers` are no content of a turn."""
        self.graph = graph
        self.speakers = set(speakers)
        self.embedder = embedder
        self.semantic_threshold = semantic_threshold
        self._vector_by_text: dict[str, np.ndarray] = {}
        self._tokens_by_var: dict[str, frozenset[str]] = {}

    # ------------------------------------------------------------------ carrying

    def _tokens(self, var: Variable) -> frozenset[str]:
        found = self._tokens_by_var.get(var.id)
        if found is None:
            found = self._tokens_by_var[var.id] = content_tokens(var.value)
        return found

    def carries(self, var: Variable, target: frozenset[str]) -> bool:
        """Whether `var` holds enough of the `target`'s content tokens (`carrying.coverage_needed`)."""
        return bool(target) and len(self._tokens(var) & target) >= coverage_needed(target)

    def _vector(self, text: str) -> np.ndarray:
        found = self._vector_by_text.get(text)
        if found is None and self.embedder is not None:
            found = self._vector_by_text[text] = self.embedder.embed([text])[0]
        return found if found is not None else np.zeros(1)

    def _means(self, var: Variable, track: Track) -> bool:
        """Whether `var` says what the track's source turn says, by the embedder's cosine (a paraphrase)."""
        if self.embedder is None or track.is_gold or not track.text or not var.value:
            return False
        left, right = self._vector(track.text), self._vector(var.value)
        norm = float(np.linalg.norm(left) * np.linalg.norm(right))
        return norm > 0 and float(left @ right) / norm >= self.semantic_threshold

    def tracks(self, case: CaseResult, evidence: Sequence[str]) -> list[Track]:
        """What the case's answer needs from its `evidence` turns: the gold answer (from the turns that can
        carry it), then what each other turn says about the question."""
        question = case.question
        gold = content_tokens(question.gold)
        asked = content_tokens(f"{question.text} {question.gold}")
        tracks = []
        gold_is_date = is_date_like(question.gold)
        gold_sources = tuple(
            e for e in evidence
            if self.carries(self.graph.variable(e), gold)
            or (gold_is_date and relative_date(self.graph.variable(e).value) is not None)
        )
        if gold and gold_sources:
            tracks.append(Track(f"the answer \"{question.gold}\"", gold, gold_sources, True, question.gold))
        speakers = content_tokens(" ".join(self.speakers))
        for e in evidence:
            payload = (content_tokens(turn_text(self.graph.variable(e).value)) - speakers) & asked
            if payload and not (len(tracks) and tracks[0].is_gold and e in tracks[0].sources and payload <= gold):
                words = " ".join(sorted(payload))
                said = turn_text(self.graph.variable(e).value)
                tracks.append(Track(f"what {name_of(e)} says about \"{words}\"", payload, (e,), False, said))
        return tracks

    # ------------------------------------------------------------------ following

    def _is_construction(self, op: Operation) -> bool:
        graph = self.graph
        return not any(graph.variable(v).kind in QUESTION_SIDE_KINDS for v in (*op.inputs, *op.outputs))

    def follow(self, track: Track) -> tuple[set[str], list[Drop]]:
        """Carrier variables reachable from the track's sources, and the drops on the way (seq order)."""
        graph = self.graph
        live = set(track.sources)
        drops: list[Drop] = []
        heap: list[tuple[int, str]] = []
        seen_ops: set[str] = set()

        def push_consumers(var_id: str) -> None:
            for op in graph.consumers(var_id):
                if op.id not in seen_ops and op.prompt != var_id:
                    seen_ops.add(op.id)
                    heapq.heappush(heap, (op.seq, op.id))

        for source in track.sources:
            push_consumers(source)
        while heap:
            op = graph.operation(heapq.heappop(heap)[1])
            if not self._is_construction(op):
                continue
            if op.kind == OpKind.RETRIEVAL:
                continue  # a search output is a view of the store, not a new carrier of the information
            # a non-LLM copy step (buffer append, chunking) that keeps a live turn's words keeps its information,
            # even when that information is implicit (a relative date the answer resolves later)
            copied = [turn_text(graph.variable(v).value).strip() for v in op.inputs if v in live] if (
                op.prompt is None
            ) else []
            outputs = [graph.variable(v) for v in op.outputs]
            if self._is_copy_of_turns(op, live):
                # a copy step (buffer append, chunking) carries a turn only by holding it whole: a turn cut
                # into fragments has its words in different units, which no single unit carries
                carried = [var for var in outputs if any(text and text in var.value for text in copied)]
            else:
                carried = [
                    var for var in outputs
                    if self.carries(var, track.target) or any(text and text in var.value for text in copied)
                    or self._means(var, track)
                ]
            for var in carried:
                if var.id not in live:
                    live.add(var.id)
                    push_consumers(var.id)
            if not carried and (op.kind in CONSTRUCTION_OP_KINDS or op.failed):  # a failed write drops it too
                consumed = next(graph.variable(v) for v in op.inputs if v in live)
                output = graph.variable(op.outputs[0]) if op.outputs else None
                drops.append(Drop(op, consumed, output))
        # a carrier fanned out to several writes (one decision, several ADDs) is not dropped by the writes
        # that did not take the information when another one did
        kept = [d for d in drops if not any(
            out in live for op in graph.consumers(d.carrier.id) if op.id != d.op.id for out in op.outputs
        )]
        return live, kept

    def _is_copy_of_turns(self, op: Operation, live: set[str]) -> bool:
        """A non-LLM step that copies live turns into memory units (no prompt; a live input is a turn)."""
        return op.prompt is None and any(v in live and self.graph.variable(v).kind == VarKind.TURN for v in op.inputs)

    # ------------------------------------------------------------------ memory units

    def copied_from(self, unit: Variable, sources: Sequence[str]) -> bool:
        """Whether `unit` was made by a copy step straight from one of `sources` (a fragment of it)."""
        producer = self.graph.producer(unit.id)
        return producer is not None and producer.prompt is None and any(s in producer.inputs for s in sources)

    def is_fragment(self, unit: Variable) -> bool:
        """A unit a copy step made from turns without holding any of them whole (a piece of a cut turn)."""
        if unit.kind not in MEMORY_KINDS:
            return False
        producer = self.graph.producer(unit.id)
        if producer is None or producer.prompt is not None:
            return False
        turns = [self.graph.variable(v) for v in producer.inputs if self.graph.variable(v).kind == VarKind.TURN]
        return bool(turns) and not any(turn_text(t.value).strip() in unit.value for t in turns)

    def crowding_copy_step(self, retrieval_op: Operation) -> Operation | None:
        """The copy step whose fragments make up at least half of what a retrieval returned, if any."""
        units = [self.graph.variable(v) for v in retrieval_op.inputs if self.graph.variable(v).kind in MEMORY_KINDS]
        fragments = [u for u in units if self.is_fragment(u)]
        if not units or 2 * len(fragments) < len(units):
            return None
        return self.graph.producer(fragments[0].id)

    def _written_by_llm(self, unit: Variable) -> bool:
        """Whether an LLM wrote `unit` (directly, or through a store write executing its decision)."""
        producer = self.graph.producer(unit.id)
        return producer is not None and self.decision_maker(producer).prompt is not None

    def content_survivors(self, track: Track) -> list[Variable]:
        """Live units carrying the track's content not copied from its sources: one an LLM wrote (a merged or
        rephrased memory), or, for the gold answer, a copy of another turn saying it."""
        return [
            m for m in self.live_memories
            if self.carries(m, track.target)
            and not self.copied_from(m, track.sources)
            and (track.is_gold or self._written_by_llm(m))
        ]

    @cached_property
    def live_memories(self) -> tuple[Variable, ...]:
        """The memory units at question time: latest version of each, not empty, not deleted."""
        latest = (self.graph.latest(name) for name in self.graph.names())
        return tuple(
            v for v in latest if v is not None and v.kind in MEMORY_KINDS and v.value and not v.meta.get("deleted")
        )

    def decision_maker(self, op: Operation) -> Operation:
        """For a store write without a prompt, the LLM operation whose decision it executed."""
        if op.prompt is not None:
            return op
        for var_id in op.inputs:
            producer = self.graph.producer(var_id)
            if producer is not None and producer.prompt is not None:
                return producer
        return op
