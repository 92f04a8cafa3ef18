"""Loop checkpoints: what an interrupted `memtrace optimize` resumes from, one JSON file read and checked
once into a typed record.

`write_checkpoint` writes a `LoopProgress` atomically, and the folder's MLflow run once beside the first
(`RunFolder.RUN_ID`). `read_checkpoint` returns the `Checkpoint` or ONE `CheckpointError` line naming the
file and the field: unreadable, not JSON, off the schema (format v1: known fields only, strict types, the
blame rows readable), another config digest, `iteration` not the last of the history's 0..n, `stale`
beyond it, another MLflow run than the folder's. `Checkpoint.check_fits(system)`: its stages and knob
changes are the system's own. `mark_finished`: a later `resume=` is a no-op that says so. It does not
decide when to checkpoint (the loop does) or what config digest a run has (the app does).
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
from memtrace_loop.memory_systems.base import MemorySystem
from memtrace_loop.pipeline.backends.call_count import CallTally
from memtrace_loop.pipeline.core.config import dotted_key
from memtrace_loop.pipeline.core.files import write_atomically
from memtrace_loop.pipeline.core.records import PromptSet
from memtrace_loop.pipeline.core.run_folder import CheckpointError as CheckpointError  # its home is light
from memtrace_loop.pipeline.core.run_folder import RunFolder
from memtrace_loop.pipeline.loop.summaries import IterationSummary
from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "EXTRA_FIELDS", "FIELDS", "Checkpoint", "CheckpointError", "FinishedRun", "LoopProgress", "folder_run_id",
    "mark_finished", "read_checkpoint", "write_checkpoint",
]

CHECKPOINT_FORMAT = "memtrace-loop-checkpoint"
CHECKPOINT_VERSION = 1
RUN_ID_FIELD = "mlflow_run_id"


@dataclass(frozen=True)
class LoopProgress:
    """Enough to continue exactly where the loop stopped."""

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
        return sum(1 for summary in self.history if summary.accepted is not None)


@dataclass(frozen=True)
class FinishedRun:
    """What a finished run reports when asked to resume it."""

    test_start: float
    test_final: float
    exported: tuple[str, ...]


@dataclass(frozen=True)
class Checkpoint:

    path: Path
    progress: LoopProgress
    config_digest: str
    run_id: str | None = None  # the MLflow run it belongs to (None: a library loop without MLflow)
    finished: FinishedRun | None = None

    def check_fits(self, system: MemorySystem) -> None:
        """Refuse prompt sets naming a stage `system` does not have, or knob changes naming a knob it lacks."""
        stages = [name for name, _ in system.named_predictors()]
        for name, prompts in (("start_prompts", self.progress.start), ("current_prompts", self.progress.current)):
            _refuse(self.path, name, _unknown(prompts.stages(), stages, "stage", system.name))
        _refuse(self.path, "current_knobs", _unknown(self.progress.knobs, system.knob_values(), "knob", system.name))


def _unknown(names: Collection[str], known: Collection[str], what: str, system: str) -> str | None:
    unknown = sorted(set(names) - set(known))
    if not unknown:
        return None
    return f"names {what}(s) {unknown} that memory system {system!r} does not have (its {what}s: {sorted(known)})"


def _refuse(path: Path, where: str, reason: str | None) -> None:
    if reason is not None:
        raise CheckpointError(f"{path}: field {where}: {reason}")


# ------------------------------------------------------------------ writing


def write_checkpoint(path: Path, progress: LoopProgress, config_digest: str, run_id: str | None = None) -> None:
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
        **({RUN_ID_FIELD: run_id} if run_id else {}),
    }
    _write_json(path, data)
    recorded = path.with_name(RunFolder.RUN_ID)
    if run_id and not recorded.exists():  # once: the run this folder belongs to, whatever the checkpoint says later
        write_atomically(recorded, f"{run_id}\n")


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    write_atomically(path, json.dumps(data, indent=2, ensure_ascii=False))  # a crash never leaves half a checkpoint


def mark_finished(path: Path, finished: FinishedRun) -> None:
    data = _load_json(path)
    data["finished"] = {"test_start": finished.test_start, "test_final": finished.test_final,
                        "exported": list(finished.exported)}
    _write_json(path, data)


# ------------------------------------------------------------------ reading


def _load_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path}: cannot read checkpoint: {exc}") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path}: not a JSON checkpoint (truncated or corrupt: {exc.msg} at line {exc.lineno} "
                              f"column {exc.colno}); start a new run") from None


def read_checkpoint(path: Path, config_digest: str | None) -> Checkpoint:
    """The checkpoint at `path`, checked (`config_digest`: the folder's first config's; None: not checked)."""
    data = _load_json(path)
    _refuse(path, *_schema_problem(data))
    _refuse(path, *_run_problem(data, config_digest, folder_run_id(path)))
    progress = LoopProgress(
        data["iteration"], PromptSet(data["current_prompts"]), data["stale"], PromptSet(data["start_prompts"]),
        tuple(IterationSummary.from_dict(item) for item in data["history"]), data.get("budget_spent", 0),
        dict(data.get("current_knobs", {})), CallTally.from_dict(data.get("calls", {})),
    )
    done = data.get("finished")
    finished = None if done is None else FinishedRun(done["test_start"], done["test_final"], tuple(done["exported"]))
    return Checkpoint(path, progress, data["config_digest"], data.get(RUN_ID_FIELD), finished)


def folder_run_id(path: Path) -> str | None:
    """The MLflow run the folder of checkpoint `path` recorded beside its first checkpoint (None: none)."""
    recorded = path.with_name(RunFolder.RUN_ID)
    try:
        return recorded.read_text(encoding="utf-8").strip() or None
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CheckpointError(f"{recorded}: cannot read the folder's MLflow run id: {exc}") from exc


# ------------------------------------------------------------------ the schema (format v1)


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


Pair = Annotated[list[float], Field(min_length=2, max_length=2)]
Count = Annotated[int, Field(ge=0)]


class _Candidate(_Record):
    stages: list[str]
    dev_accuracy: float
    gain: float
    gain_ci: Pair
    accepted: bool
    rationale: str
    knobs: dict[str, Any] = {}
    screened_out: bool = False
    screen_calls: Count = 0
    full_calls: Count = 0
    audit_gain: float | None = None


class _Iteration(_Record):
    iteration: Count
    train_accuracy: float
    dev_accuracy: float
    dev_ci: Pair
    blame: list[dict[str, Any]]
    candidates: list[_Candidate]
    budget_spent: Count = 0


class _Finished(_Record):
    test_start: float
    test_final: float
    exported: list[str]


class _Checkpoint(_Record):
    format: Literal["memtrace-loop-checkpoint"]
    format_version: Literal[1]
    config_digest: str
    iteration: Count
    stale: Count
    budget_spent: Count = 0
    start_prompts: dict[str, str]
    current_prompts: dict[str, str]
    current_knobs: dict[str, Any] = {}
    calls: dict[str, dict[str, Count]] = {}
    history: list[_Iteration]
    mlflow_run_id: str | None = None  # the MLflow run (`write_checkpoint`); `finished` once the run has ended
    finished: _Finished | None = None


EXTRA_FIELDS = (RUN_ID_FIELD, "finished")
FIELDS = tuple(name for name in _Checkpoint.model_fields if name not in EXTRA_FIELDS)
Problem = tuple[str, str | None]  # (the field, as a dotted path; what is wrong with it, None: nothing)


def _schema_problem(data: Any) -> Problem:
    """The first place where `data` breaks the checkpoint schema."""
    if not isinstance(data, Mapping):
        return "(top level)", f"must be a JSON object, got {type(data).__name__}"
    try:
        _Checkpoint.model_validate(dict(data))
    except pydantic.ValidationError as error:
        first = min(error.errors(), key=lambda e: len(e["loc"]))  # the outermost field first
        where = dotted_key("", first["loc"]) or "(top level)"
        if first["type"] == "extra_forbidden":
            return where, f"unknown field (a checkpoint holds {', '.join(FIELDS + EXTRA_FIELDS)})"
        if first["type"] == "missing":
            return where, "missing"
        message = re.sub(r" or instance of _?\w+", "", first["msg"])  # our record classes are not the user's
        return where, f"{message[0].lower()}{message[1:]}, got {repr(first.get('input'))[:40]}"
    try:
        CallTally.from_dict(data.get("calls", {}))
    except TypeError as error:
        return "calls", f"unreadable LM call counts ({error})"
    for index, item in enumerate(data["history"]):
        try:
            IterationSummary.from_dict(item)
        except (KeyError, TypeError, ValueError) as error:
            return f"history[{index}].blame", f"unreadable blame row ({type(error).__name__}: {error})"
    return "", None


def _run_problem(data: Mapping[str, Any], config_digest: str | None, run_id: str | None) -> Problem:
    """Where a schema-valid checkpoint disagrees with its run (`run_id`: the folder's; None: not checked)."""
    if config_digest is not None and data["config_digest"] != config_digest:
        return "config_digest", ("was written by a run with another configuration than the one the folder was "
                                 "started with; start a new run instead")
    history, iteration = data["history"], data["iteration"]
    if not history:
        return "history", f"is empty, but iteration is {iteration} (it holds iterations 0..{iteration})"
    for index, item in enumerate(history):
        if item["iteration"] != index:
            return f"history[{index}].iteration", f"is {item['iteration']}, expected {index}"
    if iteration != len(history) - 1:
        return "iteration", f"is {iteration}, but the history holds iterations 0..{len(history) - 1}"
    if data["stale"] > iteration:
        return "stale", f"is {data['stale']}, more than the {iteration} iteration(s) run"
    recorded = data.get(RUN_ID_FIELD)
    if run_id is not None and recorded != run_id:
        return RUN_ID_FIELD, f"names MLflow run {recorded!r}, but this folder belongs to run {run_id!r}"
    return "", None
