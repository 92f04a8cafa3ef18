"""What a run logs through a `Tracker` (params, metrics, tables, the data it used) and saves to disk — with
secrets scrubbed — and reading a saved run back.

`log_params` logs flattened config params into the tracker's active run, `result_columns` is a run's
per-question table for `log_table`, the `*_metrics` functions name values as `metric_names` says;
`save_run` writes a run's artifacts (with `cases.json`, so it can be attributed later) into a directory,
`read_saved_run` / `download_saved_run` read them back as a `SavedRun` (a missing cases file or graph
folder is a `FileNotFoundError` naming it). Every text that leaves through here passes `scrub`
(`pipeline.core.redaction.redact`: the configured secret values masked, every URL scrubbed of its
credentials). It does not run or attribute anything and does not know which tracker it talks to.
"""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from memtrace_loop.pipeline.analysis.attribution.records import Attribution, Check
from memtrace_loop.pipeline.analysis.evaluation import EvaluationReport, MetricSummary, flat_metrics
from memtrace_loop.pipeline.backends.failure_guard import FailedCalls
from memtrace_loop.pipeline.core.case_io import cases_from_json, cases_to_json
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.graph_io import graph_to_json, load_graph
from memtrace_loop.pipeline.core.records import CaseResult, Dataset, PromptSet
from memtrace_loop.pipeline.core.redaction import redact as scrub  # the one implementation
from memtrace_loop.pipeline.core.run_folder import RunFolder
from memtrace_loop.pipeline.core.safe_names import confined
from memtrace_loop.pipeline.data.reader import hub_source
from memtrace_loop.pipeline.tracking import metric_names as names
from memtrace_loop.pipeline.tracking.run_record import process_tags as process_tags  # the apps import it here
from memtrace_loop.pipeline.tracking.tracker import DatasetInput, Tracker

if TYPE_CHECKING:  # the LM stack's records: `memtrace report` loads none of it
    from memtrace_loop.pipeline.backends.call_count import CallTally
    from memtrace_loop.pipeline.backends.services import RetryTally
    from memtrace_loop.pipeline.loop.failure_impact import FailureImpact
    from memtrace_loop.pipeline.loop.runner import RunResult

MAX_PARAM_CHARS = 6000


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested mapping -> `a.b.c` keys with string values (MLflow params)."""
    flat: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = json.dumps(value) if isinstance(value, list | tuple) else str(value)
    return flat


def git_commit(cwd: str | Path | None = None) -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() or "unknown"


def params_for_logging(params: Mapping[str, str], secrets: Iterable[str]) -> dict[str, str]:
    """The params as a tracker stores them: secrets scrubbed, each value cut to `MAX_PARAM_CHARS`."""
    secrets = tuple(secrets)
    return {k: scrub(v, secrets)[:MAX_PARAM_CHARS] for k, v in params.items()}


def log_params(tracker: Tracker, params: Mapping[str, str], secrets: Iterable[str]) -> None:
    tracker.log_params(params_for_logging(params, secrets))


def _write(directory: Path, relative: str, text: str, secrets: tuple[str, ...]) -> None:
    path = confined(directory, relative)  # never outside `directory`, whatever a name made from data holds
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(scrub(text, secrets), encoding="utf-8")


def result_rows(result: RunResult) -> list[dict[str, Any]]:
    return [
        {
            "question_id": r.question.id,
            "conversation_id": r.question.conversation_id,
            "category": r.question.category_name,
            "question": r.question.text,
            "gold": r.question.gold,
            "prediction": r.prediction,
            "verdict": r.verdict,
            "judge": r.scores.judge,
            "f1": round(r.scores.f1, 4),
            "bleu1": round(r.scores.bleu1, 4),
            "error": r.error or "",
        }
        for r in result.results
    ]


ATTRIBUTION_COLUMNS = (
    "question_id", "category", "error_type", "stage", "op", "op_name", "tunable", "confidence", "method",
    "check", "joint", "alternatives", "cost_lm_calls", "replay_calls", "reason",
)


def attribution_rows(attributions: Iterable[Attribution]) -> list[dict[str, Any]]:
    """One JSON-able row per attribution: the blamed operation, the replay check (`verified`: true / false
    / null), the decisive set (`joint`), other rescuing repairs (`alternatives`, `stage:op`) and the cost."""
    return [
        {
            "question_id": a.question_id,
            "conversation_id": a.case.question.conversation_id,
            "category": a.case.question.category_name,
            "error_type": a.error_type.value,
            "stage": a.stage,
            "op": a.op,
            "op_name": a.op_name,
            "tunable": a.tunable.value,
            "confidence": round(a.confidence, 4),
            "method": a.method,
            "check": a.check.value,
            "verified": a.verified,
            "joint": [f.op for f in a.joint],
            "alternatives": [f"{f.stage}:{f.op}" for f in a.alternatives],
            "joint_names": [f.op_name for f in a.joint],
            "joint_stages": [f.stage for f in a.joint],
            "evidence": list(a.evidence),
            "pseudo_evidence": a.pseudo_evidence,
            "cost_lm_calls": a.cost.lm_calls,
            "prompt_tokens": a.cost.prompt_tokens,
            "completion_tokens": a.cost.completion_tokens,
            "replay_calls": a.cost.replay_calls,
            "seconds": round(a.cost.seconds, 4),
            "reason": a.reason,
        }
        for a in attributions
    ]


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def attribution_columns(attributions: Iterable[Attribution], secrets: Iterable[str] = ()) -> dict[str, list[str]]:
    """The attribution table as string columns (`ATTRIBUTION_COLUMNS`) for a tracker's `log_table`."""
    secrets = tuple(secrets)
    rows = attribution_rows(attributions)
    return {column: [scrub(_cell(row[column]), secrets) for row in rows] for column in ATTRIBUTION_COLUMNS}


