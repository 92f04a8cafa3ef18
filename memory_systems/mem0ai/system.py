"""`memory_system=mem0ai`: the real, unmodified `mem0ai` 1.0.x library behind our memory-system contract.

One `Memory` per conversation and one `add()` per turn (a user message `<Speaker>: <text>`, the session date
in metadata); before each add mem0's two prompt hooks are set from our stages (`hooks.with_session_date`).
Its LLM and embedder go through ours (`bridge`), its steps are observed (`observers`) and traced on the
calling thread (`trace`); `memory.search` is the retrieval (first `top_k` hits the context, the rest near
misses), our `respond` answers. `restore` / `with_units` rebuild stores without an LLM for replay.
`FactExtraction` / `UpdateMemory` declare the two mem0 stages (instructions: the hook texts; never run through
a DSPy adapter: mem0 builds its own messages, `recall` rebuilds them for replay).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

import dspy
import pydantic
from memtrace_loop.memory_systems.answering import record_query, record_retrieval
from memtrace_loop.memory_systems.base import MemorySystem, RecordedCall, RestoredUnit, Retrieved, ranked_depth
from memtrace_loop.memory_systems.mem0.repair import Action, decision_units, fact_units, read_turn
from memtrace_loop.memory_systems.mem0ai.bridge import EXTRACTION, UPDATE
from memtrace_loop.memory_systems.mem0ai.hooks import (
    HOOK_BY_STAGE,
    default_hooks,
    installed_version,
    with_session_date,
)
from memtrace_loop.memory_systems.mem0ai.memory import (
    close_memory,
    insert_units,
    live_units_of,
    new_folder,
    open_memory,
)
from memtrace_loop.memory_systems.mem0ai.observers import AddRecorder
from memtrace_loop.memory_systems.mem0ai.recall import Mem0StagePredict, recorded_inputs
from memtrace_loop.memory_systems.mem0ai.schema import STAGES, Mem0aiKnobs
from memtrace_loop.memory_systems.mem0ai.trace import SEARCH_STAGE, STORE_STAGE, AddTrace, LiveUnit, UnitBook
from memtrace_loop.memory_systems.signatures import AnswerQuestion, render_context_line
from memtrace_loop.pipeline.backends.embeddings import Embedder
from memtrace_loop.pipeline.core.conventions import NEAR_MISSES, VarKind, memory_name
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.records import Conversation, Question, Turn
from memtrace_loop.pipeline.core.tracing import Tracer


class Mem0Action(pydantic.BaseModel):
    """One entry of mem0's update reply `{"memory": [...]}`: `id` is "0", "1", ... (the memories shown)."""

    id: str = ""
    text: str = ""
    event: Literal["ADD", "UPDATE", "DELETE", "NONE"] = "NONE"
    old_memory: str | None = None

class FactExtraction(dspy.Signature):
    """mem0's fact extraction prompt (replaced at build by the installed library's default)."""

    conversation: str = dspy.InputField(desc="mem0's user message: `Input:\\nuser: <Speaker>: <text>`")
    session_date: str = dspy.InputField(desc="the turn's session date (YYYY-MM-DD), for the `Today's date` line")
    facts: list[str] = dspy.OutputField(desc='the facts, replied as the JSON object {"facts": [...]}')

class UpdateMemory(dspy.Signature):
    """mem0's update memory prompt (replaced at build by the installed library's default)."""

    existing_memories: str = dspy.InputField(desc="the similar memories mem0 found, with ids 0, 1, ...")
    new_facts: list[str] = dspy.InputField(desc="the facts just extracted")
    actions: list[Mem0Action] = dspy.OutputField(desc='replied as the JSON object {"memory": [...]}')

