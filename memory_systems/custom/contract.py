"""The contract a user's own memory system implements to be run, traced and optimized by MemTrace Loop.

A user writes one module with a `build()` function returning an object that has the methods of
`UserMemorySystem` (a `typing.Protocol`: no base class to inherit, nothing of ours to subclass) and
marks the operations to trace with the tracing API (`memory_systems.custom.api`: `op`, `traced`).
Config selects it: `memtrace run memory_system=custom memory_system.target=my_pkg.my_memory:build`.

The contract, in the manner of GEPA's adapter protocol:

- `stages() -> Sequence[LLMStage | Stage]`: every stage the code's operations name, in pipeline order.
  An `LLMStage` is a prompt the loop may rewrite: its `prompt` is the starting text (the stage's
  instruction), `inputs` and `outputs` its field names (all text). The code never holds the prompt
  text itself: it calls `lm.ask(stage, **inputs)`, which sends the stage's *current* text (the start,
  or a rewrite the loop is trying) through our LM layer (counted, cached, retried, stopped on
  Ctrl-C, answered by the simulated world under `lm=sim`), so applying new prompt texts needs nothing
  from the user. The simulated world recognises a stage by its output field names and reads its
  inputs by our stages' names: an answer stage has outputs `("answer",)` and inputs
  `("context", "question")`; a fact extraction outputs `("facts",)` from input `("turn",)`. A `Stage`
  is a step without an LLM (a search, a store write); its `knobs` are the knobs it reads.
  `builds_memory=True` marks a stage that writes memory (its prompt or knobs change what is built).
- `knobs() -> Mapping[str, int | float | str | bool]`: the current knob values (search depth...);
  `with_knobs(changes) -> UserMemorySystem`: a copy with some knobs changed (never a mutation). The
  loop proposes new values for a stage blamed through its knobs (`top_k` on a search) and keeps them
  only if they win on held-out questions.
- `new_memory(conversation_id) -> memory`: an empty memory for ONE conversation (any object).
- `add_turn(memory, turn, lm) -> None`: feed the conversation turn by turn, in order (`turn`: a
  `Turn` with `id`, `speaker`, `text`, `session` and ISO `time`). It may mutate `memory`; each turn's
  graph variable `turn:<id>` is recorded before the call.
- `answer(memory, question, lm) -> str | Answer`: answer one question from a built memory (read-only:
  questions are answered in parallel threads on the same memory). Return the answer text, or an
  `Answer` with the context it used (recorded as the retrieval result when the code did not trace one).
- replay (`attributor.verify=true`) is not supported: it re-runs our systems' retrieval and answer
  stage separately, and a user's `answer` is one call. `restore` raises `ReplayUnsupportedError` and
  the verifying attributor leaves the cases unverified (the lineage verdicts stand).

This module holds the records and the protocol only; the adapter to our `MemorySystem` is
`memory_systems.custom.adapter`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from memtrace_loop.pipeline.core.records import Turn

__all__ = ["LM", "Answer", "Knob", "LLMStage", "Stage", "Turn", "UserMemorySystem"]

Knob = int | float | str | bool


@dataclass(frozen=True)
class LLMStage:
    """A stage whose prompt text the loop may rewrite (see the module docstring)."""

    name: str
    prompt: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    builds_memory: bool = False


@dataclass(frozen=True)
class Stage:
    """A stage without an LLM call; `knobs` are the knob names it reads."""

    name: str
    knobs: tuple[str, ...] = ()
    builds_memory: bool = False


@dataclass(frozen=True)
class Answer:
    """An answer and the context it was given."""

    text: str
    context: str = ""


class LM(Protocol):
    """The LM handed to the user's code: one call per declared LLM stage, inside an `op`."""

    def ask(self, stage: str, /, **inputs: Any) -> dict[str, Any]: ...


@runtime_checkable
class UserMemorySystem(Protocol):
    """A user's memory system (the contract: the module docstring)."""

    def stages(self) -> Sequence[LLMStage | Stage]: ...

    def knobs(self) -> Mapping[str, Knob]: ...

    def with_knobs(self, changes: Mapping[str, Knob]) -> UserMemorySystem: ...

    def new_memory(self, conversation_id: str) -> Any: ...

    def add_turn(self, memory: Any, turn: Turn, lm: LM) -> None: ...

    def answer(self, memory: Any, question: str, lm: LM) -> str | Answer: ...