def attribution_metrics(attributions: Iterable[Attribution]) -> dict[str, float]:
    """`attribution/<...>`: shares confirmed, refuted, unverifiable and joint (0 without any), count, calls."""
    items = list(attributions)
    n = len(items)

    def share(count: int) -> float:
        return count / n if n else 0.0

    return {
        names.attribution("count"): float(n),
        names.attribution("verified_share"): share(sum(1 for a in items if a.verified is True)),
        names.attribution("refuted_share"): share(sum(1 for a in items if a.verified is False)),
        names.attribution("unverifiable_share"): share(sum(1 for a in items if a.check == Check.UNVERIFIABLE)),
        names.attribution("joint_share"): share(sum(1 for a in items if len(a.joint) > 1)),
        names.attribution("lm_calls"): float(sum(a.cost.lm_calls for a in items)),
        names.attribution("replay_calls"): float(sum(a.cost.replay_calls for a in items)),
    }


def quality_metrics(report: EvaluationReport, scope: str = names.EVAL) -> dict[str, float]:
    """`<scope>/<metric>` and `<scope>/cat/<category>/<metric>` of one evaluation (NaN values left out)."""

    def block(summary: MetricSummary, category: str | None) -> dict[str, float]:
        values = (summary.judge_accuracy, summary.ci_low, summary.ci_high, summary.f1, summary.bleu1,
                  float(summary.n), float(summary.n_failed))
        pairs = zip(names.QUALITY_METRICS, values, strict=True)
        return {names.quality(scope, metric, category): float(v) for metric, v in pairs}

    metrics = block(report.overall, None)
    metrics[names.quality(scope, names.FAILED_JUDGE_CALLS)] = float(report.failed_judge_calls)
    for category, summary in report.by_category.items():
        metrics.update(block(summary, category))
    return {key: value for key, value in metrics.items() if math.isfinite(value)}


def run_metrics(result: RunResult, scope: str = names.EVAL) -> dict[str, float]:
    """`quality_metrics` of one evaluated run and what its traced graph counted (`<scope>/traced/<count>`)."""
    counts = result.counts
    values = (counts.calls, counts.cached_calls, counts.prompt_tokens, counts.completion_tokens,
              counts.failed_operations)
    return {
        **quality_metrics(result.report, scope),
        **{names.traced(scope, count): float(v) for count, v in zip(names.TRACED_COUNTS, values, strict=True)},
    }


def call_metrics(tally: CallTally, *, failed: bool = False) -> dict[str, float]:
    """`lm_calls/<role>/made|cached|reused` (and `/failed`) per role: made reached the backend, cached came
    from DSPy's cache, reused from the run's store of replies (`pipeline.backends.call_count`)."""
    metrics: dict[str, float] = {}
    for role, calls in tally.by_role.items():
        metrics[names.role_calls(role, names.MADE)] = float(calls.made)
        metrics[names.role_calls(role, names.CACHED)] = float(calls.cached)
        metrics[names.role_calls(role, names.REUSED)] = float(calls.reused)
        if failed:
            metrics[names.role_calls(role, names.FAILED)] = float(calls.failed)
    return metrics


