"""PNG plots of optimization runs: accuracy per iteration and blame per stage per iteration.

`plot_scores` draws dev accuracy against the iteration with its confidence band, the train accuracy
when known, and every candidate the gate saw (accepted: filled markers, rejected: hollow markers).
`plot_blame` draws stacked bars of blamed failures per stage for each iteration; stages blamed on
their non-prompt knobs are hatched. Both build a `matplotlib.figure.Figure` on the Agg canvas directly — no pyplot, no
global figure state, no GUI backend — and write a PNG without timestamps, so equal inputs give equal
files (the lab's comparison plot, `experiments.lab.comparison`, draws the same way). This
module does not compute scores or blame and does not log to MLflow.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator, PercentFormatter
from memtrace_loop.pipeline.analysis.attribution.records import Tunable
from memtrace_loop.pipeline.analysis.blame import BlameTable

DPI = 120
KNOB_HATCH = "///"
_PNG_METADATA = {"Software": None}  # no version string: files depend only on their inputs
_ACCEPTED_COLOR = "#2e7d32"
_REJECTED_COLOR = "#c62828"
_DEV_COLOR = "#1f4e9c"
_TRAIN_COLOR = "#7a7a7a"


@dataclass(frozen=True)
class IterationScore:
    """The scores of one iteration: the incumbent's dev judge accuracy with its CI, its train
    accuracy (if measured) and the dev accuracies of the candidates the gate accepted / rejected.
    Accuracies are fractions in [0, 1]; NaN CI bounds (no cases) are drawn as a gap."""

    iteration: int
    dev_accuracy: float
    ci_low: float
    ci_high: float
    train_accuracy: float | None = None
    accepted: tuple[float, ...] = ()
    rejected: tuple[float, ...] = ()


def _png_path(path: str | Path) -> Path:
    if Path(path).suffix.lower() != ".png":
        raise ValueError(f"plot path must end in .png, got {path}")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return Path(path)


def _new_figure(width: float, height: float) -> Figure:
    figure = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _save(figure: Figure, path: Path) -> Path:
    figure.savefig(path, format="png", dpi=DPI, metadata=_PNG_METADATA)
    return path


def _unique(numbers: Sequence[int]) -> None:
    if len(set(numbers)) != len(numbers):
        raise ValueError(f"iteration numbers must be unique, got {list(numbers)}")


def _spread(x: int, count: int, width: float = 0.18) -> list[float]:
    """x positions for `count` markers around `x`, so that candidates of one iteration do not overlap."""
    if count <= 1:
        return [float(x)] * count
    step = 2 * width / (count - 1)
    return [x - width + i * step for i in range(count)]


DEV_LABEL = "dev accuracy at iteration start"  # the prompt set each iteration started from (`IterationScore`)


def plot_scores(iterations: Sequence[IterationScore], path: str | Path) -> Path:
    """Accuracy vs iteration: dev line with CI band, train line, accepted/rejected candidates."""
    return _save(scores_figure(iterations), _png_path(path))


def scores_figure(iterations: Sequence[IterationScore]) -> Figure:
    """The figure `plot_scores` writes. Iteration i's dev and train points are the prompt set it started
    from (before its candidates; the log's "dev before"); its candidates are drawn beside them."""
    rows = sorted(iterations, key=lambda row: row.iteration)
    _unique([row.iteration for row in rows])
    figure = _new_figure(7.5, 4.5)
    axes = figure.add_subplot()
    axes.set_title("Judge accuracy at the start of each iteration, and its candidates")
    axes.set_xlabel("iteration")
    axes.set_ylabel("judge accuracy")
    axes.yaxis.set_major_formatter(PercentFormatter(xmax=1.0, decimals=0))
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.grid(True, alpha=0.3)
    axes.set_ylim(-0.02, 1.02)
    if not rows:
        axes.text(0.5, 0.5, "no iterations yet", ha="center", va="center", transform=axes.transAxes)
        return figure

    xs = [row.iteration for row in rows]
    axes.fill_between(xs, [row.ci_low for row in rows], [row.ci_high for row in rows], color=_DEV_COLOR, alpha=0.15,
                      linewidth=0, label=f"{DEV_LABEL}: 95% CI")
    axes.plot(xs, [row.dev_accuracy for row in rows], color=_DEV_COLOR, marker="o", markersize=5, linewidth=2,
              label=DEV_LABEL, zorder=3)
    train = [(row.iteration, row.train_accuracy) for row in rows if row.train_accuracy is not None]
    if train:
        axes.plot([x for x, _ in train], [y for _, y in train], color=_TRAIN_COLOR, linestyle="--", marker="s",
                  markersize=4, linewidth=1.5, label="train accuracy at iteration start", zorder=2)
    for row in rows:
        candidates = [(a, True) for a in row.accepted] + [(r, False) for r in row.rejected]
        for x, (value, accepted) in zip(_spread(row.iteration, len(candidates)), candidates, strict=True):
            color = _ACCEPTED_COLOR if accepted else _REJECTED_COLOR
            axes.plot([x], [value], linestyle="none", marker="D" if accepted else "o", markersize=7,
                      markeredgewidth=1.5, markeredgecolor=color, markerfacecolor=color if accepted else "none",
                      zorder=4)
    handles, _ = axes.get_legend_handles_labels()
    if any(row.accepted for row in rows):
        handles.append(Line2D([], [], linestyle="none", marker="D", markersize=7, markeredgecolor=_ACCEPTED_COLOR,
                              markerfacecolor=_ACCEPTED_COLOR, label="accepted candidate"))
    if any(row.rejected for row in rows):
        handles.append(Line2D([], [], linestyle="none", marker="o", markersize=7, markeredgewidth=1.5,
                              markeredgecolor=_REJECTED_COLOR, markerfacecolor="none", label="rejected candidate"))
    axes.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    axes.set_xlim(*((xs[0] - 1, xs[0] + 1) if len(xs) == 1 else (xs[0] - 0.5, xs[-1] + 0.5)))
    return figure


def plot_blame(blame_by_iteration: Sequence[tuple[int, BlameTable]], path: str | Path) -> Path:
    """Stacked bars: blamed failures per stage, one bar per iteration; knob-blamed stages hatched."""
    path = _png_path(path)
    rows = sorted(blame_by_iteration, key=lambda item: item[0])
    _unique([number for number, _ in rows])
    figure = _new_figure(7.5, 4.5)
    axes = figure.add_subplot()
    axes.set_title("Blamed failures per stage and iteration")
    axes.set_xlabel("iteration")
    axes.set_ylabel("blamed failures")
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes.grid(True, axis="y", alpha=0.3)
    axes.set_axisbelow(True)

    totals: dict[tuple[str, str], int] = {}
    for _, table in rows:
        for blame in table.rows:
            key = (blame.stage, blame.tunable)
            totals[key] = totals.get(key, 0) + blame.count
    # the most blamed stage sits at the bottom; ties by name, prompts before knobs
    series = sorted(totals, key=lambda key: (-totals[key], key[0], key[1] != Tunable.PROMPT))
    if not rows or not series:
        axes.text(0.5, 0.5, "no blamed failures", ha="center", va="center", transform=axes.transAxes)
        axes.set_xticks([number for number, _ in rows])
        return _save(figure, path)

    palette = colormaps["tab10"] if len(series) <= 10 else colormaps["tab20"]
    xs = [number for number, _ in rows]
    bottoms = [0.0] * len(rows)
    for index, (stage, tunable) in enumerate(series):
        heights = [float(table.by_stage[stage].count)
                   if stage in table.by_stage and table.by_stage[stage].tunable == tunable else 0.0
                   for _, table in rows]
        knobs = tunable != Tunable.PROMPT
        axes.bar(xs, heights, bottom=bottoms, width=0.6, color=palette(index % palette.N),
                 edgecolor="black" if knobs else "white", linewidth=0.6, hatch=KNOB_HATCH if knobs else None,
                 label=f"{stage} (knobs)" if knobs else stage)
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    top = max(bottoms)
    for x, (_, table), height in zip(xs, rows, bottoms, strict=True):
        axes.text(x, height + top * 0.01, f"n={table.total}", ha="center", va="bottom", fontsize=9)
    axes.set_ylim(0, top * 1.12 if top > 0 else 1)
    axes.set_xticks(xs)
    handles, _ = axes.get_legend_handles_labels()
    handles.reverse()  # legend top-to-bottom in the order of the stacks
    if any(tunable != Tunable.PROMPT for _, tunable in series):
        handles.append(Patch(facecolor="white", edgecolor="black", hatch=KNOB_HATCH, label="hatched: knobs"))
    axes.legend(handles=handles, title="stage", loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return _save(figure, path)
