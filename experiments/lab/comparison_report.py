"""The optimizer comparison as Markdown (table and legend), its JSON twin and a PNG plot, from `ComparisonRow`s.

The plot (gain per optimizer and system with its CI; gain against LM calls) draws as
`pipeline.tracking.plots` does (equal inputs, equal files). It computes nothing and logs nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.ticker import PercentFormatter
from memtrace_loop.experiments.lab.bench.common import markdown_table as common_table
from memtrace_loop.experiments.lab.comparison import POOLED, ComparisonRow, GainEstimate
from memtrace_loop.pipeline.loop.costs import GAIN_FRACTION
from memtrace_loop.pipeline.tracking.plots import _new_figure, _png_path, _save

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


def _accuracy(row: ComparisonRow) -> str:
    if not (math.isfinite(row.start_accuracy) and math.isfinite(row.final_accuracy)):
        return "—"
    return f"{100 * row.start_accuracy:.1f} → {100 * row.final_accuracy:.1f}"


def _per_run(row: ComparisonRow) -> str:
    gains = [g for g in row.gain_by_run if math.isfinite(g)]
    if not gains:
        return "—"
    if len(gains) <= 4:
        return ", ".join(_points(g) for g in gains)
    return f"{_points(min(gains))} … {_points(max(gains))}"


def _calls_to_gain(row: ComparisonRow) -> str:
    if row.runs_with_gain == 0:
        return "—"
    value = f"{'~' if row.calls_estimated else ''}{_number(row.calls_to_90)}"
    return value if row.runs_with_gain == row.runs else f"{value} ({row.runs_with_gain}/{row.runs} runs)"


def _per_candidate(row: ComparisonRow) -> str:
    totals = row.candidates
    if not totals.candidates:
        return "—"
    screen, full = totals.screen_calls / totals.candidates, totals.full_calls / totals.candidates
    return f"{_number(totals.per_candidate)} ({_number(screen)} + {_number(full)})"


def _screened_out(row: ComparisonRow) -> str:
    totals = row.candidates
    return f"{totals.screened_out}/{totals.candidates}" if totals.candidates else "—"


def table_cells(row: ComparisonRow) -> list[str]:
    """The row's cells in `COLUMNS` order."""
    return [
        row.optimizer, "pooled" if row.system == POOLED else row.system, str(row.runs), _accuracy(row),
        estimate_text(row.gain), estimate_text(row.vs_reference), _per_run(row), _number(row.lm_calls),
        _number(row.tokens), _number(row.prompt_chars), _number(row.seconds, 1), _calls_to_gain(row),
        _per_candidate(row), _number(row.candidates.per_accepted), _screened_out(row),
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