def token_metrics(tally: CallTally) -> dict[str, float]:
    """`lm_tokens/prompt|completion`: the tokens of made calls (as the backend reported them)."""
    total = tally.total()
    return {names.TOKENS_PROMPT: float(total.prompt_tokens), names.TOKENS_COMPLETION: float(total.completion_tokens)}


def retry_metrics(tally: RetryTally) -> dict[str, float]:
    """`lm_retries/<role>[/<cause>]` for every role with a retry, and `lm_retries/total` (always)."""
    metrics = {names.RETRIES_TOTAL: float(tally.total)}
    for role, causes in sorted(tally.count_by_cause_by_role.items()):
        metrics[names.role_retries(role)] = float(sum(causes.values()))
        for cause, count in sorted(causes.items()):
            metrics[names.role_retries(role, cause)] = float(count)
    return metrics


FAILED_CALLS_TAG = "memtrace.failed_calls"  # how many LM calls finally failed ("0" for a clean run)
OUTCOME_TAG = "memtrace.outcome"  # "clean", or "finished_with_failed_calls" (docs/usage.md, exit codes)


def failed_call_metrics(failed: FailedCalls) -> dict[str, float]:
    """`lm_calls/failed` (every role, after retries) and `lm_calls/failed_share` (of the calls made)."""
    calls = max(failed.counts.calls, failed.failed)
    return {names.CALLS_FAILED: float(failed.failed),
            names.CALLS_FAILED_SHARE: failed.failed / calls if calls else 0.0}


def failed_call_tags(failed: FailedCalls) -> dict[str, str]:
    """`memtrace.failed_calls` (the count) and `memtrace.outcome` (clean or finished_with_failed_calls)."""
    return {FAILED_CALLS_TAG: str(failed.failed), OUTCOME_TAG: "finished_with_failed_calls" if failed else "clean"}


def impact_metrics(impact: FailureImpact, scope: str = names.EVAL) -> dict[str, float]:
    """`<scope>/failures/<count>`: the questions failed operations touched and what that bounds."""
    return {names.failures(scope, key): value for key, value in impact.to_dict().items()}


def dataset_digest(dataset: Dataset) -> str:
    """A hash of the dataset's content (every conversation, turn and question, in order)."""
    content = json.dumps(
        [asdict(c) for c in dataset.conversations] + [asdict(q) for q in dataset.questions],
        sort_keys=True, ensure_ascii=False, default=str,
    )
    return hashlib.sha256(content.encode("utf-8")).hexdigest()[:16]


def dataset_source(dataset_config: Mapping[str, Any], base_dir: Path | None = None) -> str:
    """Where the data came from: the hub dataset of a `dataset.hub` (`hf:<id>/<file> (split <split>)`),
    the file of a `dataset.path` (resolved against `base_dir`), else the generator and its settings
    (`sim n_conversations=8 seed=0`)."""
    hub = dataset_config.get("hub")
    if hub:
        variant = dataset_config.get("variant")
        files = dataset_config.get("hub_file") or (f"{variant}.json" if variant else None)
        return f"{hub_source(str(hub), files)} (split {dataset_config.get('hub_split', 'train')})"
    path = dataset_config.get("path")
    if path:
        resolved = Path(str(path)).expanduser()
        return str(resolved if resolved.is_absolute() or base_dir is None else (base_dir / resolved).resolve())
    kept = sorted((k, v) for k, v in dataset_config.items() if k not in ("kind", "path") and not isinstance(v, Mapping))
    settings = " ".join(f"{k}={v}" for k, v in kept)
    return f"{dataset_config.get('kind', 'dataset')} {settings}".strip()


def dataset_input(dataset: Dataset, context: str, split: str, source: str) -> DatasetInput:
    """What the tracker records of the data a run used (`Tracker.log_dataset`)."""
    return DatasetInput(
        name=f"{dataset.name}-{split}", digest=dataset_digest(dataset), source=source, context=context,
        split=split, n_conversations=len(dataset.conversations), n_questions=len(dataset.questions),
    )


CASES_FILE = RunFolder.CASES  # every judged case, readable back (`pipeline.core.case_io`)
CONFIG_FILE = RunFolder.CONFIG  # the composed config the run was made with
GRAPHS_DIR = RunFolder.GRAPHS
PROMPTS_FILE = RunFolder.PROMPTS
ARTIFACTS_DIR = RunFolder.ARTIFACTS  # the folder of a run's output directory that `save_run` writes


