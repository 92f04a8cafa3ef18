"""The optimizer contract: `OptimizerSpec`, `OptimizerSetup` (at build), `OptimizationContext` (per call), `Candidate`.

`propose` gets the prompts, knobs, blame, failures, the ONE `Evaluator` (train and dev only) and the
`CallBudget`, and proposes candidates best first; the loop's gate accepts them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

from memtrace_loop.pipeline.analysis.attribution.protocol import Attributor
from memtrace_loop.pipeline.analysis.attribution.records import Attribution
from memtrace_loop.pipeline.analysis.blame import BlameTable
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.records import CaseResult, Conversation, PromptSet, Question

if TYPE_CHECKING:  # the contract is read without DSPy (`optimizers.registry` builds on it)
    import dspy
    from memtrace_loop.memory_systems.base import MemorySystem
    from memtrace_loop.pipeline.analysis.evaluation import EvaluationReport


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


@dataclass(frozen=True)
class ConstructionCall:
    """One LM call a construction stage made while building a memory, as DSPy traced it."""

    stage: str  # the predictor's path in the system (a stage name)
    inputs: Mapping[str, Any]
    outputs: Any  # the dspy.Prediction it returned


@dataclass(frozen=True)
class TracedCase:
    """One question answered and judged on its own, with its graph and the construction calls that built its memory."""

    case: CaseResult
    graph: ExecutionGraph
    conversation: Conversation
    construction_calls: tuple[ConstructionCall, ...]
    lm_calls_made: int  # LLM calls this case made (a reused memory and DSPy's cache excluded)
    memory_reused: bool


class CallBudget(Protocol):
    """The loop's budget in LM calls as an optimizer sees it: task, rewriter and attributor calls, counted the same way
    for every optimizer at the LM layer (judge calls never count)."""

    def spent(self) -> int: ...

    def remaining(self) -> int | None: ...  # None: no budget set


class Evaluator(Protocol):
    """The ONE evaluator an optimizer gets per call: the loop's own scoring on train or dev (never test), under
    its accepted knobs, memories reused and every LM call counted. `evaluate` scores a prompt set on a split (or
    some questions); `questions`, `system(prompts)` and `run_case` answer and judge one question at a time
    (its conversation's memory built at most once, across threads too): what GEPA's program runs."""

    def evaluate(
        self, prompts: PromptSet, split: str = "train", question_ids: Sequence[str] | None = None
    ) -> CandidateEvaluation: ...

    def questions(self, split: str) -> tuple[Question, ...]: ...

    def system(self, prompts: PromptSet) -> MemorySystem: ...

    def run_case(self, system: MemorySystem, split: str, question_id: str) -> TracedCase: ...


@dataclass(frozen=True)
class OptimizationContext:
    """What changes per call: one iteration's state, given to `Optimizer.propose`."""

    iteration: int
    prompts: PromptSet  # the current prompt set (the one the loop's gate compares candidates against)
    blame: BlameTable
    attributions: tuple[Attribution, ...]
    failures: tuple[CaseResult, ...]
    # the memory system's knobs now (field -> value: its configured knobs with the accepted changes; {} when none)
    knobs: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    # the train traces the attributions were made on: one execution graph per conversation
    graph_by_conversation: Mapping[str, ExecutionGraph] = field(default_factory=lambda: MappingProxyType({}))
    evaluator: Evaluator | None = None  # None outside a loop (e.g. an optimizer called on its own)
    budget: CallBudget | None = None  # None: no budget in LM calls


@dataclass(frozen=True)
class OptimizerSetup:
    """What is fixed for an optimizer's whole run, given once to its spec's `build`."""

    settings: Any  # the validated settings record (the spec's `schema`)
    rewriter_lm: dspy.BaseLM | None = None  # the LM that rewrites prompts (GEPA's reflection LM)
    system: MemorySystem | None = None  # the system being optimized, as configured (prompts and knobs: per call)
    attributor: Attributor | None = None  # the loop's attributor (blame-guided optimizers may re-attribute)
    work_dir: Path | None = None  # where an optimizer may keep resumable state (under the run directory)

    @property
    def signature_by_stage(self) -> Mapping[str, str]:
        """stage -> its signature as "input, input -> output" ({} without a system)."""
        return stage_signatures(self.system) if self.system is not None else MappingProxyType({})

    @property
    def knob_fields_by_stage(self) -> Mapping[str, tuple[str, ...]]:
        """The knob fields of the system's non-LLM construction stages (stage -> fields; {} without a system)."""
        return self.system.knob_fields_by_stage if self.system is not None else MappingProxyType({})


def stage_signatures(system: MemorySystem) -> Mapping[str, str]:
    """stage -> what the stage reads and writes, as "input, input -> output"."""
    signatures = {}
    for name, predictor in system.named_predictors():
        sig = predictor.signature
        signatures[name] = f"{', '.join(sig.input_fields)} -> {', '.join(sig.output_fields)}"
    return MappingProxyType(signatures)


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
    """The optimizer contract: `propose(context)` once per iteration returns candidates, best first (maybe
    none). It never accepts one (the loop's gate does), never touches test, stops its own search when
    `context.budget.remaining()` is 0 and scores only through `context.evaluator`; state that must survive a
    resume lives under `setup.work_dir`."""

    name: str

    def propose(self, context: OptimizationContext) -> Sequence[Candidate]: ...


@dataclass(frozen=True)
class OptimizerSpec:
    """What an optimizer module exports as `SPEC` (the optimizer registry's contract)."""

    schema: type  # its settings record: the schema and single home of the defaults of its config node
    build: Callable[[OptimizerSetup], Optimizer]
    compare: bool = True  # swept by `make compare` (the registry's `compared()`)
