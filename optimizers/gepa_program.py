"""A memory system as one DSPy program for `dspy.GEPA`: examples are questions, components are stages.

`MemoryProgram.forward` answers and judges one question through the loop's `Evaluator` (memories from the
memory cache) and puts the recorded construction calls of the very memory it read into the trace, so GEPA can
reflect on construction prompts. Its state carries the system and its knobs (`ProgramStateError` for
another system's); `load_program` rebuilds the exported system. `JudgeMetric` is GEPA's metric (the judge's
score, verdict-only feedback). It does not run GEPA.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import dspy
from memtrace_loop.memory_systems.base import KnobError, MemorySystem
from memtrace_loop.memory_systems.registry import build_memory_system
from memtrace_loop.optimizers.base import TracedCase
from memtrace_loop.optimizers.feedback import UNATTRIBUTED, FailureFeedback, category_text
from memtrace_loop.pipeline.backends.embeddings import Embedder, HashingEmbedder
from memtrace_loop.pipeline.core.records import CaseResult, PromptSet, Question

NO_ERROR = "NoError"
STATE_KEY = "memtrace"  # the program state's own key: {"system": name, "knobs": {knob: value}}


class ProgramStateError(ValueError):
    """A program state that cannot be loaded into this memory system (another system, bad knobs)."""


class CaseRunner(Protocol):
    """What `forward` needs: one question answered and judged with a system (the loop's `Evaluator`, or a
    `pipeline.loop.runner.LoopCaseRunner` outside the loop)."""

    def run_case(self, system: MemorySystem, split: str, question_id: str) -> TracedCase: ...


class MemoryProgram(dspy.Module):
    """The memory system as a DSPy program over questions (see the module docstring)."""

    def __init__(
        self, system: MemorySystem, cases: CaseRunner | None = None, split_by_question: Mapping[str, str] | None = None
    ) -> None:
        super().__init__()
        self.system = system
        self.cases = cases
        self.split_by_question = dict(split_by_question or {})

    def named_parameters(self) -> list[tuple[str, Any]]:  # the system's stage names, unprefixed
        return self.system.named_parameters()

    def _copy(self) -> MemoryProgram:
        # only the predictors are copied (GEPA sets their signatures); the runner and its cache are shared
        return MemoryProgram(self.system.with_prompts(self.system.prompt_set()), self.cases, self.split_by_question)

    def deepcopy(self) -> MemoryProgram:
        return self._copy()

    def __deepcopy__(self, memo: dict[int, Any]) -> MemoryProgram:
        return self._copy()

    def reset_copy(self) -> MemoryProgram:
        return self._copy()

    def dump_state(self, json_mode: bool = True) -> dict[str, Any]:
        """DSPy's state of the stage predictors, plus the system's name and knob values (`STATE_KEY`)."""
        state = super().dump_state(json_mode=json_mode)
        return {**state, STATE_KEY: {"system": self.system.name, "knobs": self.system.knob_values()}}

    def load_state(self, state: dict[str, Any], *, allow_unsafe_lm_state: bool = False) -> MemoryProgram:
        """The saved knobs (when the state carries them: `STATE_KEY`), then the saved stage prompts."""
        saved = state.get(STATE_KEY)
        previous = self.system
        if saved is not None:
            self.system = _with_saved_knobs(self.system, saved)
        try:
            super().load_state(state, allow_unsafe_lm_state=allow_unsafe_lm_state)
        except Exception:
            self.system = previous  # nothing changed when the prompts do not load
            raise
        return self

    def forward(self, question_id: str, question: str = "") -> dspy.Prediction:
        if self.cases is None:
            raise ValueError("this MemoryProgram has no case runner: it can be saved and loaded, not run")
        trace = dspy.settings.trace
        start = len(trace) if trace is not None else 0
        traced = self.cases.run_case(self.system, self.split_by_question[question_id], question_id)
        if trace is not None and traced.construction_calls:
            predictor_by_stage = dict(self.system.named_predictors())
            trace[start:start] = [
                (predictor_by_stage[call.stage], dict(call.inputs), call.outputs)
                for call in traced.construction_calls if call.stage in predictor_by_stage
            ]
        return dspy.Prediction(answer=traced.case.prediction, traced=traced)


def _with_saved_knobs(system: MemorySystem, saved: Any) -> MemorySystem:
    """`system` with the knobs of a state's `STATE_KEY` entry (refused when it names another system)."""
    if not isinstance(saved, Mapping) or not isinstance(saved.get("knobs", {}), Mapping):
        raise ProgramStateError(f"program state key {STATE_KEY!r} must map 'system' and 'knobs', got {saved!r}")
    if saved.get("system") != system.name:
        raise ProgramStateError(
            f"program state is for memory system {saved.get('system')!r}, this program's system is {system.name!r}"
        )
    try:
        return system.with_knobs(saved.get("knobs", {}))
    except KnobError as error:
        raise ProgramStateError(f"program state key {STATE_KEY!r}: {error}") from None


