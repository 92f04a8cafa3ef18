"""The contract a user's own memory system implements (docs/custom_system.md).

`build()` returns an object with the methods of `UserMemorySystem` (a `typing.Protocol`): `stages()`
(`LLMStage`s the loop may rewrite, called through `lm.ask(stage, **inputs)`, and `Stage`s with their knobs),
`knobs()` / `with_knobs(changes)`, `new_memory(conversation_id)`, `add_turn(memory, turn, lm)` and
`answer(memory, question, lm)` (read-only, threads share the memory). Replay is not supported
(`ReplayUnsupportedError`). Records and the protocol only; the adapter is `memory_systems.custom.adapter`.
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
