"""Scores over many judged questions: `bootstrap_ci`, `summarize` (the per-category `EvaluationReport`),
`flat_metrics` (MLflow-ready names) and `paired_difference` (two runs over the same questions, the gate's).

It does not judge one answer (`pipeline.analysis.judge`), answer questions, run batches or log.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
from memtrace_loop.pipeline.core.records import CaseResult

VERDICT_FAILED = "FAILED"  # a judge call whose output could not be used (`judge`)


def bootstrap_ci(
    values: Sequence[float] | np.ndarray, n_resamples: int = 1000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of the mean of `values`, deterministic for a seed; (nan, nan)
    when empty, (v, v) for one value. Not `scipy.stats.bootstrap`: its quantiles round differently in the
    last bit (which would change logged CIs), and it is 2-3x slower."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        return math.nan, math.nan
    if data.size == 1:
        return float(data[0]), float(data[0])
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, data.size, size=(n_resamples, data.size))].mean(axis=1)
    alpha = 1 - confidence
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return float(low), float(high)


@dataclass(frozen=True, slots=True)
class MetricSummary:
    """Means over `n` cases; `ci_low`/`ci_high` bound the judge accuracy. NaN when `n == 0`."""

    n: int
    judge_accuracy: float
    ci_low: float
    ci_high: float
    f1: float
    bleu1: float
    n_failed: int = 0  # cases whose judge verdict was FAILED (counted as wrong)


@dataclass(frozen=True)
class EvaluationReport:
    """`overall` leaves out `excluded_categories`; `by_category` (by name, in category order) and
    `failed_judge_calls` cover every case."""

    overall: MetricSummary
    by_category: Mapping[str, MetricSummary]
    excluded_categories: tuple[int, ...]
    failed_judge_calls: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_category", MappingProxyType(dict(self.by_category)))


def _summary(results: Sequence[CaseResult], seed: int) -> MetricSummary:
    if not results:
        return MetricSummary(0, math.nan, math.nan, math.nan, math.nan, math.nan)
    judge = [r.scores.judge for r in results]
    low, high = bootstrap_ci(judge, seed=seed)
    return MetricSummary(
        n=len(results),
        judge_accuracy=float(np.mean(judge)),
        ci_low=low,
        ci_high=high,
        f1=float(np.mean([r.scores.f1 for r in results])),
        bleu1=float(np.mean([r.scores.bleu1 for r in results])),
        n_failed=sum(r.verdict == VERDICT_FAILED for r in results),
    )


def summarize(
    results: Sequence[CaseResult], exclude_categories: Collection[int] = (5,), seed: int = 0
) -> EvaluationReport:
    """Overall metrics without `exclude_categories` (the reference protocol drops adversarial
    category 5) and per-category metrics for every category, each with a bootstrap CI."""
    excluded = tuple(sorted(set(exclude_categories)))
    kept = [r for r in results if r.question.category not in excluded]
    by_category: dict[str, MetricSummary] = {}
    for category in sorted({r.question.category for r in results}):
        members = [r for r in results if r.question.category == category]
        by_category[members[0].question.category_name] = _summary(members, seed)
    return EvaluationReport(
        overall=_summary(kept, seed),
        by_category=by_category,
        excluded_categories=excluded,
        failed_judge_calls=sum(r.verdict == VERDICT_FAILED for r in results),
    )


def _metric_key(name: str) -> str:
    return re.sub(r"[^0-9A-Za-z_]+", "_", name).strip("_").lower()


def flat_metrics(report: EvaluationReport) -> dict[str, float]:
    """MLflow-ready metrics: the overall ones, `failed_judge_calls` and the same per category as
    `cat_<name>_<metric>` (`cat_multi_hop_f1`); names of letters, digits and underscores, NaN left out."""

    def block(prefix: str, summary: MetricSummary) -> dict[str, float]:
        return {
            f"{prefix}judge_accuracy": summary.judge_accuracy,
            f"{prefix}judge_ci_low": summary.ci_low,
            f"{prefix}judge_ci_high": summary.ci_high,
            f"{prefix}f1": summary.f1,
            f"{prefix}bleu1": summary.bleu1,
            f"{prefix}n": float(summary.n),
            f"{prefix}judge_failed": float(summary.n_failed),
        }

    metrics = block("", report.overall)
    metrics["failed_judge_calls"] = float(report.failed_judge_calls)
    for name, summary in report.by_category.items():
        metrics.update(block(f"cat_{_metric_key(name)}_", summary))
    return {key: float(value) for key, value in metrics.items() if math.isfinite(value)}


@dataclass(frozen=True, slots=True)
class PairedDifference:
    """Judge accuracy of `a` minus `b` on the same questions, with a paired bootstrap CI."""

    n: int
    mean_difference: float
    ci_low: float
    ci_high: float
    a_wins: int  # questions `a` got right and `b` wrong
    b_wins: int
    ties: int


def paired_difference(
    a: Sequence[CaseResult],
    b: Sequence[CaseResult],
    seed: int = 0,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    exclude_categories: Collection[int] = (5,),
) -> PairedDifference:
    """Paired bootstrap of the per-question judge difference `a - b` over the same question ids (each once,
    else ValueError), `exclude_categories` left out as in `summarize`'s overall score."""
    by_id_a = _by_question_id(a, "a")
    by_id_b = _by_question_id(b, "b")
    if by_id_a.keys() != by_id_b.keys():
        only_a = sorted(by_id_a.keys() - by_id_b.keys())
        only_b = sorted(by_id_b.keys() - by_id_a.keys())
        raise ValueError(
            f"paired_difference needs the same question ids: {len(only_a)} only in a "
            f"{only_a[:5]}, {len(only_b)} only in b {only_b[:5]}"
        )
    excluded = set(exclude_categories)
    ids = sorted(qid for qid, r in by_id_a.items() if r.question.category not in excluded)
    score_a = np.array([by_id_a[qid].scores.judge for qid in ids], dtype=float)
    score_b = np.array([by_id_b[qid].scores.judge for qid in ids], dtype=float)
    diff = score_a - score_b
    low, high = bootstrap_ci(diff, n_resamples=n_resamples, confidence=confidence, seed=seed)
    return PairedDifference(
        n=len(ids),
        mean_difference=float(diff.mean()) if len(ids) else math.nan,
        ci_low=low,
        ci_high=high,
        a_wins=int((diff > 0).sum()),
        b_wins=int((diff < 0).sum()),
        ties=int((diff == 0).sum()),
    )


def _by_question_id(results: Sequence[CaseResult], label: str) -> dict[str, CaseResult]:
    by_id: dict[str, CaseResult] = {}
    for result in results:
        if result.question.id in by_id:
            raise ValueError(f"run {label} has question {result.question.id!r} more than once")
        by_id[result.question.id] = result
    return by_id
