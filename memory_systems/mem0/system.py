"""The Mem0-style memory system: extract (LLM) -> search similar -> decide (LLM) -> store; retrieve, respond.

Every step is traced; a failed or unparsable LLM call is a failed operation and the turn goes on empty.
Stage repairs for replay are `mem0.repair`. It does not judge answers or log.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import dspy
import numpy as np
from memtrace_loop.memory_systems.answering import record_query, record_retrieval, record_turn
from memtrace_loop.memory_systems.base import (
    MemorySystem,
    RecordedCall,
    RestoredUnit,
    Retrieved,
    ranked_depth,
)
from memtrace_loop.memory_systems.mem0.repair import Action, decision_units, fact_units, read_turn
from memtrace_loop.memory_systems.mem0.schema import STAGES, STORE_STAGE, Mem0Knobs
from memtrace_loop.memory_systems.signatures import (
    AnswerQuestion,
    DecideUpdates,
    ExtractFacts,
    MemoryAction,
    render_context_line,
    render_memory_line,
    render_turn,
)
from memtrace_loop.memory_systems.store import InMemoryVectorStore, MemoryUnit
from memtrace_loop.pipeline.backends.embeddings import Embedder
from memtrace_loop.pipeline.core.conventions import (
    NEAR_MISSES,
    Namespace,
    OpKind,
    OpStatus,
    VarKind,
    decision_name,
    facts_name,
    memory_name,
    prefix,
    similar_name,
)
from memtrace_loop.pipeline.core.graph import ExecutionGraph, variable_id
from memtrace_loop.pipeline.core.records import Conversation, Question, Turn
from memtrace_loop.pipeline.core.tracing import Tracer

_SHOWN_ID = re.compile(r"^\[([^\]\n]+)\] ", re.MULTILINE)  # `[m3] text`: a memory shown to `decide`


def memory_var(unit: MemoryUnit) -> str:
    """The id of the graph variable holding this version of a memory unit."""
    return variable_id(memory_name(unit.id), unit.version)


@dataclass
class Mem0State:
    """The memory built from one conversation: its store (read-only once ingestion is over)."""

    conversation_id: str
    store: InMemoryVectorStore


class Mem0Memory(MemorySystem):
    knobs: Mem0Knobs
    name = "mem0"
    stages = STAGES

    def __init__(self, embedder: Embedder, knobs: Mem0Knobs | None = None) -> None:
        super().__init__()
        self.extract = dspy.Predict(ExtractFacts)
        self.decide = dspy.Predict(DecideUpdates)
        self.respond = dspy.Predict(AnswerQuestion)
        self.embedder = embedder
        self.knobs = knobs or Mem0Knobs()

    def construction_knobs(self) -> str:
        return f"similar_k={self.knobs.similar_k};embedder={self.embedder!r}"

    def non_llm_stages(self) -> dict[str, str]:
        return {
            "search_similar": f"similar_k={self.knobs.similar_k} (existing memories shown to decide, per fact); "
            f"embedder={self.embedder!r}",
            STORE_STAGE: "applies ADD/UPDATE/DELETE to the versioned vector store",
            "retrieve": f"top_k={self.knobs.top_k} memories by cosine similarity to the question",
        }

    # ------------------------------------------------------------------ construction

    def ingest(
        self, conversation: Conversation, tracer: Tracer, on_turn: Callable[[Turn], None] | None = None
    ) -> Mem0State:
        state = Mem0State(conversation.id, InMemoryVectorStore(self.embedder))
        for turn in conversation.turns:
            self._ingest_turn(turn, state.store, tracer)
            if on_turn is not None:
                on_turn(turn)
        return state

    def _ingest_turn(self, turn: Turn, store: InMemoryVectorStore, tracer: Tracer) -> None:
        turn_var = record_turn(tracer, turn)
        with tracer.stage(
            self.extract, "extract", op="extract_facts", kind=OpKind.EXTRACTION, inputs=[turn_var],
            turn=render_turn(turn.speaker, turn.time, turn.text),
        ) as extracted:
            facts = [f.strip() for f in (extracted.prediction.facts if extracted.ok else []) if f and f.strip()]
            facts_var = extracted.output(facts_name(turn.id), VarKind.FACTS, json.dumps(facts))
        if not facts:
            return

        vector_by_text = dict(zip(facts, self.embedder.embed(facts), strict=True))  # one batch per turn
        similar: dict[str, MemoryUnit] = {}
        for fact in facts:
            for hit in store.search(fact, self.knobs.similar_k, vector_by_text[fact]):
                similar.setdefault(hit.unit.id, hit.unit)
        lines = "\n".join(render_memory_line(u.id, u.text) for u in similar.values())
        similar_var = tracer.variable(similar_name(turn.id), VarKind.RETRIEVED, lines)
        tracer.operation(
            "search_similar", "search_similar", OpKind.RETRIEVAL,
            [facts_var, *(memory_var(u) for u in similar.values())], [similar_var], meta={"k": self.knobs.similar_k},
        )

        with tracer.stage(
            self.decide, "decide", op="decide_updates", kind=OpKind.UPDATE, inputs=[facts_var, similar_var],
            existing_memories=lines, new_facts=facts,
        ) as decided:
            actions: list[MemoryAction] = list(decided.prediction.actions) if decided.ok else []
            decision_var = decided.output(
                decision_name(turn.id), VarKind.DECISION, json.dumps([a.model_dump() for a in actions])
            )
        for action in actions:
            self._apply(action, turn, store, tracer, decision_var, vector_by_text.get(action.text.strip()))

    def _apply(
        self, action: MemoryAction, turn: Turn, store: InMemoryVectorStore, tracer: Tracer, decision_var: str,
        vector: np.ndarray | None,
    ) -> None:
        if action.event == "NONE":
            return
        if action.event == "ADD":
            if not action.text.strip():
                self._reject(action, "ADD without text", tracer, decision_var)
                return
            unit = store.add(action.text.strip(), turn.time, vector)
            out = tracer.variable(memory_name(unit.id), VarKind.MEMORY, unit.text, {"time": unit.time, "turn": turn.id})
            tracer.operation("memory_add", STORE_STAGE, OpKind.EXTRACTION, [decision_var], [out])
            return
        old = store.get(action.id or "")
        if old is None:
            self._reject(action, f"no live memory with id {action.id!r}", tracer, decision_var)
            return
        if action.event == "UPDATE":
            if not action.text.strip():
                self._reject(action, "UPDATE without text", tracer, decision_var)
                return
            unit = store.update(old.id, action.text.strip(), turn.time, vector)
            kind, op_name = OpKind.UPDATE, "memory_update"
        else:
            unit = store.delete(old.id, turn.time)
            kind, op_name = OpKind.DELETION, "memory_delete"
        out = tracer.variable(
            memory_name(unit.id), VarKind.MEMORY, "" if unit.deleted else unit.text,
            {"time": unit.time, "turn": turn.id, "deleted": unit.deleted},
        )
        tracer.operation(op_name, STORE_STAGE, kind, [decision_var, memory_var(old)], [out])

    @staticmethod
    def _reject(action: MemoryAction, why: str, tracer: Tracer, decision_var: str) -> None:
        tracer.operation(
            f"memory_{action.event.lower()}", STORE_STAGE, OpKind.OTHER, [decision_var], [],
            status=OpStatus.FAILED, error=f"invalid action {action.model_dump_json()}: {why}",
        )

    # ------------------------------------------------------------------ answering

    def retrieve(self, question: Question, state: Mem0State, tracer: Tracer) -> Retrieved:
        query_var = record_query(tracer, question)
        k = self.knobs.top_k
        ranked = state.store.search(question.text, ranked_depth(k))
        hits = ranked[:k]
        context = "\n".join(render_context_line(h.unit.text, h.unit.time) for h in hits)
        context_var = record_retrieval(
            tracer, question, query_var, [memory_var(h.unit) for h in hits], context,
            meta={"k": k, "scores": [round(h.score, 4) for h in hits],
                  NEAR_MISSES: [memory_var(h.unit) for h in ranked[k:]]},
        )
        return Retrieved(query_var, context_var, context)

    # ------------------------------------------------------------------ replay

    def restore(self, graph: ExecutionGraph) -> Mem0State:
        """The store at question time, rebuilt by re-applying every unit's versions in unit order."""
        store = InMemoryVectorStore(self.embedder)
        names = sorted(graph.names(prefix(Namespace.MEMORY)), key=_unit_number)
        for name in names:
            versions = graph.versions(name)
            first = versions[0]
            unit = store.add(first.value, str(first.meta.get("time", "")))
            for version in versions[1:]:
                if version.meta.get("deleted"):
                    store.delete(unit.id, str(version.meta.get("time", "")))
                else:
                    store.update(unit.id, version.value, str(version.meta.get("time", "")))
        return Mem0State(graph.graph_id, store)

    def with_units(self, state: Mem0State, units: Sequence[RestoredUnit], tracer: Tracer) -> Mem0State:
        store = state.store.copy()
        for restored in units:
            unit = store.add(restored.text, restored.time)
            tracer.variable(
                memory_name(unit.id), VarKind.MEMORY, unit.text, {"time": unit.time, "restored_from": restored.source}
            )
        return Mem0State(state.conversation_id, store)

    def recorded_call(self, graph: ExecutionGraph, op_id: str) -> RecordedCall:
        """`extract`: the turn as rendered (the turn variable's value); `decide`: the similar memories'
        lines and the facts list (the values of its two input variables)."""
        op = graph.operation(op_id)
        time = str(read_turn(graph, op).meta.get("time", "")) if op.stage in ("extract", "decide") else ""
        if op.stage == "extract" and len(op.inputs) == 1:
            return RecordedCall("extract", {"turn": graph.variable(op.inputs[0]).value}, time)
        if op.stage == "decide" and len(op.inputs) == 2:
            facts, similar = (graph.variable(v) for v in op.inputs)
            inputs = {"existing_memories": similar.value, "new_facts": json.loads(facts.value)}
            return RecordedCall("decide", inputs, time)
        return super().recorded_call(graph, op_id)

    def repaired_units(self, graph: ExecutionGraph, op_id: str, prediction: Any) -> tuple[RestoredUnit, ...]:
        """`extract`: the new facts (what the store would receive); `decide`: see `mem0.repair`."""
        op = graph.operation(op_id)
        if op.stage == "extract":
            return fact_units(graph, op, prediction.facts)
        if op.stage == "decide":
            shown = {key: key for key in _SHOWN_ID.findall(graph.variable(op.inputs[1]).value)}
            new = [a for a in (_action(item) for item in prediction.actions) if a is not None]
            return decision_units(graph, op, new, shown)
        return super().repaired_units(graph, op_id, prediction)


def _action(item: Any) -> Action | None:
    """A `MemoryAction` (or its recorded JSON dump) as a repair reads it."""
    data = item.model_dump() if isinstance(item, MemoryAction) else item
    if not isinstance(data, dict):
        return None
    return Action(str(data.get("event", "")), str(data.get("id") or ""), str(data.get("text") or ""))


def _unit_number(name: str) -> int:
    key = name.split(":", 1)[1]
    digits = key.lstrip("m")
    return int(digits) if digits.isdigit() else 0