def save_run(
    directory: Path, result: RunResult, prompts: PromptSet, secrets: Iterable[str],
    config: Mapping[str, Any] | None = None,
) -> Path:
    """Write the run's artifacts into `directory`: results.json, cases.json, prompts.json, report.json,
    graphs/<conversation>.json (a safe file name, `RunFolder.graph_file`) and, when given, config.json."""
    secrets = tuple(secrets)
    directory.mkdir(parents=True, exist_ok=True)
    _write(directory, RunFolder.RESULTS, json.dumps(result_rows(result), ensure_ascii=False, indent=1), secrets)
    _write(directory, CASES_FILE, cases_to_json(result.results), secrets)
    _write(directory, PROMPTS_FILE, json.dumps(prompts.to_dict(), indent=2, ensure_ascii=False), secrets)
    _write(directory, RunFolder.REPORT_METRICS, json.dumps(flat_metrics(result.report), indent=2), secrets)
    if config is not None:
        _write(directory, CONFIG_FILE, json.dumps(config, indent=2, ensure_ascii=False), secrets)
    for conversation_id, graph in result.graph_by_conversation.items():
        _write(directory, f"{GRAPHS_DIR}/{RunFolder.graph_file(conversation_id)}", graph_to_json(graph), secrets)
    return directory


RESULTS_TABLE = RunFolder.RESULTS_TABLE


def result_columns(result: RunResult, secrets: Iterable[str] = ()) -> dict[str, list[str]]:
    """The per-question table (`result_rows`) as string columns for a tracker's `log_table` ({} when empty)."""
    secrets = tuple(secrets)
    rows = result_rows(result)
    return {key: [scrub(str(row[key]), secrets) for row in rows] for key in (rows[0] if rows else {})}


@dataclass(frozen=True)
class SavedRun:
    """A finished run as saved: cases in result order, one graph per conversation, and (when saved)
    the prompt set it ran with and its composed config."""

    results: tuple[CaseResult, ...]
    graph_by_conversation: Mapping[str, ExecutionGraph]
    prompts: PromptSet | None = None
    config: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    source: str = ""


def read_saved_run(directory: str | Path) -> SavedRun:
    """The run saved in `directory` (or in its `artifacts/` folder: a `memtrace run` output directory)."""
    folder = Path(directory)
    if not (folder / CASES_FILE).is_file() and (folder / ARTIFACTS_DIR / CASES_FILE).is_file():
        folder = folder / ARTIFACTS_DIR
    cases_path = folder / CASES_FILE
    graphs_dir = folder / GRAPHS_DIR
    if not cases_path.is_file():
        raise FileNotFoundError(f"{folder}: no {CASES_FILE} (saved by `memtrace run`)")
    if not graphs_dir.is_dir():
        raise FileNotFoundError(f"{folder}: no {GRAPHS_DIR}/ folder of graph JSON files")
    results = cases_from_json(cases_path.read_text(encoding="utf-8"), str(cases_path))
    graphs = [load_graph(path) for path in sorted(graphs_dir.glob("*.json"))]
    graph_by_conversation = {graph.graph_id: graph for graph in graphs}  # file names are safe stems, not ids
    prompts_path = folder / PROMPTS_FILE
    prompts = PromptSet(json.loads(prompts_path.read_text(encoding="utf-8"))) if prompts_path.is_file() else None
    config_path = folder / CONFIG_FILE
    config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
    return SavedRun(results, MappingProxyType(graph_by_conversation), prompts, MappingProxyType(config), str(folder))


def download_saved_run(tracker: Tracker, run_id: str, directory: str | Path) -> SavedRun:
    """The run `run_id` of `tracker`, its artifacts copied into `directory` first (`RunNotFoundError`
    for an unknown id, `FileNotFoundError` when it has no cases or graphs)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    available = set(tracker.get_run(run_id).artifacts)
    for name in (CASES_FILE, GRAPHS_DIR, PROMPTS_FILE, CONFIG_FILE):
        if name in available:
            tracker.download_artifact(run_id, name, directory)
        elif name in (CASES_FILE, GRAPHS_DIR):
            raise FileNotFoundError(f"run {run_id} has no {name} artifact (logged before cases were saved?)")
    saved = read_saved_run(directory)
    return SavedRun(saved.results, saved.graph_by_conversation, saved.prompts, saved.config, f"run {run_id}")
