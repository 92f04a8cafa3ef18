"""Loop checkpoints: what an interrupted `memtrace optimize` resumes from, as one JSON file.

`LoopProgress` is what a checkpoint remembers (enough to continue exactly where the loop stopped: the
iteration, current and start prompt sets, accepted knob changes, patience count, iteration digests,
budget spent and LM calls per role). `write_checkpoint` writes it atomically (a crash never leaves half
a checkpoint) with the run's config digest and extra keys (e.g. the MLflow run id, which the folder
also records once, in `RunFolder.RUN_ID` beside the first checkpoint); `read_checkpoint` reads one back
and checks it against its schema (`pipeline.loop.checkpoint_schema`), `check_checkpoint` against its
run (config digest, iterations, the folder's MLflow run) and `check_checkpoint_stages` against the
memory system's stages and knobs: anything wrong is ONE `CheckpointError` line naming the file and the field,
raised before anything is touched. `progress_of` turns a checked one into a `LoopProgress`,
`mark_checkpoint_finished` records that its run finished.

It does not decide when to checkpoint (the loop does) or what config digest a run has (the app does).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memtrace_loop.memory_systems.base import MemorySystem
from memtrace_loop.pipeline.backends.call_count import CallTally
from memtrace_loop.pipeline.core.files import write_atomically
from memtrace_loop.pipeline.core.records import PromptSet
from memtrace_loop.pipeline.core.run_folder import RunFolder
from memtrace_loop.pipeline.loop.checkpoint_schema import (
    CHECKPOINT_FORMAT,
    CHECKPOINT_VERSION,
    RUN_ID_FIELD,
    CheckpointError,
    Problem,
    run_problem,
    schema_problem,
    stage_problem,
)
from memtrace_loop.pipeline.loop.summaries import IterationSummary

__all__ = [
    "CHECKPOINT_FORMAT",
    "CHECKPOINT_VERSION",
    "CheckpointError",
    "LoopProgress",
    "check_checkpoint",
    "check_checkpoint_stages",
    "folder_run_id",
    "mark_checkpoint_finished",
    "progress_of",
    "read_checkpoint",
    "write_checkpoint",
]


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

    @property
    def accepted(self) -> int:
        """Candidates accepted so far (over every iteration in `history`)."""
        return sum(1 for summary in self.history if summary.accepted is not None)


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
    run_id = data.get(RUN_ID_FIELD)
    recorded = path.with_name(RunFolder.RUN_ID)
    if run_id and not recorded.exists():  # once: the run this folder belongs to, whatever the checkpoint says later
        write_atomically(recorded, f"{run_id}\n")


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    write_atomically(path, json.dumps(data, indent=2, ensure_ascii=False))  # a crash never leaves half a checkpoint


def mark_checkpoint_finished(path: Path, finished: Mapping[str, Any]) -> None:
    """Record in the checkpoint at `path` that its run finished, with `finished` (what the entry point
    reports when asked to resume it: a later `resume=` is then a no-op)."""
    data = read_checkpoint(path)
    data["finished"] = dict(finished)
    _write_json(path, data)


def read_checkpoint(path: Path) -> dict[str, Any]:
    """The checkpoint at `path` as written, checked against its schema; a one-line `CheckpointError`
    naming the file and the field when it is unreadable, not JSON, truncated or breaks the schema."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path}: cannot read checkpoint: {exc}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path}: not a JSON checkpoint (truncated or corrupt: {exc.msg} at line {exc.lineno} "
                              f"column {exc.colno}); start a new run") from None
    _refuse(path, schema_problem(data))
    return dict(data)


def _refuse(path: Path, problem: Problem | None) -> None:
    if problem is not None:
        raise CheckpointError(f"{path}: field {problem.field}: {problem.reason}")


def folder_run_id(path: Path) -> str | None:
    """The MLflow run the folder of checkpoint `path` recorded beside its first checkpoint (None: none)."""
    recorded = path.with_name(RunFolder.RUN_ID)
    try:
        return recorded.read_text(encoding="utf-8").strip() or None
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CheckpointError(f"{recorded}: cannot read the folder's MLflow run id: {exc}") from exc


def check_checkpoint(path: Path, data: Mapping[str, Any], config_digest: str | None) -> None:
    """Refuse (one `CheckpointError` line) a schema-checked checkpoint that disagrees with its run: another
    config digest (None: not checked), `iteration` not the last of its history, another run's MLflow id."""
    _refuse(path, run_problem(data, config_digest, folder_run_id(path)))


def check_checkpoint_stages(path: Path, data: Mapping[str, Any], system: MemorySystem) -> None:
    """Refuse a checkpoint whose prompt sets name a stage `system` does not have, or whose accepted knob
    changes name a knob it does not have."""
    stages = [name for name, _ in system.named_predictors()]
    _refuse(path, stage_problem(data, stages, system.knob_values(), system.name))


def progress_of(data: Mapping[str, Any]) -> LoopProgress:
    """The `LoopProgress` a read checkpoint records (checkpoints before knob candidates: no knobs)."""
    history = tuple(IterationSummary.from_dict(item) for item in data.get("history", ()))
    return LoopProgress(
        int(data["iteration"]), PromptSet(data["current_prompts"]), int(data["stale"]),
        PromptSet(data["start_prompts"]), history, int(data.get("budget_spent", 0)),
        dict(data.get("current_knobs", {})), CallTally.from_dict(data.get("calls", {})),
    )
