"""Comparing optimizers: one row per optimizer x memory system (and pooled) from a sweep's finished runs,
and the rows as Markdown (table and legend), their JSON twin and a PNG plot.

`gain` is test judge accuracy final - start, paired per (run, test question) and bootstrapped over
questions x seeds (`evaluation.bootstrap_ci`, as the loop's gate); `vs_reference` is final - the
reference optimizer's final on the same (system, seed, question); costs are means per run;
`calls_to_90` averages `pipeline.loop.costs.calls_to_fraction` over the runs that gained on dev. The
plot draws as `pipeline.tracking.plots` does (equal inputs, equal files). It does not read MLflow
(`experiments.lab.compare`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.ticker import PercentFormatter
from memtrace_loop.experiments.lab.bench.common import markdown_table as common_table
from memtrace_loop.pipeline.analysis.evaluation import bootstrap_ci
from memtrace_loop.pipeline.loop.costs import GAIN_FRACTION, CandidateCosts, ProgressPoint, calls_to_fraction
from memtrace_loop.pipeline.tracking.plots import _new_figure, _png_path, _save

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


def _mean(values: Iterable[float]) -> float:
    kept = [v for v in values if math.isfinite(v)]
    return float(np.mean(kept)) if kept else math.nan


def _vs_reference(
    runs: Sequence[OptimizerRun], reference: Sequence[OptimizerRun], n_resamples: int, confidence: float, seed: int
) -> GainEstimate:
    def final_by_unit(runs: Iterable[OptimizerRun]) -> dict[tuple[str, int, str], float]:
        return {(run.system, run.seed, q.question_id): q.final for run in runs for q in run.questions}

    mine, theirs = final_by_unit(runs), final_by_unit(reference)
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
        gain=paired_estimate([q.final - q.start for q in units], n_resamples, confidence, seed),
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


COLUMNS = (
    "optimizer", "system", "runs", "test start → final %", "gain pp [95% CI]", "vs {reference} pp [95% CI]",
    "gain per run pp", "LM calls", "tokens", "prompt chars", "wall s", "calls to {fraction}% gain",
    "calls per candidate (screen + full)", "calls per accepted", "screened out",
)


def _points(value: float) -> str:
    return "—" if not math.isfinite(value) else f"{100 * value:+.1f}"


def estimate_text(estimate: GainEstimate | None) -> str:
    """`+12.3 [+5.0, +19.6] (n=144)` in percentage points; `—` when there is nothing to estimate."""
    if estimate is None or estimate.n == 0:
        return "—"
    return f"{_points(estimate.mean)} [{_points(estimate.ci_low)}, {_points(estimate.ci_high)}] (n={estimate.n})"


def _number(value: float, digits: int = 0) -> str:
    return "—" if not math.isfinite(value) else f"{value:,.{digits}f}"


def _per_run(row: ComparisonRow) -> str:
    gains = [g for g in row.gain_by_run if math.isfinite(g)]
    if not gains:
        return "—"
    if len(gains) <= 4:
        return ", ".join(_points(g) for g in gains)
    return f"{_points(min(gains))} … {_points(max(gains))}"


def table_cells(row: ComparisonRow) -> list[str]:
    """The row's cells in `COLUMNS` order."""
    accuracy = "—"
    if math.isfinite(row.start_accuracy) and math.isfinite(row.final_accuracy):
        accuracy = f"{100 * row.start_accuracy:.1f} → {100 * row.final_accuracy:.1f}"
    to_gain = "—" if not row.runs_with_gain else f"{'~' if row.calls_estimated else ''}{_number(row.calls_to_90)}"
    if row.runs_with_gain and row.runs_with_gain != row.runs:
        to_gain += f" ({row.runs_with_gain}/{row.runs} runs)"
    totals, per_candidate, screened_out = row.candidates, "—", "—"
    if totals.candidates:
        screen, full = totals.screen_calls / totals.candidates, totals.full_calls / totals.candidates
        per_candidate = f"{_number(totals.per_candidate)} ({_number(screen)} + {_number(full)})"
        screened_out = f"{totals.screened_out}/{totals.candidates}"
    return [
        row.optimizer, "pooled" if row.system == POOLED else row.system, str(row.runs), accuracy,
        estimate_text(row.gain), estimate_text(row.vs_reference), _per_run(row), _number(row.lm_calls),
        _number(row.tokens), _number(row.prompt_chars), _number(row.seconds, 1), to_gain, per_candidate,
        _number(totals.per_accepted), screened_out,
    ]


