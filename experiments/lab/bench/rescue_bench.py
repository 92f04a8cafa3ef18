"""The rescue benchmark: `python -m memtrace_loop.experiments.lab.bench.rescue_bench`.

Natural failures of degraded worlds, labelled by the rescue oracle (`experiments.lab.benchmark.rescue`),
scored for every attributor setting (`SETTINGS`) by `experiments.lab.benchmark.rescue_scoring`: a table
per world, one pooled per system, the injected-fault benchmark's stage accuracy beside it (unless
`--no-injected`) and the bars. Without `--seeds` the seeds (and `--sessions`) are drawn at run time and
printed, so no test can tune to them.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import dspy
from memtrace_loop.experiments.app_setup import no_lm_history
from memtrace_loop.experiments.lab.bench.attribution_bench import perfect_system
from memtrace_loop.experiments.lab.bench.common import advance, build, markdown_table, names, rich_table, sim_lm
from memtrace_loop.experiments.lab.benchmark.injection import build_system_cases
from memtrace_loop.experiments.lab.benchmark.rescue import RescueLabel, WorldOracle, degraded_worlds, rescue_oracle
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
from memtrace_loop.pipeline.data.registry import load_dataset
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


def attribute_world(
    attributor: Attributor, oracle: WorldOracle, dataset: Dataset, on_case: Callable[[], None] | None = None
) -> dict[str, Attribution | None]:
    """The attributor's verdict on every labelled failure of the world, by question id."""
    conversation_by_id = {c.id: c for c in dataset.conversations}
    found: dict[str, Attribution | None] = {}
    for case in oracle.failures:
        cid = case.question.conversation_id
        graph = oracle.run.graph_by_conversation[cid]
        found[case.question.id] = attributor.attribute(graph, case, conversation_by_id.get(cid))
        if on_case is not None:
            on_case()
    return found


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
            oracle = rescue_oracle(world, build, lm, dataset, test_world, workers=workers,
                                   on_run=partial(advance, progress, task))
            runs += oracle.runs
            labels.update({f"{seed}/{q}": label for q, label in oracle.labels.items()})
            done = next(t.completed for t in progress.tasks if t.id == task)  # oracle runs, earlier seeds
            progress.update(task, total=done + len(settings) * len(oracle.failures))
            for setting in settings:
                attributor = make_attributor(setting, lm, oracle.system)
                found = attribute_world(attributor, oracle, dataset, partial(advance, progress, task))
                attributions[setting].update({f"{seed}/{q}": a for q, a in found.items()})
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


def markdown(scores: Sequence[RescueScore]) -> str:
    """The table as Markdown (for docs/results.md)."""
    return markdown_table(COLUMNS, [[row[c] for c in COLUMNS] for row in (s.as_row() for s in scores)])


def bars_markdown(scores: Sequence[RescueScore]) -> str:
    """Per setting, the pooled shares and top-stage agreement the issue's bars read (`bar_summary`)."""
    rows = bar_summary(scores)
    return markdown_table(tuple(rows[0]), [list(row.values()) for row in rows]) if rows else ""


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
    dataset = load_dataset({"kind": "sim", "seed": 0, "n_conversations": 2})
    rows = []
    perfect = backend_test_world().perfect_instruction
    for name in systems:
        task = progress.add_task(f"{name}: injected faults", total=None)
        cases, _ = build_system_cases(name, lm, dataset, build, perfect, limit_per_kind=limit_per_kind,
                                      on_case=partial(advance, progress, task))
        progress.remove_task(task)
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


def draw_seeds(count: int) -> list[int]:
    """Fresh seeds from the OS's randomness (a bench run the tests cannot anticipate)."""
    rng = random.SystemRandom()
    return [rng.randrange(1, 1_000_000) for _ in range(count)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
    drawn = args.seeds is None
    seeds = draw_seeds(args.n_seeds) if drawn else [int(s) for s in names(args.seeds)]
    sessions = args.sessions or (random.SystemRandom().randint(4, 7) if drawn else 6)
    console.print(f"seeds {seeds} ({'drawn at run time' if drawn else 'fixed'}), {args.conversations} "
                  f"conversations x {sessions} sessions; re-run with --seeds {','.join(map(str, seeds))} "
                  f"--sessions {sessions}")
    datasets = {seed: load_dataset({"kind": "sim", "seed": seed, "n_conversations": args.conversations,
                                    "sessions_per_conversation": sessions}) for seed in seeds}
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
    console.print(bars_markdown(scores), markup=False, highlight=False, soft_wrap=True)
    if args.markdown:
        for table in (scores, totals):
            console.print(markdown(table) + "\n", markup=False, highlight=False, soft_wrap=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
