"""The one small interface every prompt optimizer implements.

An optimizer sees the current prompt set, the blame table and the attributed failures of the train
split (an `OptimizationContext`) and proposes candidate prompt sets, best first. It never evaluates or
accepts them: the loop's gate does (`pipeline.loop`). LMs an optimizer needs are given to its
constructor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from memtrace_loop.pipeline.analysis.blame import Attribution, BlameTable
from memtrace_loop.pipeline.core.records import CaseResult, PromptSet


@dataclass(frozen=True)
class OptimizationContext:
    """What an optimizer may look at in one iteration."""

    iteration: int
    prompts: PromptSet
    blame: BlameTable
    attributions: tuple[Attribution, ...]
    failures: tuple[CaseResult, ...]
    # stage -> its signature as "input, input -> output" (what the stage reads and writes)
    signature_by_stage: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class Candidate:
    """One proposed prompt set and why: which stages changed, from which feedback."""

    prompts: PromptSet
    changed_stages: tuple[str, ...]
    rationale: str
    feedback_by_stage: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


class Optimizer(Protocol):
    name: str

    def propose(self, context: OptimizationContext) -> Sequence[Candidate]: ...
