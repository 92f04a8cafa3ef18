"""A memory system as one DSPy program for `dspy.GEPA`: examples are questions, components are stages.

`MemoryProgram` wraps a `MemorySystem`. Its predictors are the system's stage predictors under the
same names (`named_parameters` is the system's), so GEPA's components are exactly the system's prompt
set and `program.save`/`load` read and write the stage prompts. `forward(question_id, question)` asks the
loop's `Evaluator` to answer and judge that one question with the program's current system: memories
come from the loop's memory cache by memory key (construction prompts and knobs), so a candidate that
changes only the answer prompt re-answers and never re-ingests, and one conversation is ingested once
even when GEPA answers several of its questions in parallel threads.

Construction stages and the trace. On a memory reuse the construction predictors do not run inside
`forward`, so DSPy's trace would hold no entries for them and GEPA could never reflect on (or mutate
from evidence about) the extraction or update prompts; and with threads, even a fresh build runs in
whichever thread got there first. So construction is never taken from the live trace: the construction
stages' calls are recorded (stage, inputs, outputs) when a memory is built, kept with the cached memory,
and `forward` puts them into the trace, mapped onto this program's own predictors, before the answer
side's entries, on every call, built or reused. They are the calls that built the very memory this
answer read (the memory key includes the construction prompts), so the reflection sees what really
happened, not a re-run. The judge's call is in the trace too; it is no component, so GEPA ignores it.

`JudgeMetric` is GEPA's five-argument metric: the score is the judge's score of the case (computed
once, in `forward`, by the project's `judge_answer`), the feedback the block of `optimizers.feedback`
whose diagnosis is only the judge's verdict (no attribution). Blame-aware feedback is `gepa_blame`'s.
It does not run GEPA (see `optimizers.gepa`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import dspy
from memtrace_loop.memory_systems.base import MemorySystem
from memtrace_loop.optimizers.base import Evaluator, TracedCase
from memtrace_loop.optimizers.feedback import UNATTRIBUTED, FailureFeedback, category_text
from memtrace_loop.pipeline.core.records import CaseResult, PromptSet, Question

NO_ERROR = "NoError"


class MemoryProgram(dspy.Module):
    """The memory system as a DSPy program over questions (see the module docstring)."""

    def __init__(
        self, system: MemorySystem, cases: Evaluator | None = None, split_by_question: Mapping[str, str] | None = None
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


def save_program_state(system: MemorySystem, prompts: PromptSet, path: Path) -> Path:
    """`prompts` as a DSPy program state (`MemoryProgram(system).save(path)`, JSON, without LMs): a DSPy
    user loads it with `MemoryProgram(system).load(path)` and gets the same stage prompts."""
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
