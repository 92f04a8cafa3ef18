"""A loop checkpoint is checked against its schema and its run before `resume=` trusts it
(`pipeline.loop.checkpoint`): each corruption is ONE line naming the file and the
field; an intact checkpoint reads back to the progress that was written."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from memtrace_loop.memory_systems.registry import build_memory_system
from memtrace_loop.pipeline.analysis.blame import BlameTable
from memtrace_loop.pipeline.backends.call_count import CallTally, RoleCalls
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.core.records import PromptSet
from memtrace_loop.pipeline.core.run_folder import RunFolder
from memtrace_loop.pipeline.loop.checkpoint import (
    EXTRA_FIELDS,
    FIELDS,
    Checkpoint,
    CheckpointError,
    FinishedRun,
    LoopProgress,
    folder_run_id,
    mark_finished,
    read_checkpoint,
    write_checkpoint,
)
from memtrace_loop.pipeline.loop.summaries import CandidateSummary, IterationSummary

DIGEST = "cfg-digest"
RUN_ID = "run-a"
START = PromptSet({"extract": "Extract facts.", "respond": "Answer."})
CURRENT = PromptSet({"extract": "Extract every dated fact.", "respond": "Answer."})
BLAME = [{"stage": "extract", "tunable": "prompt", "count": 3, "share": 0.75, "weight": 3.0, "verified": 1,
          "refuted": 0, "unverifiable": 2, "n_Extraction": 3, "examples": "q1, q2"}]


def _summary(iteration: int) -> IterationSummary:
    candidates = () if iteration == 0 else (
        CandidateSummary(("extract",), 0.5 + iteration / 10, 0.1, (0.0, 0.2), iteration == 1, "dated facts"),
    )
    return IterationSummary(iteration, 0.4, 0.5, (0.3, 0.7), BlameTable.from_rows(BLAME), candidates, 10 * iteration)


PROGRESS = LoopProgress(2, CURRENT, 1, START, tuple(_summary(i) for i in range(3)), 20, {"top_k": 8},
                        CallTally({"task": RoleCalls(made=40, cached=3)}))


MEM0 = build_memory_system({"name": "mem0"}, HashingEmbedder())  # stages extract, decide, respond; knobs top_k, ...


def validated(path: Path) -> Checkpoint:
    """What `memtrace optimize resume=` does before anything else: schema and run, then the system's stages."""
    checkpoint = read_checkpoint(path, DIGEST)
    checkpoint.check_fits(MEM0)
    return checkpoint


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    path = tmp_path / "run" / RunFolder.CHECKPOINT
    write_checkpoint(path, PROGRESS, DIGEST, RUN_ID)
    return path


def edit(change: Callable[[dict[str, Any]], None]) -> Callable[[str], str]:
    def apply(text: str) -> str:
        data = json.loads(text)
        change(data)
        return json.dumps(data)
    return apply


def _drop_stale(data: dict[str, Any]) -> None:
    del data["stale"]


