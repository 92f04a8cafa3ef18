"""The attribution benchmark: `python -m memtrace_loop.experiments.lab.bench.attribution_bench`.

Per memory system, perfect sim runs with ONE injected fault (`experiments.lab.benchmark.injection`) are
scored with every attributor of `BUILDER_BY_ATTRIBUTOR` (`experiments.lab.benchmark.scoring`); one table,
optionally logged to MLflow (`--mlflow-uri`). With `--memtracebench PATH` (ExecNetwork JSON files) it
scores imported annotated graphs instead (`pipeline.interop.exec_network.labels.score_attributions`).
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import Any

import dspy
from memtrace_loop.experiments.app_setup import no_lm_history
from memtrace_loop.experiments.lab.bench.common import advance, build, names, rich_table, sim_dataset, sim_lm
from memtrace_loop.experiments.lab.bench.common import parser as common_parser
from memtrace_loop.experiments.lab.benchmark.injection import (
    InjectionReport,
    build_system_cases,
    perfect_prompts,
)
from memtrace_loop.experiments.lab.benchmark.scoring import AttributorScore, BenchCase, score_attributor
from memtrace_loop.memory_systems.base import MemorySystem
from memtrace_loop.memory_systems.registry import SYSTEMS, spec_of
from memtrace_loop.pipeline.analysis.attribution.lineage import LineageAttributor
from memtrace_loop.pipeline.analysis.attribution.llm import LLMAttributor
from memtrace_loop.pipeline.analysis.attribution.protocol import Attributor
from memtrace_loop.pipeline.analysis.attribution.settings import LLMSettings
from memtrace_loop.pipeline.analysis.attribution.verification import Verifier, VerifyingAttributor
from memtrace_loop.pipeline.analysis.judge import make_judge
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.backends.registry import backend_test_world
from memtrace_loop.pipeline.core.conventions import turn_id_of
from memtrace_loop.pipeline.core.records import CaseResult, Dataset, Question, Scores
from memtrace_loop.pipeline.interop.exec_network import ImportedNetwork, load_exec_network, op_id_for
from memtrace_loop.pipeline.interop.exec_network.labels import BenchAnnotation, score_attributions
from memtrace_loop.pipeline.tracking.mlflow_tracker import MlflowTracker
from memtrace_loop.pipeline.tracking.tracker import Tracker
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

EXPERIMENT = "attribution-benchmark"
COLUMNS = (
    "system", "attributor", "n", "error_type_acc", "stage_acc", "op_acc", "op_within_1_hop", "unattributed",
    "verified", "verified_precision", "lm_calls_per_case", "ms_per_case",
)


@dataclass(frozen=True)
class BenchSetting:
    """What an attributor builder may use: the system (perfect prompts, LM set), a judge and the LM."""

    system_name: str
    system: MemorySystem | None
    judge: dspy.Predict
    lm: dspy.LM


SEMANTIC_THRESHOLD = 0.35  # the hashing embedder is lexical: a synonym paraphrase scores ~0.4, unrelated ~0


def _replay(setting: BenchSetting) -> Attributor:
    if setting.system is None:
        raise NotImplementedError("replay needs the memory system that produced the graph")
    return VerifyingAttributor(LineageAttributor(), Verifier(setting.system, setting.judge))


BUILDER_BY_ATTRIBUTOR: Mapping[str, Callable[[BenchSetting], Attributor]] = MappingProxyType({
    "lineage": lambda _: LineageAttributor(),
    # lineage that also matches carriers by meaning (the hashing embedder's cosine)
    "lineage+meaning": lambda _: LineageAttributor(embedder=HashingEmbedder(), semantic_threshold=SEMANTIC_THRESHOLD),
    "llm": lambda setting: LLMAttributor(lm=setting.lm, settings=LLMSettings()),
    "lineage+replay": _replay,
})


def perfect_system(name: str, lm: dspy.LM) -> MemorySystem:
    """System `name` as the injected cases run it (generous knobs, perfect prompts), on `lm`."""
    system = build({"name": name, **spec_of(name).generous_knobs})
    system = system.with_prompts(perfect_prompts(system, backend_test_world().perfect_instruction))
    system.set_lm(lm)
    return system


def injected_cases(name: str, lm: dspy.LM, dataset: Dataset, progress: Progress, limit_per_kind: int,
                   workers: int = 4) -> tuple[tuple[BenchCase, ...], InjectionReport]:
    """`build_system_cases` of system `name` (common `build`, the test world's perfect prompts), shown in `progress`."""
    task = progress.add_task(f"{name}: injecting faults", total=None)
    cases = build_system_cases(name, lm, dataset, build, backend_test_world().perfect_instruction,
                               limit_per_kind=limit_per_kind, workers=workers, on_case=partial(advance, progress, task))
    progress.remove_task(task)
    return cases


def built(name: str, setting: BenchSetting, console: Console) -> Attributor | None:
    """The attributor `name` for `setting`, None (said on the console) when it cannot be built."""
    try:
        return BUILDER_BY_ATTRIBUTOR[name](setting)
    except (ImportError, NotImplementedError, TypeError) as error:
        console.print(f"[yellow]attributor {name!r} unavailable on {setting.system_name}: {error}[/]")
        return None


def score_all(cases: Sequence[BenchCase], setting: BenchSetting, attributors: Sequence[str], console: Console,
              progress: Progress) -> list[AttributorScore]:
    """Every requested attributor on the same cases; one that cannot be built or run is skipped."""
    scores = []
    for name in attributors:
        if (attributor := built(name, setting, console)) is not None:
            task = progress.add_task(f"{setting.system_name}: {name}", total=len(cases))
            try:
                scores.append(score_attributor(attributor, cases, setting.system_name,
                                               on_case=partial(advance, progress, task)))
            except NotImplementedError as error:  # e.g. a system replay cannot rebuild
                console.print(f"[yellow]attributor {name!r} not implemented yet: {error}[/]")
    return scores


def render(scores: Sequence[AttributorScore], title: str) -> Table:
    return rich_table(title, COLUMNS, ([s.as_row()[c] for c in COLUMNS] for s in scores), ("system", "attributor"))


def kind_table(scores: Sequence[AttributorScore]) -> Table:
    columns = ("system", "attributor", "kind", "n", "error_type_acc", "op_acc")
    return rich_table("per fault kind: n, error-type accuracy, exact-operation accuracy", columns, (
        (s.system, s.attributor, kind, n, f"{s.type_accuracy_by_kind[kind]:.3f}", f"{s.op_accuracy_by_kind[kind]:.3f}")
        for s in scores for kind, n in s.n_by_kind.items()), columns)


def log_scores(tracker: Tracker, scores: Sequence[AttributorScore], params: Mapping[str, str | int | float]) -> str:
    """One run in the benchmark's experiment: params, a metric per system/attributor/score, and the table
    (as a JSON table and as rendered text). Returns the run id."""
    tracker.open_experiment(EXPERIMENT)
    with tracker.start_run("attribution-bench") as run_id:
        tracker.log_params(params)
        for score in scores:
            prefix = f"{score.system}.{score.attributor}".replace("+", "_")
            tracker.log_metrics({f"{prefix}.{k}": v for k, v in score.metrics().items() if v == v})  # no NaN
        rows = [score.as_row() for score in scores]
        tracker.log_table({c: [str(r[c]) for r in rows] for c in COLUMNS}, "attribution_benchmark.json")
        text = Console(file=io.StringIO(), width=200)
        text.print(render(scores, "attribution benchmark"))
        tracker.log_text(text.file.getvalue(), "attribution_benchmark.txt")  # type: ignore[attr-defined]
    return run_id


def annotated_cases(network: ImportedNetwork) -> list[tuple[CaseResult, str]]:
    """One failed case per memory-error annotation of an imported graph, with the annotation's op id
    in our ids (the query, gold answers, prediction and evidence turns come from the annotation)."""
    out = []
    for label in (label for label in network.annotations if label.is_memory_error):
        query_var = network.node_id_map.get(label.query_id, label.query_id)
        evidence = []
        for their in label.source_evidence_ids:
            try:
                evidence.append(turn_id_of(network.node_id_map.get(their, their)))
            except ValueError:  # not a turn
                continue
        question = Question(query_var.split(":", 1)[-1].rsplit("@", 1)[0], network.graph.graph_id, label.query,
                            " / ".join(label.golden_answers), 0, tuple(evidence))
        out.append((CaseResult(question, label.prediction, "WRONG", Scores(0.0, 0.0, 0.0)), label.query_id))
    return out


def score_memtracebench(
    paths: Sequence[Path], attributors: Sequence[str], lm: dspy.LM, console: Console
) -> list[AttributorScore]:
    """Each attributor over every annotated graph, scored with `score_attributions` (paper metrics)."""
    networks = [load_exec_network(p) for p in paths]
    scores = []
    for name in attributors:
        if (attributor := built(name, BenchSetting("imported graphs", None, make_judge(lm), lm), console)) is None:
            continue
        predicted: dict[str, tuple[Any, str | None]] = {}
        annotations: list[BenchAnnotation] = []
        elapsed = 0.0
        n = unattributed = lm_calls = 0
        for index, network in enumerate(networks):
            # query ids are unique within a graph only: key them by file
            # every step of an operation of theirs (operation reuse) maps back to its one op id
            their_op_by_ours = {op.id: op_id_for(network.graph, op.id) for op in network.graph.operations()}
            annotations.extend(replace(a, query_id=f"{index}/{a.query_id}") for a in network.annotations)
            for case, query_id in annotated_cases(network):
                query_id = f"{index}/{query_id}"
                started = time.perf_counter()
                attribution = attributor.attribute(network.graph, case, None)
                elapsed += time.perf_counter() - started
                n += 1
                if attribution is None:
                    unattributed += 1
                    continue
                lm_calls += attribution.cost.lm_calls + attribution.cost.replay_calls
                predicted[query_id] = (attribution.error_type, their_op_by_ours.get(attribution.op, attribution.op))
        result = score_attributions(predicted, annotations)
        scores.append(AttributorScore(
            system="memtracebench", attributor=name, n=result.n, error_type_accuracy=result.type_accuracy,
            stage_accuracy=float("nan"), op_accuracy=result.op_accuracy, within_one_hop=float("nan"),
            unattributed=unattributed / n if n else 0.0, verified=0.0, verified_precision=None,
            lm_calls_per_case=lm_calls / n if n else 0.0, ms_per_case=1e3 * elapsed / n if n else 0.0,
        ))
    return scores


def bench_paths(path: Path) -> list[Path]:
    return sorted(path.glob("*.json")) if path.is_dir() else [path]


def main(argv: Sequence[str] | None = None) -> int:
    parser = common_parser(__doc__)
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated memory systems")
    parser.add_argument("--attributors", default=",".join(BUILDER_BY_ATTRIBUTOR), help="comma-separated")
    parser.add_argument("--seed", type=int, default=0, help="the simulated world's seed")
    parser.add_argument("--conversations", type=int, default=2, help="simulated conversations")
    parser.add_argument("--limit-per-kind", type=int, default=10, help="cases per fault kind and system")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--paraphrase", action="store_true", help="construction stages paraphrase (sim option)")
    parser.add_argument("--mlflow-uri", default=None, help="also log the table to this MLflow tracking URI")
    parser.add_argument("--memtracebench", type=Path, default=None,
                        help="score imported MemTraceBench-style graphs (a JSON file or a directory) instead")
    args = parser.parse_args(argv)
    no_lm_history()  # DSPy's record of every call: nobody reads it (app_setup)
    console = Console() if Console().is_terminal else Console(width=200)  # piped: the whole table
    attributors, systems = names(args.attributors), names(args.systems)
    if unknown := sorted(set(attributors) - set(BUILDER_BY_ATTRIBUTOR)):
        parser.error(f"unknown attributors {unknown} (available: {list(BUILDER_BY_ATTRIBUTOR)})")
    lm = sim_lm(reuse_calls=False, paraphrase=args.paraphrase)  # every attributor and replay call made

    if args.memtracebench is not None:
        paths = bench_paths(args.memtracebench)
        if not paths:
            parser.error(f"--memtracebench: no JSON files at {args.memtracebench}")
        imported = score_memtracebench(paths, attributors, lm, console)
        console.print(render(imported, f"MemTraceBench-style graphs ({len(paths)} files): error-type / op accuracy"))
        if args.mlflow_uri:
            log_scores(MlflowTracker(args.mlflow_uri), imported, {"mode": "memtracebench", "files": len(paths)})
        return 0

    if unknown := sorted(set(systems) - set(SYSTEMS)):
        parser.error(f"unknown systems {unknown} (available: {list(SYSTEMS)})")
    dataset = sim_dataset(args.seed, args.conversations)
    scores: list[AttributorScore] = []
    reports: list[InjectionReport] = []
    with Progress(console=console, transient=True) as progress:
        for name in systems:
            cases, report = injected_cases(name, lm, dataset, progress, args.limit_per_kind, args.workers)
            reports.append(report)
            setting = BenchSetting(name, perfect_system(name, lm), make_judge(lm), lm)
            scores.extend(score_all(cases, setting, attributors, console, progress))
    for report in reports:
        kept = ", ".join(f"{k} {report.kept_by_kind[k]}/{report.tried_by_kind[k]}" for k in report.kept_by_kind)
        console.print(f"{report.system}: perfect run {report.perfect_correct}/{report.questions} correct, "
                      f"{report.candidates} candidates; decisive/tried: {kept}")
    console.print(render(scores, f"attribution on injected faults (sim seed {args.seed})"))
    console.print(kind_table(scores))
    if args.mlflow_uri:
        run_id = log_scores(MlflowTracker(args.mlflow_uri), scores, {
            "mode": "injected", "seed": args.seed, "conversations": args.conversations,
            "limit_per_kind": args.limit_per_kind, "paraphrase": str(args.paraphrase),
        })
        console.print(f"logged to MLflow run {run_id}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
