"""The rescue benchmark: `python -m memtrace_loop.experiments.lab.bench.rescue_bench`.

Natural failures of degraded worlds, labelled by the rescue oracle (`experiments.lab.benchmark.rescue`),
scored for every attributor setting (`SETTINGS`) by `experiments.lab.benchmark.rescue_scoring`: a table
per world, one pooled per system, the injected-fault benchmark's stage accuracy beside it (unless
`--no-injected`) and the bars. Without `--seeds` the seeds (and `--sessions`) are drawn at run time and
printed, so no test can tune to them.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import dspy
from memtrace_loop.experiments.app_setup import no_lm_history
from memtrace_loop.experiments.lab.bench.attribution_bench import injected_cases, perfect_system
from memtrace_loop.experiments.lab.bench.common import (
    advance,
    build,
    markdown_table,
    names,
    print_plain,
    rich_table,
    sim_dataset,
    sim_lm,
)
from memtrace_loop.experiments.lab.bench.common import parser as common_parser
from memtrace_loop.experiments.lab.benchmark.rescue import RescueLabel, degraded_worlds, rescue_oracle
from memtrace_loop.experiments.lab.benchmark.rescue_scoring import RescueScore, bar_summary, summarize_rescue
from memtrace_loop.experiments.lab.benchmark.scoring import score_attributor
from memtrace_loop.memory_systems.base import MemorySystem
from memtrace_loop.memory_systems.registry import SYSTEMS
from memtrace_loop.pipeline.analysis.attribution.protocol import Attributor
from memtrace_loop.pipeline.analysis.attribution.records import Attribution
from memtrace_loop.pipeline.analysis.attribution.registry import build_attributor
from memtrace_loop.pipeline.analysis.judge import make_judge
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.backends.lm import LMSet
from memtrace_loop.pipeline.backends.registry import backend_test_world
from memtrace_loop.pipeline.core.records import Dataset
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

SETTINGS: Mapping[str, Mapping[str, Any]] = {
    "lineage": {"name": "lineage"},
    "lineage+verify": {"name": "lineage", "verify": True},
    "llm": {"name": "llm"},
    "llm+verify": {"name": "llm", "verify": True},
}
COLUMNS = (
    "system", "world", "setting", "n", "rescues_alone_%", "necessary_%", "joint_named_%", "joint_cases",
    "joint_sufficient_%", "verified", "verified_precision_%", "unverifiable_%", "calls_per_case", "replays_per_case",
    "top_blamed", "oracle_top", "oracle_top_split", "oracle_top_alone", "top_vs_split",
)


def default_systems() -> list[str]:
    """The comparison's systems (`spec.compare`) and `mem0ai` (the real library)."""
    compared = list(SYSTEMS.compared())
    return compared + [n for n in ("mem0ai",) if n in SYSTEMS and n not in compared]


def make_attributor(setting: str, lm: dspy.LM, system: MemorySystem) -> Attributor:
    """The setting's attributor; with verification it replays on `system` (the world's, LM set)."""
    return build_attributor(SETTINGS[setting], LMSet(lm, lm, lm, lm), system, make_judge(lm), HashingEmbedder())


@dataclass(frozen=True)
class WorldResult:
    """One world over every seed: labels and each setting's attributions, keyed `<seed>/<question id>`."""

    system: str
    world: str
    labels: Mapping[str, RescueLabel]
    attributions: Mapping[str, Mapping[str, Attribution | None]]
    runs: int


def bench_system(
    name: str, datasets: Mapping[int, Dataset], settings: Sequence[str], lm: dspy.LM, progress: Progress,
    workers: int = 4,
) -> list[WorldResult]:
    """Every world of system `name` on every seed's dataset: the oracle, then each setting."""
    test_world = backend_test_world()
    results = []
    for world in degraded_worlds(name, build, test_world):
        task = progress.add_task(f"{name} / {world.name}", total=None)
        labels: dict[str, RescueLabel] = {}
        attributions: dict[str, dict[str, Attribution | None]] = {s: {} for s in settings}
        runs = 0
        for seed, dataset in datasets.items():
            conversation_by_id = {c.id: c for c in dataset.conversations}
            oracle = rescue_oracle(world, build, lm, dataset, test_world, workers=workers,
                                   on_run=partial(advance, progress, task))
            runs += oracle.runs
            labels.update({f"{seed}/{q}": label for q, label in oracle.labels.items()})
            done = next(t.completed for t in progress.tasks if t.id == task)  # oracle runs, earlier seeds
            progress.update(task, total=done + len(settings) * len(oracle.failures))
            for setting in settings:
                attributor = make_attributor(setting, lm, oracle.system)
                for case in oracle.failures:  # the verdict on every labelled failure of the world
                    cid = case.question.conversation_id
                    attributions[setting][f"{seed}/{case.question.id}"] = attributor.attribute(
                        oracle.run.graph_by_conversation[cid], case, conversation_by_id.get(cid))
                    progress.advance(task)
        progress.remove_task(task)
        results.append(WorldResult(name, world.name, labels, attributions, runs))
    return results


def score_worlds(results: Sequence[WorldResult]) -> list[RescueScore]:
    return [
        summarize_rescue(r.system, r.world, setting, r.labels, found)
        for r in results for setting, found in r.attributions.items()
    ]


def render(scores: Sequence[RescueScore], title: str) -> Table:
    rows = ([s.as_row()[c] for c in COLUMNS] for s in scores)
    return rich_table(title, COLUMNS, rows, ("system", "world", "setting"))


