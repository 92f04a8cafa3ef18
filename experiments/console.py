"""What a person sees in the terminal: a rich progress display and the end-of-run summary tables.

Used only by entry points. It renders records it is given and computes nothing.
"""

from __future__ import annotations

import logging
import math
import sys
from typing import TYPE_CHECKING

from memtrace_loop.experiments.app_setup import log_prefix, no_lm_history, quiet_progress_bars
from memtrace_loop.experiments.console_layout import is_echo
from memtrace_loop.pipeline.loop.costs import calls_to_gain, candidate_costs
from rich.console import Console
from rich.logging import RichHandler
from rich.panel import Panel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:  # the records shown: their modules load the LM stack, which `memtrace report` never needs
    from memtrace_loop.pipeline.analysis.blame import BlameTable
    from memtrace_loop.pipeline.analysis.diagnosis import Diagnosis
    from memtrace_loop.pipeline.analysis.evaluation import EvaluationReport, MetricSummary
    from memtrace_loop.pipeline.backends.call_count import CallTally, RoleCalls
    from memtrace_loop.pipeline.backends.failure_guard import FailedCalls
    from memtrace_loop.pipeline.loop.failure_impact import FailureImpact
    from memtrace_loop.pipeline.loop.optimization import LoopResult
    from memtrace_loop.pipeline.loop.runner import LMCallCounts

FILE_LOG_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"


