"""The judge: one answered question judged and scored.

`JudgeAnswer` is the generous LoCoMo-style judge; its `label` is a `Literal["CORRECT", "WRONG"]` that DSPy's
adapter parses (an unusable label makes the predictor raise, and the case is scored "FAILED"). `judge_answer`
runs it as the traced stage `judge`, then `score_case` adds SQuAD token F1 and unigram BLEU on the normalized
tokens of `pipeline.backends.text`. It does not answer questions, run batches, aggregate scores
(`pipeline.analysis.evaluation`) or log.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Literal

import dspy
from memtrace_loop.memory_systems.answering import AnswerOutcome
from memtrace_loop.pipeline.analysis.evaluation import VERDICT_FAILED
from memtrace_loop.pipeline.backends.text import answer_tokens
from memtrace_loop.pipeline.core.conventions import OpKind, VarKind, gold_name, verdict_name
from memtrace_loop.pipeline.core.records import CaseResult, Question, Scores
from memtrace_loop.pipeline.core.tracing import Tracer

__all__ = [
    "JUDGE_STAGE", "VERDICT_FAILED", "JudgeAnswer", "bleu1", "judge_answer", "make_judge", "score_case", "token_f1",
]

JudgeLabel = Literal["CORRECT", "WRONG"]
JUDGE_STAGE = "judge"


class JudgeAnswer(dspy.Signature):
    """You grade one answer to a question about a long conversation between two people.

    You are given the question, the gold (reference) answer and a generated answer. Decide whether
    the generated answer is CORRECT or WRONG. Be generous: the generated answer is CORRECT when it
    refers to the same thing, person, fact or event as the gold answer, even if it is longer, adds
    details, or is phrased differently. For questions about time, a date, day or period written in
    another format counts as CORRECT when it denotes the same day or period (for example "May 7th,
    2023" and "7 May 2023", or "the week before 9 June" for a date in that week). The generated answer
    is WRONG when it names a different thing or time, contradicts the gold answer, misses its core
    point, or says the information is unknown while the gold answer gives it. Judge only against the
    gold answer, not against your own knowledge.
    """

    question: str = dspy.InputField(desc="the question that was asked")
    gold_answer: str = dspy.InputField(desc="the reference answer")
    generated_answer: str = dspy.InputField(desc="the answer to grade")
    label: JudgeLabel = dspy.OutputField(desc="CORRECT or WRONG")


def make_judge(lm: dspy.BaseLM | None = None) -> dspy.Predict:
    """The judge predictor, answering with `lm` when given."""
    judge = dspy.Predict(JudgeAnswer)
    if lm is not None:
        judge.set_lm(lm)
    return judge


def judge_answer(judge: dspy.Predict, question: Question, outcome: AnswerOutcome, tracer: Tracer) -> CaseResult:
    """Judge one answer as a traced stage; an unusable verdict is scored as FAILED, not raised."""
    gold_var = tracer.variable(gold_name(question.id), VarKind.GOLD, question.gold)
    with tracer.stage(
        judge, JUDGE_STAGE, op="llm_judge", kind=OpKind.JUDGE, inputs=[outcome.query_var, gold_var, outcome.answer_var],
        meta={"category": question.category},
        question=question.text, gold_answer=question.gold, generated_answer=outcome.text,
    ) as judged:
        label = str(judged.prediction.label) if judged.ok else None
        judged.output(verdict_name(question.id), VarKind.VERDICT, label or VERDICT_FAILED)
    return score_case(question, outcome.text, label, outcome.error or judged.error)


def score_case(question: Question, prediction: str, label: str | None, error: str | None) -> CaseResult:
    """The judged `CaseResult`: judge score 1.0 iff `label == "CORRECT"`; `label=None` (the judge gave
    nothing usable) is verdict "FAILED", score 0.0. F1 and BLEU-1 come from the prediction alone."""
    if label is not None and label not in ("CORRECT", "WRONG"):
        raise ValueError(f"judge label must be 'CORRECT', 'WRONG' or None, got {label!r}")
    verdict = VERDICT_FAILED if label is None else label
    scores = Scores(
        judge=1.0 if verdict == "CORRECT" else 0.0,
        f1=token_f1(prediction, question.gold),
        bleu1=bleu1(prediction, question.gold),
    )
    return CaseResult(question=question, prediction=prediction, verdict=verdict, scores=scores, error=error)


def token_f1(prediction: str, gold: str) -> float:
    """SQuAD token F1 between normalized tokens (multiset overlap); 0.0 if either side is empty."""
    pred, ref = answer_tokens(prediction), answer_tokens(gold)
    if not pred or not ref:
        return 0.0
    same = sum((Counter(pred) & Counter(ref)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


def bleu1(prediction: str, gold: str) -> float:
    """Unigram BLEU on normalized tokens: clipped unigram precision times the brevity penalty
    `exp(1 - len(gold) / len(prediction))` when the prediction is shorter. 0.0 for empty input."""
    pred, ref = answer_tokens(prediction), answer_tokens(gold)
    if not pred or not ref:
        return 0.0
    clipped = sum((Counter(pred) & Counter(ref)).values())
    precision = clipped / len(pred)
    penalty = 1.0 if len(pred) > len(ref) else math.exp(1 - len(ref) / len(pred))
    return precision * penalty
