"""What every memory system is: a `dspy.Module` with `ingest` and `answer`, and a prompt set.

A memory system's LLM stages are its DSPy predictors; their attribute paths (`extract`, `decide`,
`answer`) are the stage names used everywhere (blame, prompt sets, MLflow keys, exports). This module
reads and writes prompt sets on a system and defines the records that `ingest` and `answer` return.
It does not implement any system (see `mem0/system.py`) and does not run datasets (see `pipeline.loop.runner`).
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import dspy
from memtrace_loop.pipeline.core.config import parse_config
from memtrace_loop.pipeline.core.records import Conversation, PromptSet, Question, Turn
from memtrace_loop.pipeline.core.tracing import Tracer

KnobsT = TypeVar("KnobsT")


class PromptSetError(ValueError):
    """A prompt set that does not fit a memory system (unknown stages, another system)."""


@dataclass(frozen=True)
class AnswerOutcome:
    """The answer to one question and the graph variables a judge and an attributor need."""

    text: str
    query_var: str
    answer_var: str
    error: str | None = None


class MemorySystem(dspy.Module):
    """Base class. Subclasses set `name`, create their predictors in `__init__` and implement
    `ingest(conversation, tracer, on_turn=None) -> state` (calling `on_turn(turn)` after each turn, for
    progress) and `answer(question, state, tracer) -> AnswerOutcome`."""

    name: str = "base"
    construction_stages: tuple[str, ...] = ()  # the stages `ingest` uses; the rest only answer

    def non_llm_stages(self) -> dict[str, str]:
        """Stage name -> its settings, for every stage that is not an LLM call (search, store, ...)."""
        return {}

    def construction_knobs(self) -> str:
        """Everything besides prompts and the model that changes what `ingest` builds (for the memory key)."""
        return ""

    def memory_key(self, conversation: Conversation) -> str:
        """Names what `ingest(conversation)` depends on: equal keys build equal memories."""
        prompts = self.prompt_set()
        models = sorted(
            {str(getattr(getattr(p, "lm", None), "model", "unset")) for n, p in self.named_predictors()
             if n in self.construction_stages}
        )
        payload = json.dumps(
            [self.name, conversation.id, prompts.digest(self.construction_stages), self.construction_knobs(), models]
        )
        return hashlib.sha256(payload.encode()).hexdigest()

    def ingest(
        self, conversation: Conversation, tracer: Tracer, on_turn: Callable[[Turn], None] | None = None
    ) -> Any:
        raise NotImplementedError

    def answer(self, question: Question, state: Any, tracer: Tracer) -> AnswerOutcome:
        raise NotImplementedError

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"{type(self).__name__} is driven through ingest() and answer(), not called")

    def stage_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.named_predictors())

    def prompt_set(self) -> PromptSet:
        return PromptSet({name: p.signature.instructions for name, p in self.named_predictors()})

    def with_prompts(self, prompts: PromptSet) -> MemorySystem:
        """A copy of this system whose stages use `prompts`; every stage must be known."""
        predictors = dict(self.named_predictors())
        unknown = sorted(set(prompts.stages()) - set(predictors))
        if unknown:
            raise PromptSetError(
                f"prompt set names stages {unknown} that memory system {self.name!r} does not have "
                f"(its stages: {sorted(predictors)})"
            )
        system = copy.copy(self)
        for name, predictor in self.named_predictors():
            if name in prompts.instruction_by_stage:
                updated = copy.copy(predictor)
                updated.signature = predictor.signature.with_instructions(prompts[name])
                _replace_path(system, name, updated)
        return system


def _replace_path(root: dspy.Module, path: str, value: Any) -> None:
    """Set the attribute at dotted `path`, shallow-copying the modules on the way (originals untouched)."""
    *parents, leaf = path.split(".")
    node = root
    for part in parents:
        child = copy.copy(getattr(node, part))
        setattr(node, part, child)
        node = child
    setattr(node, leaf, value)


def knobs_from_config(schema: type[KnobsT], cfg: Mapping[str, Any] | KnobsT | None) -> KnobsT:
    """A system's knobs record from its `memory_system` config node (the `name` key is the registry's):
    unknown keys, wrong types and out-of-range values are a `ConfigError` naming `memory_system.<key>`."""
    if isinstance(cfg, Mapping):
        cfg = {key: value for key, value in cfg.items() if key != "name"}
    return parse_config(schema, cfg, "memory_system")
