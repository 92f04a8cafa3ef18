"""Loop checkpoints: what an interrupted `memtrace optimize` resumes from, as one JSON file.

`LoopProgress` is what a checkpoint remembers (enough to continue exactly where the loop stopped: the
iteration, current and start prompt sets, accepted knob changes, patience count, iteration digests,
budget spent and LM calls per role). `write_checkpoint` writes it atomically (a crash never leaves half
a checkpoint) with the run's config digest and extra keys (e.g. the MLflow run id); `read_checkpoint`
reads one back (a `CheckpointError` for another format or version), `progress_of` turns it into a
`LoopProgress`, `mark_checkpoint_finished` records that its run finished.

It does not decide when to checkpoint or check that a config matches (the loop and the app do).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memtrace_loop.pipeline.backends.call_count import CallTally
from memtrace_loop.pipeline.core.files import write_atomically
from memtrace_loop.pipeline.core.records import PromptSet
from memtrace_loop.pipeline.loop.summaries import IterationSummary

__all__ = [
    "CHECKPOINT_FORMAT",
    "CHECKPOINT_VERSION",
    "CheckpointError",
    "LoopProgress",
    "mark_checkpoint_finished",
    "progress_of",
    "read_checkpoint",
    "write_checkpoint",
]

CHECKPOINT_FORMAT = "memtrace-loop-checkpoint"
CHECKPOINT_VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed (wrong format, another config)."""


@dataclass(frozen=True)
class LoopProgress:
    """What a checkpoint remembers: enough to continue exactly where the loop stopped."""

    iteration: int
    current: PromptSet
    stale: int
    start: PromptSet
    history: tuple[IterationSummary, ...] = ()
    budget_spent: int = 0
    knobs: Mapping[str, Any] = field(default_factory=dict)  # accepted knob changes
    calls: CallTally = field(default_factory=CallTally)  # LM calls per role by the end of `iteration`


def write_checkpoint(path: Path, progress: LoopProgress, config_digest: str, extra: Mapping[str, Any]) -> None:
    """`progress` (with the run's config digest and `extra` keys) as the checkpoint at `path`."""
    data = {
        "format": CHECKPOINT_FORMAT,
        "format_version": CHECKPOINT_VERSION,
        "config_digest": config_digest,
        "iteration": progress.iteration,
        "stale": progress.stale,
        "budget_spent": progress.budget_spent,
        "start_prompts": progress.start.to_dict(),
        "current_prompts": progress.current.to_dict(),
        "current_knobs": dict(progress.knobs),
        "calls": progress.calls.to_dict(),
        "history": [summary.to_dict() for summary in progress.history],
        **dict(extra),
    }
    _write_json(path, data)


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    write_atomically(path, json.dumps(data, indent=2, ensure_ascii=False))  # a crash never leaves half a checkpoint


def mark_checkpoint_finished(path: Path, finished: Mapping[str, Any]) -> None:
    """Record in the checkpoint at `path` that its run finished, with `finished` (what the entry point
    reports when asked to resume it: a later `resume=` is then a no-op)."""
    data = read_checkpoint(path)
    data["finished"] = dict(finished)
    _write_json(path, data)


def read_checkpoint(path: Path) -> dict[str, Any]:
    """The checkpoint at `path` as written; a `CheckpointError` when unreadable or of another format."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: cannot read checkpoint: {exc}") from exc
    if data.get("format") != CHECKPOINT_FORMAT or data.get("format_version") != CHECKPOINT_VERSION:
        raise CheckpointError(f"{path}: not a {CHECKPOINT_FORMAT} v{CHECKPOINT_VERSION} file")
    return data


def progress_of(data: Mapping[str, Any]) -> LoopProgress:
    """The `LoopProgress` a read checkpoint records (checkpoints before knob candidates: no knobs)."""
    history = tuple(IterationSummary.from_dict(item) for item in data.get("history", ()))
    return LoopProgress(
        int(data["iteration"]), PromptSet(data["current_prompts"]), int(data["stale"]),
        PromptSet(data["start_prompts"]), history, int(data.get("budget_spent", 0)),
        dict(data.get("current_knobs", {})), CallTally.from_dict(data.get("calls", {})),
    )