@dataclass(frozen=True, eq=False)
class Mem0aiState:
    """One conversation's mem0 memory: its folder, the `Memory`, the lock that serializes searches on
    it, and its units live at question time (our name, mem0 id, graph variable of the current version)."""

    conversation_id: str
    folder: str
    memory: Any = field(repr=False)
    units: tuple[LiveUnit, ...]
    created: int  # units ever created (the next one is m<created + 1>)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def var_by_mem0_id(self) -> Mapping[str, str]:
        return MappingProxyType({u.mem0_id: u.var for u in self.units})

class Mem0aiMemory(MemorySystem):
    knobs: Mem0aiKnobs
    name = "mem0ai"
    stages = STAGES

    def __init__(self, embedder: Embedder, knobs: Mem0aiKnobs | None = None) -> None:
        super().__init__()
        hooks = default_hooks()
        self.fact_extraction = Mem0StagePredict(FactExtraction.with_instructions(hooks[EXTRACTION]))
        self.update_memory = Mem0StagePredict(UpdateMemory.with_instructions(hooks[UPDATE]))
        self.respond = dspy.Predict(AnswerQuestion)
        self.embedder = embedder
        self.knobs = knobs or Mem0aiKnobs()
        self.hidden: frozenset[str] = frozenset()  # unit names the answer-time search skips (benchmark)

    def construction_knobs(self) -> str:
        return f"mem0ai={installed_version()};embedder={self.embedder!r}"

    def non_llm_stages(self) -> dict[str, str]:
        return {
            SEARCH_STAGE: f"mem0's own search per fact (limit 5, fixed in mem0 1.0.x); embedder={self.embedder!r}",
            STORE_STAGE: "mem0 applies the decision's ADD/UPDATE/DELETE to its Qdrant store and history table",
            "retrieve": f"memory.search(limit=top_k={self.knobs.top_k})",
        }

    def without_units(self, names: frozenset[str]) -> Mem0aiMemory:
        """A copy whose answer-time search never returns the units `names` (the benchmark's miss)."""
        system = self.deepcopy()
        system.hidden = frozenset(names)
        return system

    # ------------------------------------------------------------------ construction

    def ingest(
        self, conversation: Conversation, tracer: Tracer, on_turn: Callable[[Turn], None] | None = None
    ) -> Mem0aiState:
        recorder = AddRecorder()
        folder = new_folder(f"{conversation.id}")
        memory, bridge = open_memory(folder, self.embedder, recorder)
        try:
            bridge.bind({EXTRACTION: self.fact_extraction.lm or dspy.settings.lm,
                         UPDATE: self.update_memory.lm or dspy.settings.lm})
            prompts = self.prompt_set()
            texts = {stage: prompts[stage] for stage in HOOK_BY_STAGE}
            units = UnitBook()
            trace = AddTrace(tracer, units, texts)
            for turn in conversation.turns:
                memory.config.custom_fact_extraction_prompt = with_session_date(texts[EXTRACTION], turn.time[:10])
                memory.config.custom_update_memory_prompt = texts[UPDATE]
                with recorder.recording() as events:
                    memory.add(
                        [{"role": "user", "content": f"{turn.speaker}: {turn.text}"}],
                        user_id=conversation.id, metadata={"session_date": turn.time[:10], "turn": turn.id},
                    )
                trace.write(turn, events)
                if on_turn is not None:
                    on_turn(turn)
        except BaseException:
            close_memory(memory, folder)
            raise
        return _state(conversation.id, folder, memory, units.live(), units.created)

    # ------------------------------------------------------------------ answering

    def retrieve(self, question: Question, state: Mem0aiState, tracer: Tracer) -> Retrieved:
        query_var = record_query(tracer, question)
        k = self.knobs.top_k
        var_by_id = state.var_by_mem0_id
        hidden = {u.mem0_id for u in state.units if u.name in self.hidden}
        with state.lock:
            found = state.memory.search(
                question.text, user_id=state.conversation_id, limit=ranked_depth(k) + len(hidden)
            )
        ranked = [hit for hit in found.get("results", []) if hit["id"] not in hidden][: ranked_depth(k)]
        hits = ranked[:k]
        context = "\n".join(
            render_context_line(hit["memory"], str((hit.get("metadata") or {}).get("session_date", "")))
            for hit in hits
        )
        context_var = record_retrieval(
            tracer, question, query_var, [var_by_id[h["id"]] for h in hits if h["id"] in var_by_id], context,
            meta={"k": k, "scores": [round(float(h.get("score") or 0.0), 4) for h in hits],
                  NEAR_MISSES: [var_by_id[h["id"]] for h in ranked[k:] if h["id"] in var_by_id]},
        )
        return Retrieved(query_var, context_var, context)

    # ------------------------------------------------------------------ replay

    def restore(self, graph: ExecutionGraph) -> Mem0aiState:
        """A fresh store holding every unit live at question time (inserted directly, no LLM call)."""
        units, created = live_units_of(graph)
        return self._state_with(graph.graph_id, units, created)

    def with_units(self, state: Mem0aiState, units: Sequence[RestoredUnit], tracer: Tracer) -> Mem0aiState:
        """A new state holding `state`'s units and `units` (recorded as new memory variables)."""
        book = UnitBook(state.units, state.created)
        added = list(state.units)
        for restored in units:
            name = book.new_name()
            var = tracer.variable(
                memory_name(name), VarKind.MEMORY, restored.text,
                {"time": restored.time, "restored_from": restored.source},
            )
            added.append(LiveUnit(name, "", var, restored.text, restored.time, ""))
        return self._state_with(state.conversation_id, added, book.created)

    def recorded_call(self, graph: ExecutionGraph, op_id: str) -> RecordedCall:
        """A mem0 stage's call as its `Mem0StagePredict` makes it again (`recall.recorded_inputs`): the
        same messages mem0 sent, built around the instruction in force."""
        op = graph.operation(op_id)
        if op.stage in HOOK_BY_STAGE:
            return RecordedCall(op.stage, recorded_inputs(graph, op), str(read_turn(graph, op).meta.get("time", "")))
        return super().recorded_call(graph, op_id)

    def repaired_units(self, graph: ExecutionGraph, op_id: str, prediction: Any) -> tuple[RestoredUnit, ...]:
        """`fact_extraction`: the new facts; `update_memory`: what the new decision writes and the old
        versions it keeps (`mem0.repair`; mem0 names the memories shown "0", "1", ...)."""
        op = graph.operation(op_id)
        if op.stage == EXTRACTION:
            return fact_units(graph, op, prediction.facts)
        if op.stage == UPDATE:
            search = graph.producer(op.inputs[1])
            shown_by_temp = (search.meta.get("shown") or {}) if search is not None else {}
            shown = {str(name): str(temp) for temp, name in shown_by_temp.items() if name}
            new = [a for a in (_action(item) for item in prediction.actions) if a is not None]
            return decision_units(graph, op, new, shown)
        return super().repaired_units(graph, op_id, prediction)

    def _state_with(self, conversation_id: str, units: Sequence[LiveUnit], created: int) -> Mem0aiState:
        folder = new_folder(f"{conversation_id}-replay")
        memory, _ = open_memory(folder, self.embedder, AddRecorder())
        try:
            placed = insert_units(memory, self.embedder, conversation_id, units)
        except BaseException:
            close_memory(memory, folder)
            raise
        return _state(conversation_id, folder, memory, placed, created)

def _action(item: Any) -> Action | None:
    """One entry of mem0's `{"memory": [...]}` reply as a repair reads it (mem0 skips a non-object)."""
    if not isinstance(item, dict):
        return None
    return Action(str(item.get("event", "")), str(item.get("id", "")), str(item.get("text") or ""))

def _state(conversation_id: str, folder: str, memory: Any, units: tuple[LiveUnit, ...], created: int) -> Mem0aiState:
    """The state, whose memory is closed and folder removed when it is garbage collected."""
    state = Mem0aiState(conversation_id, folder, memory, units, created)
    weakref.finalize(state, close_memory, memory, folder)
    return state
