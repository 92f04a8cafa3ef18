"""Logging runs through a `Tracker`: params, metrics, the results table, graphs, prompts — with
secrets scrubbed.

`log_params` logs flattened config params, `log_run_result` one evaluated run, both into the
tracker's active run. Every text that leaves through here passes `scrub`, which replaces the values
of the configured secret environment variables. This module does not run anything, does not decide
what a run is and does not know which tracker it talks to (`pipeline.tracking.mlflow_tracker`).
"""

from __future__ import annotations

import json
import logging
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from memtrace_loop.pipeline.analysis.evaluation import flat_metrics
from memtrace_loop.pipeline.core.graph_io import graph_to_json
from memtrace_loop.pipeline.core.records import PromptSet
from memtrace_loop.pipeline.loop.runner import RunResult
from memtrace_loop.pipeline.tracking.tracker import Tracker

logger = logging.getLogger(__name__)

MAX_PARAM_CHARS = 6000
REDACTED = "***"


def scrub(text: str, secrets: Iterable[str]) -> str:
    """`text` with every secret value replaced by `***` (secrets shorter than 4 chars are ignored)."""
    for secret in secrets:
        if secret and len(secret) >= 4 and secret in text:
            text = text.replace(secret, REDACTED)
    return text


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


def log_params(tracker: Tracker, params: Mapping[str, str], secrets: Iterable[str]) -> None:
    secrets = tuple(secrets)
    tracker.log_params({k: scrub(v, secrets)[:MAX_PARAM_CHARS] for k, v in params.items()})


def _write(directory: Path, relative: str, text: str, secrets: tuple[str, ...]) -> None:
    path = directory / relative
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


def run_metrics(result: RunResult, prefix: str = "") -> dict[str, float]:
    metrics = {f"{prefix}{k}": float(v) for k, v in flat_metrics(result.report).items()}
    counts = result.counts
    metrics.update(
        {
            f"{prefix}lm_calls": counts.calls,
            f"{prefix}lm_cached_calls": counts.cached_calls,
            f"{prefix}prompt_tokens": counts.prompt_tokens,
            f"{prefix}completion_tokens": counts.completion_tokens,
            f"{prefix}failed_operations": counts.failed_operations,
        }
    )
    return metrics


def log_run_result(tracker: Tracker, result: RunResult, prompts: PromptSet, secrets: Iterable[str]) -> None:
    """Log metrics, the per-question table, graphs, prompt set and report into the active run."""
    secrets = tuple(secrets)
    tracker.log_metrics(run_metrics(result))
    rows = result_rows(result)
    with tempfile.TemporaryDirectory(prefix="memtrace-artifacts-") as tmp:
        directory = Path(tmp)
        _write(directory, "results.json", json.dumps(rows, ensure_ascii=False, indent=1), secrets)
        _write(directory, "prompts.json", json.dumps(prompts.to_dict(), indent=2, ensure_ascii=False), secrets)
        _write(directory, "report.json", json.dumps(flat_metrics(result.report), indent=2), secrets)
        for conversation_id, graph in result.graph_by_conversation.items():
            _write(directory, f"graphs/{conversation_id}.json", graph_to_json(graph), secrets)
        tracker.log_artifacts(directory)
    columns = {key: [scrub(str(row[key]), secrets) for row in rows] for key in (rows[0] if rows else {})}
    if columns:
        tracker.log_table(columns, "results_table.json")
