"""What candidate screening saves per construction candidate at LoCoMo scale:
`python -m memtrace_loop.experiments.lab.bench.screen_bench` (`make bench`).

On the sim dataset (category 5 neither scored nor answered), per system (sim LM uncached, calls counted
by a `CallLedger`): the incumbent is evaluated once, its failures attributed (lineage) and the
`attribution` then `uniform` optimizers propose until `--candidates` distinct construction-prompt
candidates are in hand. Each is measured twice from a fresh `MemoryCache` and the incumbent's replies:
**full** (the whole set) and **screened** (what `OptimizationLoop._gate` spends: the `CandidateScreens`
screen, plus the whole set when it passes), with the screen's questions, conversations rebuilt, verdict,
the full paired gain and the gate's (`MIN_GAIN`) verdict. One table, a mean row per system. Judge and
rewriter calls are not counted; it sets no target.
"""

from __future__ import annotations

import logging
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("MEM0_TELEMETRY", "False")
os.environ.setdefault("MEM0_DIR", tempfile.mkdtemp(prefix="memtrace-screen-bench-"))

import dspy
from memtrace_loop.experiments.app_setup import no_lm_history
from memtrace_loop.experiments.lab.bench.common import (
    build,
    markdown_table,
    parser,
    print_plain,
    rich_table,
    sim_dataset,
)
from memtrace_loop.memory_systems.base import MemorySystem
from memtrace_loop.optimizers.base import Candidate, OptimizationContext
from memtrace_loop.optimizers.registry import build_optimizer
from memtrace_loop.pipeline.analysis.attribution.lineage import LineageAttributor
from memtrace_loop.pipeline.analysis.attribution.protocol import TracedRun, attribute_run
from memtrace_loop.pipeline.analysis.blame import aggregate_blame
from memtrace_loop.pipeline.analysis.evaluation import paired_difference
from memtrace_loop.pipeline.analysis.judge import make_judge
from memtrace_loop.pipeline.backends.call_count import BUDGET_ROLES, CallLedger, ReplyStore
from memtrace_loop.pipeline.backends.lm import LMConfig, LMSet
from memtrace_loop.pipeline.backends.registry import build_lm
from memtrace_loop.pipeline.backends.services import RunServices
from memtrace_loop.pipeline.core.records import Dataset, PromptSet
from memtrace_loop.pipeline.loop.runner import MemoryCache, RunResult, run_dataset
from memtrace_loop.pipeline.loop.screening import CandidateScreens, ScreenSettings
from rich.console import Console
from rich.logging import RichHandler
from rich.table import Table

SYSTEMS = ("mem0", "mem0ai")
MIN_GAIN = 0.02  # the gate's (`LoopSettings.min_gain`)
EXCLUDED = (5,)  # LoCoMo's protocol: adversarial questions are not scored
COLUMNS = ("system", "candidate (stages, optimizer)", "full calls", "screened calls", "ratio", "screen questions",
           "conversations rebuilt", "screen verdict", "full gain (pp)", "gate")


@dataclass(frozen=True)
class Incumbent:
    """The starting prompts on the whole evaluation set: its budget calls, accuracy and run."""

    calls: int
    accuracy: float
    run: RunResult

    @property
    def scored(self) -> int:
        return self.run.report.overall.n


@dataclass(frozen=True)
class CandidateCost:
    """One construction candidate, full vs screened (calls: budget-role calls made)."""

    system: str
    stages: tuple[str, ...]
    optimizer: str
    full_calls: int
    full_gain: float  # paired gain over the incumbent on every scored question
    screen_calls: int  # the screen (0 when nothing was run, or there was no screen)
    rest_calls: int  # the whole-set evaluation after a passing screen (or without a screen), cache kept
    screen_questions: int  # questions the screen ran (0: could not reach min_gain, nothing run)
    scored: int
    rebuilt: int  # conversations the screen built (not reused)
    conversations: int
    verdict: str  # "passed", "screened out" or "no screen"

    @property
    def screened_calls(self) -> int:
        return self.screen_calls + self.rest_calls

    @property
    def ratio(self) -> float:
        return self.screened_calls / self.full_calls if self.full_calls else math.nan

    @property
    def gate_passed(self) -> bool:
        return self.full_gain >= MIN_GAIN - 1e-12


Log = Callable[[str], None]


class Counted:
    """Runs evaluations of one system and counts their budget-role calls (ledger differences)."""

    def __init__(self, system: MemorySystem, judge: dspy.Predict, ledger: CallLedger, workers: int) -> None:
        self.system, self.judge, self.ledger, self.workers = system, judge, ledger, workers

    def spent(self) -> int:
        total = self.ledger.tally().total(BUDGET_ROLES)
        return total.made + total.cached  # cached is 0 here (DSPy's cache is off); counted as the loop does

    def run(self, prompts: PromptSet, dataset: Dataset, cache: MemoryCache,
            knobs: Mapping[str, Any] | None = None) -> tuple[RunResult, int]:
        start = self.spent()
        system = self.system.with_knobs(knobs or {}).with_prompts(prompts)
        result = run_dataset(system, self.judge, dataset, workers=self.workers, exclude_categories=EXCLUDED,
                             memory_cache=cache)
        return result, self.spent() - start