def setup_logging(level: int = logging.INFO) -> None:
    """The root logger at `level` on a rich console handler (replacing Hydra's) and on Hydra's job log
    file (plain format; it also gets what the console printed and, at DEBUG, our `memtrace.*` details);
    console lines of a multirun job start with its label; the libraries' bars and DSPy's history off."""
    root = logging.getLogger()
    files = [h for h in root.handlers if isinstance(h, logging.FileHandler)]
    for file_handler in files:
        file_handler.setFormatter(logging.Formatter(FILE_LOG_FORMAT))
        file_handler.setLevel(logging.NOTSET)
    quiet_progress_bars()  # the libraries' own bars (datasets, MLflow downloads): ours show the work
    if "dspy" in sys.modules:  # else where the LMs are built (`memtrace report` and `attribute` may need none)
        no_lm_history()  # DSPy's record of every call: nobody reads it, it costs GBs and time on long runs
    console = RichHandler(show_path=False, level=level)
    console.setFormatter(logging.Formatter(log_prefix() + "%(message)s", datefmt="[%X]"))  # a sweep job: its label
    console.addFilter(lambda record: not is_echo(record))  # printed already
    for handler in list(root.handlers):
        if handler not in files:
            root.removeHandler(handler)
            handler.close()
    root.addHandler(console)
    root.setLevel(level)
    logging.getLogger("memtrace").setLevel(min(level, logging.DEBUG))  # DEBUG reaches the log files only
    for noisy in ("LiteLLM", "litellm", "httpx", "alembic", "mlflow", "dspy", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


class RichProgress:
    """A `ProgressSink` that shows one bar per phase."""

    def __init__(self, console: Console | None = None) -> None:
        self._progress = Progress(
            TextColumn("[bold]{task.description:<8}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=console, transient=False,
        )
        self._task_by_phase: dict[str, TaskID] = {}

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


def _table(title: str, columns: tuple[str, ...], left: tuple[str, ...]) -> Table:
    table = Table(title=title)
    for column in columns:
        table.add_column(column, justify="left" if column in left else "right")
    return table


def report_table(report: EvaluationReport, title: str) -> Table:
    table = _table(title, ("category", "n", "judge acc %", "95% CI", "F1 %", "BLEU-1 %"), ("category",))
    excluded = ",".join(str(c) for c in report.excluded_categories)
    table.add_row(*_row(f"overall (excl. cat {excluded})" if excluded else "overall", report.overall), style="bold")
    for name, summary in report.by_category.items():
        table.add_row(*_row(name, summary))
    return table


def counts_line(counts: LMCallCounts) -> str:
    """What the traced graphs record: LM calls of every operation (cached = no tokens reported)."""
    return (
        f"Traced operations: {counts.calls} LM calls ({counts.cached_calls} from cache), "
        f"tokens: {counts.prompt_tokens} in / "
        f"{counts.completion_tokens} out, failed operations: {counts.failed_operations}"
    )


def calls_table(tally: CallTally, saved: int | None = None, title: str = "LM calls by role") -> Table:
    """Per role: calls made (failed included), served by DSPy's cache, reused (answered earlier in this
    run) and tokens; the total and, for the loop, the calls reused memories saved."""
    from memtrace_loop.pipeline.backends.call_count import BUDGET_ROLES  # DSPy's: the apps that call LMs

    table = _table(title, ("role", "made", "cached", "reused", "failed", "tokens in", "tokens out"), ("role",))
    for role, calls in tally.by_role.items():
        budget = " (budget)" if role in BUDGET_ROLES else ""
        table.add_row(f"{role}{budget}", *_calls_row(calls))
    table.add_row("all", *_calls_row(tally.total()), style="bold")
    if saved is not None:
        table.add_row("saved (reused memory)", str(saved), "", "", "", "", "")
    return table


def _calls_row(calls: RoleCalls) -> tuple[str, ...]:
    counts = (calls.made, calls.cached, calls.reused, calls.failed, calls.prompt_tokens, calls.completion_tokens)
    return tuple(str(count) for count in counts)


def reuse_line(tally: CallTally) -> str:
    """The share of calls the run's reused replies saved, for the task role and all roles."""
    task, total = tally.role("task"), tally.total()
    return (
        f"Reused replies (the same request answered earlier in this run, not sent again): task {task.reused} "
        f"({task.reuse_share:.1%} of its calls saved), all roles {total.reused} ({total.reuse_share:.1%})"
    )


def budget_line(result: LoopResult, budget_calls: int, counts_cached: bool) -> str:
    """Why the loop stopped and the budget calls spent (the test evaluation is outside the budget)."""
    from memtrace_loop.pipeline.backends.call_count import BUDGET_ROLES

    counted = "made + cached" if counts_cached else "made"
    limit = f"of {budget_calls}" if budget_calls else "(no budget set)"
    return (
        f"Stopped: {result.stop_reason or 'unknown'}; budget calls spent before the test evaluation: "
        f"{result.budget_spent} {limit} ({'+'.join(BUDGET_ROLES)} calls, {counted})"
    )


def candidate_cost_line(result: LoopResult, min_gain: float) -> str:
    """What candidates cost in budget calls, and the calls until dev reached 90% of its final gain."""
    costs = candidate_costs(result.history, min_gain)
    to_gain = calls_to_gain(result.history, result.dev_final.report.overall.judge_accuracy)
    line = (
        f"Candidates: {costs.candidates} ({costs.screened_out} screened out); budget calls on screens "
        f"{costs.screen_calls}, on whole-dev evaluations {costs.full_calls}; per candidate "
        f"{_calls(costs.per_candidate)}, per accepted candidate {_calls(costs.per_accepted)}; to 90% of the final "
        f"dev gain {'-' if to_gain is None else f'{to_gain:.0f}'}"
    )
    if costs.audited:
        line += f"; audit: {costs.audit_would_pass} of {costs.audited} screened-out candidates would have passed"
    return line


def _calls(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.0f}"


def _cell(summary: MetricSummary | None) -> str:
    if summary is None:
        return "-"
    return f"{_pct(summary.judge_accuracy)} [{_pct(summary.ci_low)}, {_pct(summary.ci_high)}]"


def _headline(rationale: str, limit: int = 100) -> str:
    """The first clause of a candidate's rationale (up to its first closing parenthesis or sentence end)."""
    cut = min((i for i in (rationale.find(")") + 1, rationale.find(". ") + 1) if i > 0), default=len(rationale))
    head = rationale[:cut].strip()
    return head if len(head) <= limit else head[: limit - 1] + "…"


def _checkpointed_dev_start(result: LoopResult) -> str | None:
    """A resumed run's dev start cell, from its checkpoint's iteration 0 (overall only); else None."""
    first = result.history[0] if result.history else None
    if first is None or first.iteration != 0 or (result.iterations and result.iterations[0].iteration == 0):
        return None
    return f"{_pct(first.dev_accuracy)} [{_pct(first.dev_ci[0])}, {_pct(first.dev_ci[1])}]"


def loop_tables(result: LoopResult, system_name: str) -> list[Table]:
    """Start vs final accuracy per category (dev and test), blame per iteration, accepted candidates."""
    start_dev = result.iterations[0].dev.report if result.iterations and result.iterations[0].iteration == 0 else None
    reports = {
        "dev start": start_dev,
        "dev final": result.dev_final.report,
        "test start": result.test_start.report,
        "test final": result.test_final.report,
    }
    checkpointed = _checkpointed_dev_start(result)
    note = "; dev start from the checkpoint (overall only)" if checkpointed else ""
    scores = Table(title=f"{system_name}: judge accuracy %, start vs final prompts [95% CI]{note}")
    scores.add_column("category")
    for name in reports:
        scores.add_column(name, justify="right")
    excluded = ",".join(str(c) for c in result.test_final.report.excluded_categories)
    overall = [_cell(r.overall if r else None) for r in reports.values()]
    scores.add_row(
        f"overall (excl. cat {excluded})" if excluded else "overall",
        checkpointed or overall[0], *overall[1:], style="bold",
    )
    for category in result.test_final.report.by_category:
        scores.add_row(category, *(_cell(r.by_category.get(category) if r else None) for r in reports.values()))

    stages = list(dict.fromkeys(row.stage for s in result.history for row in s.blame.rows))
    blame = Table(title="blame per stage per iteration (attributed train failures)")
    blame.add_column("iter", justify="right")
    blame.add_column("dev before %", justify="right")  # the prompt set the iteration started from
    for stage in stages:
        blame.add_column(stage, justify="right")
    blame.add_column("candidates")
    for summary in result.history:
        count_by_stage = {row.stage: row.count for row in summary.blame.rows}
        verdicts = ", ".join(
            f"{'+'.join(c.stages)}: {'accepted' if c.accepted else 'rejected'} ({100 * c.gain:+.1f})"
            for c in summary.candidates
        )
        blame.add_row(
            str(summary.iteration), _pct(summary.dev_accuracy), *(str(count_by_stage.get(s, "")) for s in stages),
            verdicts or ("baseline" if summary.iteration == 0 else "no candidate"),
        )

    accepted = _table("accepted candidates", ("iter", "stages", "dev after %", "paired gain % [95% CI]", "why"),
                      ("stages", "paired gain % [95% CI]", "why"))
    for summary in result.history:
        for c in summary.candidates:
            if c.accepted:
                accepted.add_row(
                    str(summary.iteration), ", ".join(c.stages), _pct(c.dev_accuracy),
                    f"{100 * c.gain:+.1f} [{100 * c.gain_ci[0]:+.1f}, {100 * c.gain_ci[1]:+.1f}]",
                    _headline(c.rationale),
                )
    return [scores, blame, accepted]


def blame_table(blame: BlameTable, title: str) -> Table:
    """Blame per stage, most blamed first, with the replay's verdicts on them."""
    columns = ("stage", "tunable", "count", "share %", "weight", "verified", "refuted", "unverif.", "error types")
    table = _table(title, columns, ("stage", "tunable", "error types"))
    for row in blame.rows:
        table.add_row(
            row.stage, row.tunable.value, str(row.count), _pct(row.share), f"{row.weight:.2f}", str(row.verified),
            str(row.refuted), str(row.unverifiable),
            ", ".join(f"{kind.removesuffix('Error')} {n}" for kind, n in row.count_by_error_type.items()),
        )
    return table


def diagnosis_panel(diagnosis: Diagnosis, title: str = "diagnosis") -> Panel:
    """The written analysis of the failures, as plain text: an LM's words are never read as markup."""
    groups = ", ".join(f"{g.stage}/{g.error_type.removesuffix('Error')} {g.count}" for g in diagnosis.groups[:4])
    counts = f"\n\n{diagnosis.failures} attributed failures: {groups}" if diagnosis.groups else ""
    # the counts in the body, not the subtitle: a subtitle is cut at the panel's width
    return Panel(Text(diagnosis.headline() + counts), title=title, expand=False)


def impact_clause(scope: str, impact: FailureImpact, unit: str = "questions") -> str:
    """`eval: 3 of 40 scored questions touched by a failed operation (2 scored wrong); judge accuracy 45.0%,
    50.0% without them, between 40.0% and 50.0% had they not failed`."""
    head = f"{scope}: {impact.touched} of {impact.scored} scored {unit} touched by a failed operation"
    if not impact.touched:
        return head
    return (f"{head} ({impact.touched_wrong} scored wrong); judge accuracy {_pct(impact.accuracy)}%, "
            f"{_pct(impact.accuracy_untouched)}% without them, between {_pct(impact.accuracy_low)}% and "
            f"{_pct(impact.accuracy_high)}% had they not failed")


def failed_calls_lines(failed: FailedCalls, impacts: dict[str, FailureImpact], unit: str = "questions") -> list[str]:
    """A run's finally failed LM calls per role, then one line per scored evaluation; none without."""
    if not failed:
        return []
    return [f"Failed LM calls: {failed.summary()}", *(impact_clause(s, i, unit) for s, i in impacts.items())]
