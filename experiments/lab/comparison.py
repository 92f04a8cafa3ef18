"""Comparing optimizers: one row per optimizer x memory system (and pooled) from a sweep's finished runs.

`gain` is test judge accuracy final - start, paired per (run, test question) and bootstrapped over
questions x seeds (`evaluation.bootstrap_ci`, as the loop's gate); `vs_reference` is final - the
reference optimizer's final on the same (system, seed, question); costs are means per run;
`calls_to_90` averages `pipeline.loop.costs.calls_to_fraction` over the runs that gained on dev.
It neither reads MLflow (`experiments.lab.compare`) nor renders (`experiments.lab.comparison_report`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from statistics import NormalDist

import numpy as np
from memtrace_loop.pipeline.analysis.evaluation import bootstrap_ci
from memtrace_loop.pipeline.loop.costs import CandidateCosts, ProgressPoint, calls_to_fraction

POOLED = "all"  # the system name of an optimizer's row pooled over every system


@dataclass(frozen=True)
class QuestionOutcome:
    """One test question of one run: the judge score (1 correct, 0 not) of the start and final prompts."""

    question_id: str
    start: float
    final: float


NO_CANDIDATES = CandidateCosts(0, 0, 0, 0, 0, 0, 0, 0)  # a run logged before candidate costs existed


def summed(costs: Iterable[CandidateCosts]) -> CandidateCosts:
    """Candidate costs added field by field (of several runs)."""
    items = list(costs)
    return CandidateCosts(*(sum(getattr(c, f.name) for c in items) for f in fields(CandidateCosts)))


@dataclass(frozen=True)
class OptimizerRun:
    """One finished optimization run of a sweep, as the comparison needs it."""

    run_id: str
    optimizer: str
    system: str
    seed: int
    questions: tuple[QuestionOutcome, ...]  # counted test questions (excluded categories left out)
    lm_calls: float  # LM calls made over the whole run
    tokens: float  # prompt + completion tokens of those calls (NaN when not logged)
    prompt_chars: float  # characters of the final prompt set (every stage's instruction)
    seconds: float  # wall time
    progress: tuple[ProgressPoint, ...] = ()  # iteration 0 first
    calls_estimated: bool = False  # the progress calls are an estimate (no per-iteration count logged)
    budget: str = ""  # the run's LM-call budget as configured ("" when none)
    candidates: CandidateCosts = NO_CANDIDATES

    def __post_init__(self) -> None:
        ids = [q.question_id for q in self.questions]
        if len(set(ids)) != len(ids):
            raise ValueError(f"run {self.run_id}: a test question appears more than once")


@dataclass(frozen=True)
class GainEstimate:
    """A mean paired difference over `n` units with its bootstrap confidence interval (NaN when n = 0)."""

    n: int
    mean: float
    ci_low: float
    ci_high: float


@dataclass(frozen=True)
class ComparisonRow:
    optimizer: str
    system: str  # a memory system, or POOLED
    runs: int
    seeds: tuple[int, ...]
    start_accuracy: float  # test, over the paired units
    final_accuracy: float
    gain: GainEstimate  # final - start, paired over questions x seeds
    gain_by_run: tuple[float, ...]  # per run, in (system, seed) order
    vs_reference: GainEstimate | None  # final - reference's final; None for the reference itself
    lm_calls: float  # means per run
    tokens: float
    prompt_chars: float
    seconds: float
    calls_to_90: float  # NaN when no run gained on dev
    runs_with_gain: int  # runs whose dev accuracy rose (those averaged in calls_to_90)
    calls_estimated: bool  # some run's progress calls were estimated
    candidates: CandidateCosts = NO_CANDIDATES  # summed over the runs


def wilson_interval(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of a proportion (sound at 0 or n successes, unlike a bootstrap).

    >>> [round(x, 3) for x in wilson_interval(0, 100)], [round(x, 3) for x in wilson_interval(5, 100)]
    ([0.0, 0.037], [0.022, 0.112])
    """
    if trials <= 0:
        return math.nan, math.nan
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = successes / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / (1 + z * z / trials)
    return max(0.0, centre - half), min(1.0, centre + half)


def paired_estimate(
    differences: Sequence[float], n_resamples: int = 1000, confidence: float = 0.95, seed: int = 0
) -> GainEstimate:
    """Mean of paired differences with `evaluation.bootstrap_ci`'s percentile interval."""
    data = np.asarray(differences, dtype=float)
    if data.size == 0:
        return GainEstimate(0, math.nan, math.nan, math.nan)
    low, high = bootstrap_ci(data, n_resamples=n_resamples, confidence=confidence, seed=seed)
    return GainEstimate(int(data.size), float(data.mean()), low, high)