def construction_proposals(system: MemorySystem, incumbent: Incumbent, dataset: Dataset, rewriter: dspy.BaseLM,
                           wanted: int) -> list[tuple[Candidate, str]]:
    """Real candidates as the loop gets them: the attribution optimizer on the incumbent's attributed failures,
    then the uniform one (iterations 1, 2, ...) until `wanted` construction candidates (distinct prompts)."""
    run = incumbent.run
    traced = TracedRun(run.results, run.graph_by_conversation, {c.id: c for c in dataset.conversations}, EXCLUDED)
    attributions = attribute_run(LineageAttributor(), traced)
    prompts = system.prompt_set()
    construction = set(system.construction_stages)
    kept: dict[str, tuple[Candidate, str]] = {}
    rounds = [("attribution", 1), *(("uniform", i) for i in range(1, 1 + len(system.prompt_set().stages())))]
    for name, iteration in rounds:
        if len(kept) >= wanted:
            break
        context = OptimizationContext(iteration, prompts, aggregate_blame(attributions), attributions,
                                      traced.failures(), knobs=system.knob_values(),
                                      graph_by_conversation=run.graph_by_conversation)
        optimizer = build_optimizer(name, rewriter, system=system)
        for candidate in optimizer.propose(context):
            if set(candidate.changed_stages) & construction and not candidate.knobs:
                kept.setdefault(candidate.prompts.digest(), (candidate, name))
    return list(kept.values())[:wanted]


def measure(fresh: Callable[[], Counted], incumbent: Incumbent, dataset: Dataset, candidate: Candidate,
            optimizer: str, seed: int, log: Log) -> CandidateCost:
    """Full and screened calls of one candidate, each from a fresh memory cache and the replies the
    incumbent's evaluation left (`fresh()`: what a loop that has evaluated the incumbent can reuse)."""
    started = time.perf_counter()
    counted = fresh()
    full, full_calls = counted.run(candidate.prompts, dataset, MemoryCache())
    gain = paired_difference(full.results, incumbent.run.results, seed=seed, exclude_categories=EXCLUDED)
    log(f"  full: {full_calls:,} calls, gain {100 * gain.mean_difference:+.1f} pp "
        f"({time.perf_counter() - started:.0f} s)")
    started = time.perf_counter()
    cache, counted = MemoryCache(), fresh()
    screens = CandidateScreens(
        dataset, incumbent.run, lambda prompts, part, knobs: counted.run(prompts, part, cache, knobs)[0],
        counted.spent, settings=ScreenSettings(), min_gain=MIN_GAIN, seed=seed, exclude_categories=EXCLUDED,
    )
    outcome = screens.outcome(candidate.prompts, {}, candidate.changed_stages)
    rest = 0
    if outcome is None or outcome.verdict.passed:
        _, rest = counted.run(candidate.prompts, dataset, cache)
    rebuilt = len(dataset.conversations)  # conversations the screen built (no screen: the whole-set evaluation's)
    if outcome is not None:
        rebuilt = 0 if outcome.run is None else len(outcome.run.graph_by_conversation) - outcome.run.reused_memories
    cost = CandidateCost(
        counted.system.name, tuple(candidate.changed_stages), optimizer, full_calls, gain.mean_difference,
        outcome.calls if outcome else 0, rest, outcome.verdict.questions if outcome else incumbent.scored,
        incumbent.scored, rebuilt, len(dataset.conversations),
        "no screen" if outcome is None else "passed" if outcome.verdict.passed else "screened out",
    )
    log(f"  screened: {cost.screen_calls:,} + {cost.rest_calls:,} calls, {cost.verdict} "
        f"({time.perf_counter() - started:.0f} s)")
    return cost