def load_program(path: str | Path, embedder: Embedder | None = None) -> MemoryProgram:
    """The exported system as a DSPy program: the memory system a program state names (`best_program.json`,
    or a run folder holding one), built on `embedder` (default: the offline hashing embedder, the
    configs' default), with the state's knobs and stage prompts. No LM: `program.set_lm(lm)` afterwards."""
    path = Path(path)
    if path.is_dir():
        path = path / "best_program.json"
    try:
        saved = json.loads(path.read_text(encoding="utf-8")).get(STATE_KEY)
    except (OSError, ValueError, AttributeError) as error:
        raise ProgramStateError(f"program state {path}: cannot read it ({error})") from None
    if not isinstance(saved, Mapping) or not isinstance(saved.get("system"), str):
        raise ProgramStateError(
            f"program state {path}: key {STATE_KEY!r} with the memory system's name is missing (a state written "
            "before it was kept: build the system and call MemoryProgram(system).load(path))"
        )
    program = MemoryProgram(build_memory_system({"name": saved["system"]}, embedder or HashingEmbedder()))
    try:
        program.load(str(path))
    except ProgramStateError as error:
        raise ProgramStateError(f"program state {path}: {error}") from None
    return program


def save_program_state(system: MemorySystem, prompts: PromptSet, path: Path) -> Path:
    """`prompts` as a DSPy program state (JSON, without LMs) with the system's name and knobs, as `load_program` reads
    it."""
    program = MemoryProgram(system.with_prompts(prompts))  # its predictors are copies
    for _, predictor in program.named_predictors():
        predictor.lm = None  # a program state holds prompts, not the LM that ran them
    program.save(str(path))
    return path


def question_examples(questions: Sequence[Question]) -> list[dspy.Example]:
    """GEPA's examples: one per question (inputs: its id and text; the gold rides along)."""
    return [
        dspy.Example(question_id=q.id, question=q.text, gold=q.gold).with_inputs("question_id", "question")
        for q in questions
    ]


def traced_of(prediction: Any) -> TracedCase | None:
    """The traced case behind a program's prediction (None for a failed or foreign prediction)."""
    try:
        traced = prediction.get("traced") if hasattr(prediction, "get") else None
    except Exception:
        return None
    return traced if isinstance(traced, TracedCase) else None


def judge_feedback(case: CaseResult) -> FailureFeedback:
    """The no-attribution block for a judged case: the facts and the judge's verdict, nothing more."""
    verdict = case.verdict
    if case.correct:
        diagnosis = f"the judge graded this answer {verdict} (score {case.scores.judge:g}); keep what produced it."
    else:
        diagnosis = (
            f"the judge graded this answer {verdict} (score {case.scores.judge:g}); no attribution was made, "
            "so nothing says which stage caused it."
        )
    return FailureFeedback(
        question_id=case.question.id, question=case.question.text, gold=case.question.gold,
        answer=case.prediction, error_type=NO_ERROR if case.correct else UNATTRIBUTED, op_name="",
        diagnosis=diagnosis, category=category_text(case),
    )


class JudgeMetric:
    """GEPA's metric: the judge's score and the no-attribution feedback block (same for every stage)."""

    def stage_feedback(self, prediction: Any, traced: TracedCase, pred_name: str | None) -> str:
        return judge_feedback(traced.case).render()

    def __call__(
        self, gold: dspy.Example, pred: Any, trace: Any = None, pred_name: str | None = None, pred_trace: Any = None
    ) -> dspy.Prediction:
        traced = traced_of(pred)
        if traced is None:
            return dspy.Prediction(score=0.0, feedback=f"No answer was produced for: {gold.get('question', '')}")
        return dspy.Prediction(score=traced.case.scores.judge, feedback=self.stage_feedback(pred, traced, pred_name))