def gain_differences(runs: Iterable[OptimizerRun]) -> list[float]:
    """final - start for every (run, question) unit, in run order."""
    return [q.final - q.start for run in runs for q in run.questions]


def _mean(values: Iterable[float]) -> float:
    kept = [v for v in values if math.isfinite(v)]
    return float(np.mean(kept)) if kept else math.nan


def _final_by_unit(runs: Iterable[OptimizerRun]) -> dict[tuple[str, int, str], float]:
    return {(run.system, run.seed, q.question_id): q.final for run in runs for q in run.questions}


def _vs_reference(
    runs: Sequence[OptimizerRun], reference: Sequence[OptimizerRun], n_resamples: int, confidence: float, seed: int
) -> GainEstimate:
    mine, theirs = _final_by_unit(runs), _final_by_unit(reference)
    shared = sorted(mine.keys() & theirs.keys())
    return paired_estimate([mine[k] - theirs[k] for k in shared], n_resamples, confidence, seed)


def comparison_row(
    optimizer: str, system: str, runs: Sequence[OptimizerRun], reference_runs: Sequence[OptimizerRun] | None = None,
    *, n_resamples: int = 1000, confidence: float = 0.95, seed: int = 0,
) -> ComparisonRow:
    """The row of `runs` (one optimizer; one system or several). `reference_runs` (the reference
    optimizer's runs over the same systems and seeds) gives `vs_reference`; None leaves it out."""
    ordered = sorted(runs, key=lambda r: (r.system, r.seed, r.run_id))
    units = [q for run in ordered for q in run.questions]
    calls = [c for c in (calls_to_fraction(run.progress) for run in ordered) if c is not None]
    return ComparisonRow(
        optimizer, system, len(ordered), tuple(sorted({run.seed for run in ordered})),
        start_accuracy=_mean(q.start for q in units), final_accuracy=_mean(q.final for q in units),
        gain=paired_estimate(gain_differences(ordered), n_resamples, confidence, seed),
        gain_by_run=tuple(_mean(q.final - q.start for q in run.questions) for run in ordered),
        vs_reference=None if reference_runs is None else _vs_reference(
            ordered, reference_runs, n_resamples, confidence, seed),
        lm_calls=_mean(run.lm_calls for run in ordered), tokens=_mean(run.tokens for run in ordered),
        prompt_chars=_mean(run.prompt_chars for run in ordered), seconds=_mean(run.seconds for run in ordered),
        calls_to_90=_mean(calls), runs_with_gain=len(calls),
        calls_estimated=any(run.calls_estimated for run in ordered),
        candidates=summed(run.candidates for run in ordered),
    )


def compare_runs(
    runs: Iterable[OptimizerRun], reference: str | None = "attribution", *, n_resamples: int = 1000,
    confidence: float = 0.95, seed: int = 0,
) -> tuple[ComparisonRow, ...]:
    """One row per optimizer x system, then (with more than one system) one pooled row (system `POOLED`)
    per optimizer. Optimizers keep their first-seen order, `reference` (if present) first; systems are
    sorted. Two runs of the same optimizer, system and seed are a ValueError (pick one before comparing)."""
    items = list(runs)
    seen: set[tuple[str, str, int]] = set()
    for run in items:
        key = (run.optimizer, run.system, run.seed)
        if key in seen:
            raise ValueError(f"two runs of optimizer {key[0]!r}, system {key[1]!r}, seed {key[2]}")
        seen.add(key)
    optimizers = list(dict.fromkeys(run.optimizer for run in items))
    if reference in optimizers:
        optimizers.remove(reference)
        optimizers.insert(0, reference)
    systems = sorted({run.system for run in items})

    def select(optimizer: str | None, system: str | None) -> list[OptimizerRun]:
        return [r for r in items if r.optimizer == optimizer and (system is None or r.system == system)]

    def reference_for(optimizer: str, system: str | None) -> list[OptimizerRun] | None:
        return None if reference not in optimizers or optimizer == reference else select(reference, system)

    def row(optimizer: str, system: str | None) -> ComparisonRow:
        return comparison_row(
            optimizer, system or POOLED, select(optimizer, system), reference_for(optimizer, system),
            n_resamples=n_resamples, confidence=confidence, seed=seed,
        )

    rows = [row(optimizer, system) for system in systems for optimizer in optimizers if select(optimizer, system)]
    if len(systems) > 1:
        rows += [row(optimizer, None) for optimizer in optimizers]
    return tuple(rows)
