"""What a person sees in the terminal: a rich progress display and the end-of-run summary tables.

Used only by entry points. It renders records it is given and computes nothing.
"""

from __future__ import annotations

import logging
import math

from rich.console import Console
from rich.logging import RichHandler
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from pipeline.evaluation import EvaluationReport, MetricSummary
from pipeline.runner import LMCallCounts


def setup_logging(level: int = logging.INFO) -> None:
    logging.basicConfig(
        level=level, format="%(message)s", datefmt="[%X]", handlers=[RichHandler(show_path=False)], force=True
    )
    for noisy in ("LiteLLM", "litellm", "httpx", "alembic", "mlflow", "dspy", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


class RichProgress:
    """A `ProgressSink` that shows one bar per phase."""

    def __init__(self, console: Console | None = None) -> None:
        self._progress = Progress(
            TextColumn("[bold]{task.description:<8}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=console, transient=False,
        )
        self._task_by_phase: dict[str, int] = {}

    def __enter__(self) -> RichProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def begin(self, phase: str, total: int) -> None:
        if phase in self._task_by_phase:
            self._progress.reset(self._task_by_phase[phase], total=total)
        else:
            self._task_by_phase[phase] = self._progress.add_task(phase, total=total)

    def advance(self, phase: str, amount: int = 1) -> None:
        self._progress.advance(self._task_by_phase[phase], amount)


def _pct(value: float) -> str:
    return "-" if math.isnan(value) else f"{100 * value:.1f}"


def _row(name: str, summary: MetricSummary) -> tuple[str, ...]:
    return (
        name, str(summary.n), _pct(summary.judge_accuracy),
        f"[{_pct(summary.ci_low)}, {_pct(summary.ci_high)}]", _pct(summary.f1), _pct(summary.bleu1),
    )


def report_table(report: EvaluationReport, title: str) -> Table:
    table = Table(title=title)
    for column in ("category", "n", "judge acc %", "95% CI", "F1 %", "BLEU-1 %"):
        table.add_column(column, justify="left" if column == "category" else "right")
    excluded = ",".join(str(c) for c in report.excluded_categories)
    table.add_row(*_row(f"overall (excl. cat {excluded})" if excluded else "overall", report.overall), style="bold")
    for name, summary in report.by_category.items():
        table.add_row(*_row(name, summary))
    return table


def counts_line(counts: LMCallCounts) -> str:
    return (
        f"LLM calls: {counts.calls} ({counts.cached_calls} from cache), tokens: {counts.prompt_tokens} in / "
        f"{counts.completion_tokens} out, failed operations: {counts.failed_operations}"
    )