CORRUPTIONS: dict[str, tuple[Callable[[str], str], str]] = {  # name: (corruption, the field the line names)
    "not JSON": (lambda text: "checkpoint of iteration 2\n", "not a JSON checkpoint"),
    "truncated": (lambda text: text[: len(text) // 2], "not a JSON checkpoint"),
    "wrong type": (edit(lambda d: d.update(iteration="2")), "field iteration:"),
    "missing field": (edit(_drop_stale), "field stale: missing"),
    "unknown field": (edit(lambda d: d.update(iterations=2)), "field iterations: unknown field"),
    "iteration not the history's": (edit(lambda d: d.update(iteration=1)), "field iteration: is 1"),
    "empty history": (edit(lambda d: d.update(history=[])), "field history: is empty"),
    "iteration 99": (edit(lambda d: d.update(iteration=99)), "field iteration: is 99"),
    "unknown stage": (edit(lambda d: d["current_prompts"].update(summarize="Sum up.")), "field current_prompts:"),
    "unknown knob": (edit(lambda d: d["current_knobs"].update(top_kk=3)), "field current_knobs: names knob(s)"),
    "another config": (edit(lambda d: d.update(config_digest="0123456789abcdef")), "field config_digest:"),
    "another run's id": (edit(lambda d: d.update(mlflow_run_id="run-b")), "field mlflow_run_id:"),
}


def test_an_intact_checkpoint_reads_back_to_the_progress_written(checkpoint):
    read = validated(checkpoint)
    assert read == Checkpoint(checkpoint, PROGRESS, DIGEST, RUN_ID)
    assert folder_run_id(checkpoint) == RUN_ID
    assert set(json.loads(checkpoint.read_text(encoding="utf-8"))) == set(FIELDS) | {"mlflow_run_id"}


def test_a_finished_run_is_recorded_in_its_checkpoint(checkpoint):
    mark_finished(checkpoint, FinishedRun(0.5, 0.75, ("best_prompts.json", "best_prompts.yaml")))
    read = validated(checkpoint)
    assert read.finished == FinishedRun(0.5, 0.75, ("best_prompts.json", "best_prompts.yaml"))
    assert read.progress == PROGRESS


@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_each_corruption_is_refused_in_one_line_naming_file_and_field(checkpoint, name):
    corrupt, named = CORRUPTIONS[name]
    checkpoint.write_text(corrupt(checkpoint.read_text(encoding="utf-8")), encoding="utf-8")
    with pytest.raises(CheckpointError) as refused:
        validated(checkpoint)
    line = str(refused.value)
    assert "\n" not in line and line.startswith(f"{checkpoint}: ") and named in line, line
    assert "Traceback" not in line and "pydantic" not in line


def test_the_folders_run_is_recorded_once_and_kept(checkpoint):
    write_checkpoint(checkpoint, PROGRESS, DIGEST, "run-b")  # a later write cannot re-bind it
    assert folder_run_id(checkpoint) == RUN_ID
    with pytest.raises(CheckpointError, match=r"field mlflow_run_id: names MLflow run 'run-b'.*run 'run-a'"):
        validated(checkpoint)


def test_a_checkpoint_of_a_folder_that_recorded_no_run_is_checked_without_one(tmp_path):
    path = tmp_path / RunFolder.CHECKPOINT
    write_checkpoint(path, PROGRESS, DIGEST)  # a library loop without MLflow
    assert folder_run_id(path) is None
    assert validated(path).progress == PROGRESS


@pytest.mark.parametrize("field", FIELDS + EXTRA_FIELDS)
def test_every_field_of_the_schema_is_type_checked(checkpoint, field):
    data = json.loads(checkpoint.read_text(encoding="utf-8"))
    data[field] = ["not", "this"] if not isinstance(data.get(field), list) else "not a list"
    checkpoint.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(CheckpointError, match=rf"field {field}\b"):
        validated(checkpoint)


@pytest.mark.parametrize(("change", "named"), [
    (lambda d: d["history"][1].update(dev_ci=[0.1]), "field history[1].dev_ci: list should have at least 2 items"),
    (lambda d: d["history"][2]["candidates"][0].pop("gain"), "field history[2].candidates[0].gain: missing"),
    (lambda d: d["history"][0]["blame"][0].pop("tunable"), "field history[0].blame: unreadable blame row"),
    (lambda d: d["history"].__setitem__(0, 1), "field history[0]: input should be a valid dictionary, got 1"),
    (lambda d: d["calls"]["task"].update(made=-1), "field calls.task.made: input should be greater than"),
    (lambda d: d["calls"]["task"].update(bogus=1), "field calls: unreadable LM call counts"),
])
def test_a_nested_field_is_named_by_its_path(checkpoint, change, named):
    checkpoint.write_text(edit(change)(checkpoint.read_text(encoding="utf-8")), encoding="utf-8")
    with pytest.raises(CheckpointError) as refused:
        validated(checkpoint)
    assert named in str(refused.value)
