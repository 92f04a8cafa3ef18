"""The one small interface every prompt optimizer implements.

An optimizer sees the current prompt set, the blame table and the attributed failures of the train
split (an `OptimizationContext`) and proposes candidate prompt sets, best first. It never accepts them:
the loop's gate does (`pipeline.loop`). An optimizer that wants to score its own candidates before
proposing them (as GEPA's adapter does) uses the context's `evaluator`, which the loop implements on
top of its runner and memory cache: built memories are reused and every LLM call it makes is counted
in the loop's totals. The evaluator offers the train and dev splits only (the test split is kept for
the end). LMs an optimizer needs are given to its constructor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

from memtrace_loop.memory_systems.base import MemorySystem
from memtrace_loop.pipeline.analysis.attribution.protocol import Attributor
from memtrace_loop.pipeline.analysis.attribution.records import Attribution
from memtrace_loop.pipeline.analysis.blame import BlameTable
from memtrace_loop.pipeline.analysis.evaluation import EvaluationReport
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.records import CaseResult, Conversation, PromptSet, Question


@dataclass(frozen=True)
class CandidateEvaluation:
    """A prompt set evaluated on (part of) a split: every judged case with its traces."""

    prompts: PromptSet
    split: str
    results: tuple[CaseResult, ...]
    graph_by_conversation: Mapping[str, ExecutionGraph]  # the traces: one execution graph per conversation
    report: EvaluationReport  # aggregates without the loop's excluded categories
    lm_calls_made: int  # LLM calls this evaluation made (reused memories and DSPy's cache excluded)

    @property
    def accuracy(self) -> float:
        return self.report.overall.judge_accuracy

    @property
    def score_by_question(self) -> dict[str, float]:
        """question id -> judge score (1.0 correct, 0.0 not), every evaluated question."""
        return {r.question.id: r.scores.judge for r in self.results}


class Evaluator(Protocol):
    """Scores a prompt set on the train or dev split, or on some of its questions (`question_ids`)."""

    def evaluate(
        self, prompts: PromptSet, split: str = "train", question_ids: Sequence[str] | None = None
    ) -> CandidateEvaluation: ...


@dataclass(frozen=True)
class ConstructionCall:
    """One LM call a construction stage made while building a memory, as DSPy traced it."""

    stage: str  # the predictor's path in the system (a stage name)
    inputs: Mapping[str, Any]
    outputs: Any  # the dspy.Prediction it returned


@dataclass(frozen=True)
class TracedCase:
    """One question answered and judged on its own: the case, its graph (the conversation's ingestion
    graph with this question's answering appended), the conversation, and the construction stages'
    LM calls that built the memory it read (recorded when it was built, returned on a reuse too)."""

    case: CaseResult
    graph: ExecutionGraph
    conversation: Conversation
    construction_calls: tuple[ConstructionCall, ...]
    lm_calls_made: int  # LLM calls this case made (a reused memory and DSPy's cache excluded)
    memory_reused: bool


class CaseRunner(Protocol):
    """Answers single questions of train or dev with a given system (its prompts and knobs as they are),
    building each conversation's memory once (through the loop's memory cache, also across threads)."""

    def questions(self, split: str) -> tuple[Question, ...]: ...  # the scored questions (excluded categories left out)

    def run_case(self, system: MemorySystem, split: str, question_id: str) -> TracedCase: ...


class CallBudget(Protocol):
    """The loop's budget in LM calls as an optimizer sees it: task, rewriter and attributor calls,
    counted the same way for every optimizer at the LM layer (judge calls never count). Calls served
    by DSPy's response cache count too unless `loop.budget_counts_cached=false` (so the budget does not
    depend on what earlier runs cached). An optimizer running its own search stops when `remaining()`
    is 0; the loop itself starts no further step then (`pipeline.loop.optimization`)."""

    def spent(self) -> int: ...

    def remaining(self) -> int | None: ...  # None: no budget set


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
    evaluator: Evaluator | None = None  # None outside a loop (e.g. an optimizer called on its own)
    budget: CallBudget | None = None  # None: no budget in LM calls
    # the memory system's knobs now (field -> value; {} when it has none), and the knob fields of its non-LLM
    # construction stages (stage -> fields)
    knobs: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    knob_fields_by_stage: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    # the train traces the attributions were made on: one execution graph per conversation
    graph_by_conversation: Mapping[str, ExecutionGraph] = field(default_factory=lambda: MappingProxyType({}))
    system: MemorySystem | None = None  # the system being optimized (its prompts are not `prompts`)
    cases: CaseRunner | None = None  # per-question runs (GEPA's program); None outside a loop
    attributor: Attributor | None = None  # the loop's attributor (blame-guided optimizers may re-attribute)
    work_dir: Path | None = None  # where an optimizer may keep resumable state (under the run directory)


@dataclass(frozen=True)
class Candidate:
    """One proposed prompt set and why: which stages changed, from which feedback."""

    prompts: PromptSet
    changed_stages: tuple[str, ...]
    rationale: str
    feedback_by_stage: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    knobs: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))  # knob changes: field -> value
    # artifact file -> table columns the loop observer logs with the candidate (e.g. GEPA's candidate pool)
    tables: Mapping[str, Mapping[str, list[str]]] = field(default_factory=lambda: MappingProxyType({}))


class Optimizer(Protocol):
    name: str

    def propose(self, context: OptimizationContext) -> Sequence[Candidate]: ...