def pooled(results: Sequence[WorldResult]) -> list[RescueScore]:
    """Per system and setting, every world's failures together (world "all"; the top stages are then
    the pooled blame table's and the pooled oracle's)."""
    scores = []
    for system in dict.fromkeys(r.system for r in results):
        mine = [r for r in results if r.system == system]
        labels = {f"{r.world}/{k}": v for r in mine for k, v in r.labels.items()}
        for setting in mine[0].attributions:
            found = {f"{r.world}/{k}": v for r in mine for k, v in r.attributions[setting].items()}
            scores.append(summarize_rescue(system, "all", setting, labels, found))
    return scores


def injected_gap(
    systems: Sequence[str], settings: Sequence[str], lm: dspy.LM, rescue: Sequence[RescueScore],
    limit_per_kind: int, progress: Progress,
) -> Table:
    """The injected-fault benchmark's stage accuracy (seed 0, 2 conversations) beside the pooled rescue
    share per system and setting, and their gap."""
    dataset = sim_dataset(0, 2)
    rows = []
    for name in systems:
        cases, _ = injected_cases(name, lm, dataset, progress, limit_per_kind)
        system = perfect_system(name, lm)
        for setting in settings:
            score = score_attributor(make_attributor(setting, lm, system), cases, name)
            share = next((r.rescues_alone for r in rescue if (r.system, r.setting) == (name, setting)), None)
            rows.append((name, setting, score.n, f"{100 * score.stage_accuracy:.1f}",
                         None if share is None else f"{100 * share:.1f}",
                         None if share is None else f"{100 * (score.stage_accuracy - share):+.1f}"))
    columns = ("system", "setting", "injected n", "injected stage %", "rescue %", "gap (points)")
    return rich_table("injected faults (stage accuracy) vs rescue oracle (blamed stage rescues alone)", columns, rows,
                      columns)


def main(argv: Sequence[str] | None = None) -> int:
    parser = common_parser(__doc__)
    parser.add_argument("--systems", default=",".join(default_systems()), help="comma-separated memory systems")
    parser.add_argument("--settings", default=",".join(SETTINGS), help=f"comma-separated, of {list(SETTINGS)}")
    parser.add_argument("--seeds", default=None, help="comma-separated sim seeds (default: drawn at run time)")
    parser.add_argument("--n-seeds", type=int, default=1, help="seeds to draw when --seeds is not given")
    parser.add_argument("--conversations", type=int, default=2, help="simulated conversations per seed")
    parser.add_argument("--sessions", type=int, default=None,
                        help="sessions per conversation (default: drawn in 4..7 with drawn seeds, else 6)")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--injected-limit", type=int, default=3, help="injected cases per fault kind (gap table)")
    parser.add_argument("--no-injected", action="store_true", help="skip the injected-fault gap table")
    parser.add_argument("--markdown", action="store_true", help="also print the table as Markdown")
    args = parser.parse_args(argv)
    no_lm_history()  # DSPy's record of every call: nobody reads it (app_setup)
    console = Console() if Console().is_terminal else Console(width=300)
    systems, settings = names(args.systems), names(args.settings)
    if unknown := sorted(set(systems) - set(SYSTEMS.names)) + sorted(set(settings) - set(SETTINGS)):
        parser.error(f"unknown systems or settings {unknown}")
    if silent := [s for s in systems if SYSTEMS.get(s).knob_worlds is None]:
        parser.error(f"memory systems {silent}: their specs state no knob worlds (MemorySystemSpec.knob_worlds)")
    drawn, rng = args.seeds is None, random.SystemRandom()  # the OS's randomness: a run no test can anticipate
    seeds = [rng.randrange(1, 1_000_000) for _ in range(args.n_seeds)] if drawn else [int(s) for s in names(args.seeds)]
    sessions = args.sessions or (rng.randint(4, 7) if drawn else 6)
    console.print(f"seeds {seeds} ({'drawn at run time' if drawn else 'fixed'}), {args.conversations} "
                  f"conversations x {sessions} sessions; re-run with --seeds {','.join(map(str, seeds))} "
                  f"--sessions {sessions}")
    datasets = {seed: sim_dataset(seed, args.conversations, sessions) for seed in seeds}
    lm = sim_lm(reuse_calls=False)
    results: list[WorldResult] = []
    with Progress(console=console, transient=True) as progress:
        for name in systems:
            results.extend(bench_system(name, datasets, settings, lm, progress, args.workers))
        scores = score_worlds(results)
        totals = pooled(results)
        gap = None if args.no_injected else injected_gap(
            systems, settings, lm, totals, args.injected_limit, progress)
    runs = sum(r.runs for r in results)
    console.print(render(scores, f"attribution vs the rescue oracle (seeds {seeds}, {runs} oracle runs)"))
    console.print(render(totals, "per system, every world's failures together"))
    if gap is not None:
        console.print(gap)
    console.print("the bars, per setting over every world (top=<reading>: worlds where the blame table's top is "
                  "the oracle's; split: as the table splits a failure, full: joint members in full, "
                  "alone: single rescues)")
    bars = bar_summary(scores)  # per setting, the pooled shares and top-stage agreement the bars read
    print_plain(console, markdown_table(tuple(bars[0]), [list(row.values()) for row in bars]) if bars else "")
    for table in (scores, totals) if args.markdown else ():
        print_plain(console, markdown_table(COLUMNS, [[s.as_row()[c] for c in COLUMNS] for s in table]) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