def bench_system(name: str, dataset: Dataset, seed: int, candidates: int, workers: int,
                 log: Log) -> tuple[Incumbent, list[CandidateCost]]:
    ledger, replies = CallLedger(), ReplyStore()

    def counted_lms(store: ReplyStore) -> LMSet:
        lm = build_lm(LMConfig(backend="sim", model="stand-in", cache=False), services=RunServices(replies=store))
        return ledger.counted(LMSet(lm, lm, lm, lm))

    def counted_system(lms: LMSet) -> Counted:
        system = build({"name": name})
        system.set_lm(lms.task)
        return Counted(system, make_judge(lms.judge), ledger, workers)

    lms = counted_lms(replies)
    counted = counted_system(lms)
    system = counted.system

    def fresh() -> Counted:  # the same system and judge on LMs that start from the incumbent's replies
        return counted_system(counted_lms(replies.snapshot()))

    started = time.perf_counter()
    run, calls = counted.run(system.prompt_set(), dataset, MemoryCache())
    incumbent = Incumbent(calls, run.report.overall.judge_accuracy, run)
    log(f"{name}: incumbent {100 * incumbent.accuracy:.1f}% on {incumbent.scored} scored questions, {calls:,} calls "
        f"({time.perf_counter() - started:.0f} s)")
    proposals = construction_proposals(system, incumbent, dataset, lms.rewriter, candidates)
    log(f"{name}: {len(proposals)} construction candidates: "
        + "; ".join(f"{', '.join(c.changed_stages)} ({optimizer})" for c, optimizer in proposals))
    costs = []
    for candidate, optimizer in proposals:
        log(f"{name}: candidate {', '.join(candidate.changed_stages)} ({optimizer})")
        costs.append(measure(fresh, incumbent, dataset, candidate, optimizer, seed, log))
    return incumbent, costs


def _row(cost: CandidateCost) -> tuple[str, ...]:
    return (
        cost.system, f"{', '.join(cost.stages)} ({cost.optimizer})", f"{cost.full_calls:,}",
        f"{cost.screened_calls:,}" + (f" ({cost.screen_calls:,} + {cost.rest_calls:,})" if cost.rest_calls and
                                      cost.screen_calls else ""),
        f"{cost.ratio:.2f}", f"{cost.screen_questions}/{cost.scored}", f"{cost.rebuilt}/{cost.conversations}",
        cost.verdict, f"{100 * cost.full_gain:+.1f}", "would pass" if cost.gate_passed else "would fail",
    )


def _mean_row(system: str, incumbent: Incumbent, costs: Sequence[CandidateCost]) -> tuple[str, ...]:
    def mean(values: Sequence[float]) -> str:
        return f"{statistics.fmean(values):,.0f}" if values else "–"

    full, screened = [c.full_calls for c in costs], [c.screened_calls for c in costs]
    ratio = sum(screened) / sum(full) if sum(full) else math.nan
    out = sum(1 for c in costs if c.verdict == "screened out")
    winners = sum(1 for c in costs if c.gate_passed)
    return (system, f"mean of {len(costs)} (incumbent: {incumbent.calls:,} calls, {100 * incumbent.accuracy:.1f}%)",
            mean(full), mean(screened), f"{ratio:.2f}", mean([c.screen_questions for c in costs]),
            mean([c.rebuilt for c in costs]), f"{out} screened out", "", f"{winners} would pass")


def rows(results: Mapping[str, tuple[Incumbent, Sequence[CandidateCost]]]) -> list[tuple[str, ...]]:
    """The table's rows: each system's candidates, then its mean row."""
    out: list[tuple[str, ...]] = []
    for system, (incumbent, costs) in results.items():
        out += [_row(c) for c in costs]
        out.append(_mean_row(system, incumbent, costs))
    return out


def render(table_rows: Sequence[tuple[str, ...]], dataset: Dataset) -> Table:
    turns = sorted({len(c.turns) for c in dataset.conversations})
    return rich_table(f"Calls per construction candidate, full vs screened ({len(dataset.conversations)} "
                      f"conversations x {'-'.join(map(str, turns[::max(1, len(turns) - 1)]))} turns, {dataset.name}, "
                      f"min_gain {MIN_GAIN})", COLUMNS, table_rows, (COLUMNS[0], COLUMNS[1], COLUMNS[7]))


def main(argv: Sequence[str] | None = None) -> int:
    cli = parser(__doc__, workers=8)
    cli.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    cli.add_argument("--seed", type=int, default=0)
    cli.add_argument("--candidates", type=int, default=3, help="construction candidates per system (at most)")
    cli.add_argument("--markdown", action="store_true", help="also print the table as Markdown")
    args = cli.parse_args(argv)
    no_lm_history()  # DSPy's record of every call: nobody reads it (app_setup)
    console = Console(width=max(Console().width, 160))
    # the loop's own line per screen: its failures on the candidate's path and its guard
    screens_logger = logging.getLogger(CandidateScreens.__module__)
    handler = RichHandler(console=console, show_path=False)
    screens_logger.setLevel(logging.INFO)
    screens_logger.addHandler(handler)
    dataset = sim_dataset(args.seed, args.conversations, args.sessions, args.turns_per_session)
    dataset = dataset.without_categories(EXCLUDED)  # as the loop's dev split: unscored questions are not answered
    started = time.perf_counter()
    try:
        results = {name: bench_system(name, dataset, args.seed, args.candidates, args.workers, console.log)
                   for name in args.systems}
    finally:
        screens_logger.removeHandler(handler)
    console.log(f"done in {time.perf_counter() - started:.0f} s")
    table_rows = rows(results)
    console.print(render(table_rows, dataset))
    if args.markdown:
        print_plain(console, markdown_table(COLUMNS, table_rows, align="llrrrrrlrl") + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
