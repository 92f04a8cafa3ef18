"""What a loop checkpoint must be before `resume=` trusts it: its schema and its agreement with its run.

`schema_problem(data)` checks the JSON a checkpoint holds against the schema `write_checkpoint` writes
(format v1): known fields only (`FIELDS`, the extra keys `EXTRA_FIELDS` included), every type strict (no
"3" for 3, no 1.0 for an int), the iteration digests and their blame rows readable. `run_problem(data,
config_digest, run_id)` checks it against its own run: the config digest of the config the folder was
started with, `iteration` equal to the last of the history's iterations 0..n (so neither an empty
history nor `iteration: 99` passes), `stale` within it, and the MLflow run id the folder recorded
(`RunFolder.RUN_ID`, written beside the first checkpoint). `stage_problem(data, stages, knobs, system)`
checks that every stage of its prompt sets, and every knob it changed, is one the memory system has.

Each returns None or a `Problem` naming the field (`history[2].dev_ci`) and what is wrong; the caller
(`pipeline.loop.checkpoint`) turns it into one `CheckpointError` line with the file. It reads no file
and touches nothing.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import pydantic
from memtrace_loop.pipeline.backends.call_count import CallTally
from memtrace_loop.pipeline.core.config import dotted_key
from memtrace_loop.pipeline.loop.summaries import IterationSummary
from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "CHECKPOINT_FORMAT",
    "CHECKPOINT_VERSION",
    "EXTRA_FIELDS",
    "FIELDS",
    "RUN_ID_FIELD",
    "CheckpointError",
    "Problem",
    "run_problem",
    "schema_problem",
    "stage_problem",
]

CHECKPOINT_FORMAT = "memtrace-loop-checkpoint"
CHECKPOINT_VERSION = 1
RUN_ID_FIELD = "mlflow_run_id"


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed (unreadable, another format, corrupt, another config or run)."""


@dataclass(frozen=True)
class Problem:
    """What is wrong with a checkpoint: the field (a dotted path) and why."""

    field: str
    reason: str


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
    # extra keys (`write_checkpoint(extra=...)`): the MLflow run; `finished` once the run has ended
    mlflow_run_id: str | None = None
    finished: _Finished | None = None


EXTRA_FIELDS = (RUN_ID_FIELD, "finished")
FIELDS = tuple(name for name in _Checkpoint.model_fields if name not in EXTRA_FIELDS)


def schema_problem(data: Any) -> Problem | None:
    """The first place where `data` breaks the checkpoint schema (None: it fits)."""
    if not isinstance(data, Mapping):
        return Problem("(top level)", f"must be a JSON object, got {type(data).__name__}")
    try:
        _Checkpoint.model_validate(dict(data))
    except pydantic.ValidationError as error:
        first = min(error.errors(), key=lambda e: len(e["loc"]))  # the outermost field first
        where = dotted_key("", first["loc"]) or "(top level)"
        if first["type"] == "extra_forbidden":
            return Problem(where, f"unknown field (a checkpoint holds {', '.join(FIELDS + EXTRA_FIELDS)})")
        if first["type"] == "missing":
            return Problem(where, "missing")
        message = re.sub(r" or instance of _?\w+", "", first["msg"])  # our record classes are not the user's
        return Problem(where, f"{message[0].lower()}{message[1:]}, got {repr(first.get('input'))[:40]}")
    try:
        CallTally.from_dict(data.get("calls", {}))
    except TypeError as error:
        return Problem("calls", f"unreadable LM call counts ({error})")
    for index, item in enumerate(data["history"]):
        try:
            IterationSummary.from_dict(item)
        except (KeyError, TypeError, ValueError) as error:
            return Problem(f"history[{index}].blame", f"unreadable blame row ({type(error).__name__}: {error})")
    return None


def run_problem(data: Mapping[str, Any], config_digest: str | None, run_id: str | None) -> Problem | None:
    """Where a schema-valid checkpoint disagrees with its run: `config_digest` (None: not checked), its
    iterations, `run_id` (the MLflow run its folder recorded; None: not recorded, not checked)."""
    if config_digest is not None and data["config_digest"] != config_digest:
        return Problem("config_digest", "was written by a run with another configuration than the one the "
                                        "folder was started with; start a new run instead")
    history, iteration = data["history"], data["iteration"]
    if not history:
        return Problem("history", f"is empty, but iteration is {iteration} (it holds iterations 0..{iteration})")
    for index, item in enumerate(history):
        if item["iteration"] != index:
            return Problem(f"history[{index}].iteration", f"is {item['iteration']}, expected {index}")
    if iteration != len(history) - 1:
        return Problem("iteration", f"is {iteration}, but the history holds iterations 0..{len(history) - 1}")
    if data["stale"] > iteration:
        return Problem("stale", f"is {data['stale']}, more than the {iteration} iteration(s) run")
    recorded = data.get(RUN_ID_FIELD)
    if run_id is not None and recorded != run_id:
        return Problem(RUN_ID_FIELD, f"names MLflow run {recorded!r}, but this folder belongs to run {run_id!r}")
    return None


def stage_problem(
    data: Mapping[str, Any], stages: Collection[str], knobs: Collection[str], system: str
) -> Problem | None:
    """A prompt set of the checkpoint naming a stage memory system `system` (with `stages`) does not have,
    or an accepted knob change of a knob it does not have (`knobs`)."""
    for field in ("start_prompts", "current_prompts"):
        unknown = sorted(set(data[field]) - set(stages))
        if unknown:
            return Problem(field, f"names stage(s) {unknown} that memory system {system!r} does not have "
                                  f"(its stages: {sorted(stages)})")
    unknown = sorted(set(data.get("current_knobs", {})) - set(knobs))
    if unknown:
        return Problem("current_knobs", f"names knob(s) {unknown} that memory system {system!r} does not have "
                                        f"(its knobs: {sorted(knobs)})")
    return None
