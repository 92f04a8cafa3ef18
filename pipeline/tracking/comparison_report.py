"""The comparison of optimizers as text: a Markdown table (and its JSON twin) from `ComparisonRow`s.

`markdown_report` writes a title, the budget line, one table row per optimizer x system (pooled rows
last, in bold) and a legend saying what every column means. Gains are in percentage points of judge
accuracy with the paired bootstrap CI; costs are means per run. `rows_to_json` is the same content for
machines. This module does not compute anything (`pipeline.analysis.comparison`) and does not log.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from memtrace_loop.pipeline.analysis.comparison import GAIN_FRACTION, POOLED, ComparisonRow, GainEstimate

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
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * 3 + ["---:"] * (len(header) - 3)) + "|"]
    for row in rows:
        cells = table_cells(row)
        if row.system == POOLED:
            cells = [f"**{cell}**" if cell != "—" else cell for cell in cells]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


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

    return {"rows": [clean(asdict(row)) for row in rows], **dict(extra or {})}