def markdown_table(rows: Sequence[ComparisonRow], reference: str = "attribution") -> str:
    header = [c.format(reference=reference, fraction=round(100 * GAIN_FRACTION)) for c in COLUMNS]
    cells = [[f"**{c}**" if row.system == POOLED and c != "—" else c for c in table_cells(row)] for row in rows]
    return common_table(header, cells, "lll" + "r" * (len(header) - 3))


def markdown_report(
    rows: Sequence[ComparisonRow],
    *,
    reference: str = "attribution",
    budgets: Sequence[str] = (),
    confidence: float = 0.95,
    title: str = "Comparing optimizers",
    notes: Sequence[str] = (),
) -> str:
    """The whole Markdown file: title, budget, table and legend (`notes` are appended as bullets)."""
    distinct = sorted({b for b in budgets if b})
    if not distinct:
        budget = "Budget: no `loop.budget_calls` set; the runs stop by `loop.max_iterations` / `loop.patience`."
    elif len(distinct) == 1 and all(budgets):
        budget = f"Budget: {distinct[0]} LM calls per run (`loop.budget_calls`), the same for every optimizer."
    else:
        budget = f"**Warning: the runs had different budgets** ({', '.join(distinct or ['none'])}): not a fair race."
    level = round(100 * confidence)
    legend = [
        "*test start → final*: judge accuracy of the starting and final prompt sets on the test split, over the "
        "paired questions (all seeds; the pooled rows all systems).",
        f"*gain*: final − start in percentage points, paired per test question and seed; the {level}% interval "
        f"is a percentile bootstrap over those (question, seed) pairs (n).",
        f"*vs {reference}*: this optimizer's final score − {reference}'s, paired on the same (system, seed, "
        f"question); negative means {reference} ends higher.",
        "*gain per run*: the gain of each run (seed), to show the spread across seeds.",
        "*LM calls*, *tokens*, *prompt chars* (final prompt set, all stages), *wall s*: means per run.",
        f"*calls to {round(100 * GAIN_FRACTION)}% gain*: cumulative LM calls spent when the incumbent's dev "
        f"accuracy first reached {round(100 * GAIN_FRACTION)}% of its final dev gain, mean over the runs that "
        "gained on dev; `~` marks an estimate (calls spread evenly over iterations, when no per-iteration "
        "count was logged).",
        "*calls per candidate*: budget calls the gate spent per candidate, split into its screen (the dev "
        "questions its change can move plus a guard sample) and its whole-dev evaluation; *calls per accepted*: "
        "those calls over all candidates divided by the accepted ones; *screened out*: candidates the screen "
        "threw away without a whole-dev evaluation, of all candidates (`loop.screen`; runs logged before "
        "screening existed show —).",
        *notes,
    ]
    return "\n".join(
        [f"# {title}", "", budget, "", markdown_table(rows, reference), "", *(f"- {line}" for line in legend), ""]
    )


