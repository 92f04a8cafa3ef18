"""The contract of a memory system: the one `MemorySystemSpec` its folder exports as `SPEC`.

A memory system is one folder under `memory_systems/` (its code, its `SPEC` in `__init__.py`, and,
for the simulated world, its stage table in `sim.py`), one line in `memory_systems/registry.py` and one
config file `conf/memory_system/<name>.yaml`. Everything outside the folder (the loop, the attribution
benchmark, the attributors, replay, the report, the sweeps) reads the spec and never names a system.

The contract, in the manner of GEPA's adapter protocol:

- `build(knobs, embedder) -> MemorySystem`: the system (`memory_systems.base`) from its validated knobs
  record (`knobs`: the schema and defaults of its `memory_system` config node). `ingest` builds ONE
  conversation's memory and returns an opaque state handle (it may name a store outside the process: a
  Qdrant folder, an SQLite file); `retrieve` reads it; `restore(graph)` and `with_units(state, units,
  tracer)` give replay a state of its own (a snapshot, never a mutation), or raise
  `ReplayUnsupportedError` and replay leaves its cases unverified. Everything the graph records is
  recorded by the system's own code on the calling thread (wrap a library's calls, record their results
  after they return): work in the system's own threads does not see our tracer's context.
- `stages` (`StageSpec`, every stage in pipeline order), `faults` (the attribution benchmark's fault
  plans) and `generous_knobs` (the benchmark's perfect world, where retrieval and windows lose nothing),
  `prior` (`WalkPrior`), `unit_namespaces` and `op_kinds` (what its traced graph holds; the convention
  and system tests check every run against them), `replay` (`Replay`), `knob_worlds` (the rescue
  oracle's degraded worlds; `()`: none; `None`, not stated, makes the oracle refuse the system),
  `compare` (in default sweeps), `sim` (the module exporting `STAGES`, the rows its LLM stages add to
  the simulated world's stage table; only the world reaches it, through the registry; "" when the
  world's own table covers its stages), `prompt_formats` (its own prompt file formats, e.g. a config
  fragment of the library it wraps: every export writes each beside our own file, and `prompts=<file>`
  loads our layout or a document of any of them).

This module defines the records only; it builds nothing and imports no system.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from memtrace_loop.memory_systems.stages import StageRepair, StageSpec, construction_stages
from memtrace_loop.pipeline.core.conventions import Namespace, OpKind
from memtrace_loop.pipeline.core.graph import ExecutionGraph, Operation
from memtrace_loop.pipeline.core.prompt_formats import PromptFormat
from memtrace_loop.pipeline.core.records import Conversation, Turn

if TYPE_CHECKING:  # the records are read without DSPy (the config tree reads every system's SPEC)
    from memtrace_loop.memory_systems.base import MemorySystem
    from memtrace_loop.pipeline.backends.embeddings import Embedder

__all__ = [
    "WRONG_ANSWER",
    "EditKind",
    "FaultKind",
    "FaultPlan",
    "HideEvidenceFault",
    "KnobFault",
    "KnobWorld",
    "MemorySystemSpec",
    "PromptFormat",
    "Replay",
    "ReplyFault",
    "StageRepair",
    "StageSpec",
    "UnitChangeFault",
    "WalkPrior",
]

KnobsT = TypeVar("KnobsT")


class FaultKind(StrEnum):
    EXTRACTION_DROP = "extraction_drop"  # a fact dropped at extraction
    UPDATE_OVERWRITE = "update_overwrite"  # a memory overwritten at update with unrelated text
    DELETION = "deletion"  # the unit holding the evidence deleted
    RETRIEVAL_MISS = "retrieval_miss"  # the evidence removed from a retrieval result
    RESPONSE_WRONG = "response_wrong"  # a wrong answer given a perfect context
    TRIMMED_BUFFER = "trimmed_buffer"  # a window knob trimming the evidence entry out of the buffer
    CHUNK_SPLIT = "chunk_split"  # a chunk-size knob splitting the evidence turn
    DROPPED_ACTION = "dropped_action"  # a decision's action that never reached the store (an id the library drops)


class EditKind(StrEnum):
    """The reply edits the benchmark knows (`experiments.lab.benchmark.edits`), by the output they edit."""

    WRONG_ANSWER = "wrong_answer"  # `answer`: a wrong answer to the question
    DROP_FACTS = "drop_facts"  # `facts`: the evidence turn's facts left out
    DROP_EVENTS = "drop_events"  # `events`: the evidence turn's events left out
    DROP_NARRATIVE = "drop_narrative"  # `narrative`: the evidence turn's content left out
    CHANGE_UNITS = "change_units"  # `actions`: UPDATE/DELETE the evidence units by their ids (Mem0-style decide)
    CHANGE_SHOWN_UNITS = "change_shown_units"  # `memory` (mem0 1.0.x): the same, by the ids mem0 shows them under
    DROP_ACTION = "drop_action"  # `memory` (mem0 1.0.x): the evidence turn's ADDs given an id mem0 never showed


@dataclass(frozen=True)
class ReplyFault:
    """An LLM fault: the reply of ONE call is edited by each of `edits` (chained; the first must fire).
    The truth is the first operation of `stage` that read the evidence turn (or, for a stage that never
    reads turns, what was derived from it; `stage=""`: the operation that wrote the question's answer);
    `error` is its error type (an `ErrorType` value)."""

    kind: FaultKind
    edits: tuple[EditKind, ...]
    stage: str
    error: str


@dataclass(frozen=True)
class UnitChangeFault:
    """An LLM decision changes (`event`: UPDATE or DELETE) the memory units the evidence turn added
    (`units(graph, turn_id)`: their ids); the truth is the decision that ordered the store operation
    `store_op` on one of them. `edit` is the reply edit that does it (by the decision's reply shape)."""

    kind: FaultKind
    event: str
    store_op: str
    error: str
    units: Callable[[ExecutionGraph, str], tuple[str, ...]]
    edit: EditKind = EditKind.CHANGE_UNITS


@dataclass(frozen=True)
class HideEvidenceFault:
    """A retrieval miss: `hide(system, graph, turn_id)` is a copy of the system whose answer-time search
    never returns the units holding the evidence turn (None: nothing to hide)."""

    hide: Callable[[MemorySystem, ExecutionGraph, str], MemorySystem | None]
    kind: FaultKind = FaultKind.RETRIEVAL_MISS
    error: str = "RetrievalError"


@dataclass(frozen=True)
class KnobFault:
    """A knob fault: `settings(system, graph, conversation, turn)` lists knob changes to try (in order;
    one the knobs record rejects is skipped); `caused(graph, turn_id)` finds the operation that lost
    the evidence under them (None: it did not)."""

    kind: FaultKind
    settings: Callable[[MemorySystem, ExecutionGraph, Conversation, Turn], tuple[Mapping[str, Any], ...]]
    caused: Callable[[ExecutionGraph, str], Operation | None]
    error: str


FaultPlan = ReplyFault | UnitChangeFault | HideEvidenceFault | KnobFault
WRONG_ANSWER = ReplyFault(FaultKind.RESPONSE_WRONG, (EditKind.WRONG_ANSWER,), "", "ResponseError")


@dataclass(frozen=True)
class WalkPrior:
    """Where the LLM attributor's walk looks first (`first_stages`/`first_kinds` rank ahead of the
    rest; `then_kinds` next), what it skips, and whether the question's retrieval is seeded into the
    first frontier."""

    first_stages: frozenset[str] = frozenset()
    first_kinds: frozenset[OpKind] = frozenset()
    then_kinds: frozenset[OpKind] = frozenset()
    skip_stages: frozenset[str] = frozenset()
    seed_retrieval: bool = False

    def rank(self, op: Operation) -> int:
        if op.stage in self.first_stages or op.kind in self.first_kinds:
            return 0
        return 1 if op.kind in self.then_kinds else 2


class Replay(StrEnum):
    """How far replay (`pipeline.analysis.attribution.replay`) can go on a system."""

    FULL = "full"  # memory rebuilt from a graph (`restore`, `with_units`), every LLM stage re-run from its inputs
    MEMORY = "memory"  # memory rebuilt; only the answer stage is re-run (no repair hooks of its own stages)
    NONE = "none"  # neither: `restore` and the repair hooks raise `ReplayUnsupportedError`, its blames unverifiable


@dataclass(frozen=True)
class KnobWorld:
    """One of the rescue oracle's degraded worlds as data: default prompts, `knobs` (fields of the
    system's knobs record) made small; `owners` names the stage owning a knob no stage of the spec's
    table declares (a degraded knob with no owner is a held setting of the world, never repaired)."""

    name: str
    knobs: Mapping[str, Any]
    owners: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        object.__setattr__(self, "knobs", MappingProxyType(dict(self.knobs)))
        object.__setattr__(self, "owners", MappingProxyType(dict(self.owners)))


@dataclass(frozen=True)
class MemorySystemSpec(Generic[KnobsT]):
    """What a memory system is to the rest of the project (the contract: the module docstring)."""

    name: str
    knobs: type[KnobsT]
    build: Callable[[KnobsT, Embedder], MemorySystem]
    stages: tuple[StageSpec, ...]
    unit_namespaces: frozenset[Namespace]
    op_kinds: frozenset[OpKind]
    replay: Replay
    faults: tuple[FaultPlan, ...] = ()
    generous_knobs: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    prior: WalkPrior = WalkPrior()
    compare: bool = True
    sim: str = ""
    prompt_formats: tuple[PromptFormat, ...] = ()
    knob_worlds: tuple[KnobWorld, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "generous_knobs", MappingProxyType(dict(self.generous_knobs)))
        names = [s.name for s in self.stages]
        if len(set(names)) != len(names):
            raise ValueError(f"memory system {self.name!r} declares a stage twice: {names}")
        ids = [f.format_id for f in self.prompt_formats]
        if len(set(ids)) != len(ids):
            raise ValueError(f"memory system {self.name!r} declares a prompt format twice: {ids}")
        worlds = [w.name for w in self.knob_worlds or ()]
        if len(set(worlds)) != len(worlds):
            raise ValueError(f"memory system {self.name!r} declares a knob world twice: {worlds}")

    @property
    def construction_stages(self) -> tuple[str, ...]:
        return construction_stages(self.stages)

    @property
    def fault_kinds(self) -> tuple[FaultKind, ...]:
        return tuple(dict.fromkeys(f.kind for f in self.faults))