def rows_to_json(rows: Sequence[ComparisonRow], extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The rows as plain data (NaN as None), with `extra` (e.g. the compared run ids) beside them."""

    def clean(value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [clean(v) for v in value]
        return value

    data = [clean(asdict(row)) for row in rows]
    for row in data:  # comparison.json as before `CandidateCosts`: no `screened`, the calls as floats
        candidates = row["candidates"]
        del candidates["screened"]
        candidates.update(screen_calls=float(candidates["screen_calls"]), full_calls=float(candidates["full_calls"]))
    return {"rows": data, **dict(extra or {})}


def _cost_rows(rows: Sequence[ComparisonRow]) -> tuple[str, dict[str, ComparisonRow]]:
    """The right panel's rows, one per optimizer, and its subject: the pooled rows when the sweep has
    more than one system (`compare_runs` pools only then), else the one system's own rows."""
    pooled = {row.optimizer: row for row in rows if row.system == POOLED}
    if pooled:
        return "Pooled gain", pooled
    systems = sorted({row.system for row in rows})
    if len(systems) != 1:  # no pooled rows and several systems: nothing one point per optimizer could show
        return "Pooled gain", {}
    return f"{systems[0]}: gain", {row.optimizer: row for row in rows}


def comparison_figure(rows: Sequence[ComparisonRow]) -> Figure:
    """The comparison as a figure (see `plot_comparison`); no panel is left empty."""
    optimizers = list(dict.fromkeys(row.optimizer for row in rows))
    systems = sorted({row.system for row in rows if row.system != POOLED}) + (
        [POOLED] if any(row.system == POOLED for row in rows) else []
    )
    by_key = {(row.optimizer, row.system): row for row in rows}
    subject, cost_rows = _cost_rows(rows)
    figure = _new_figure(12.0, 4.8)
    gains, costs = figure.subplots(1, 2, width_ratios=[2.2, 1.0])
    gains.set_title("Test gain (final - start), paired 95% CI")
    gains.set_ylabel("judge accuracy gain")
    costs.set_title(f"{subject} vs LM calls per run")
    costs.set_xlabel("LM calls made per run (mean)")
    for axes in (gains, costs):
        axes.yaxis.set_major_formatter(PercentFormatter(xmax=1.0))
        axes.axhline(0.0, color="black", linewidth=0.8)
    gains.grid(True, axis="y", alpha=0.3)
    gains.set_axisbelow(True)
    costs.grid(True, alpha=0.3)
    if not rows:
        for axes in (gains, costs):
            axes.text(0.5, 0.5, "no runs", ha="center", va="center", transform=axes.transAxes)
        return figure

    palette = colormaps["tab10"]
    width = 0.8 / max(len(optimizers), 1)
    for index, optimizer in enumerate(optimizers):
        color = palette(index % palette.N)
        xs, heights, lows, highs = [], [], [], []
        for position, system in enumerate(systems):
            row = by_key.get((optimizer, system))
            if row is None or row.gain.n == 0:
                continue
            xs.append(position - 0.4 + width * (index + 0.5))
            heights.append(row.gain.mean)
            lows.append(row.gain.mean - row.gain.ci_low)
            highs.append(row.gain.ci_high - row.gain.mean)
        gains.bar(xs, heights, width=width * 0.9, color=color, label=optimizer,
                  yerr=[lows, highs], capsize=3, error_kw={"linewidth": 1.0})
        point = cost_rows.get(optimizer)
        if point is not None and point.gain.n and math.isfinite(point.lm_calls):
            costs.errorbar(
                [point.lm_calls], [point.gain.mean],
                yerr=[[point.gain.mean - point.gain.ci_low], [point.gain.ci_high - point.gain.mean]],
                color=color, marker="o", markersize=7, capsize=3, linestyle="none", label=optimizer,
            )
    gains.set_xticks(range(len(systems)), [s if s != POOLED else "pooled" for s in systems])
    gains.set_xlim(-0.6, len(systems) - 0.4)
    gains.legend(title="optimizer", loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=8)
    return figure


def plot_comparison(rows: Sequence[ComparisonRow], path: str | Path) -> Path:
    """Left: each optimizer's paired test gain with its CI per memory system (pooled last). Right: gain
    against mean LM calls per run, one point per optimizer (pooled, or the one system's)."""
    return _save(comparison_figure(rows), _png_path(path))
