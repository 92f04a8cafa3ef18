"""Rerunning `memtrace optimize` on one store and loading its results back: the prompt registry keeps one
version per distinct (text, knobs) with `@champion` on the last accepted set, `prompts=` loads a registered
set (knobs included) and reproduces the export's test score, and `best_program.json` rebuilds the exported
system (knobs included) whose `dspy.Evaluate` score, by the recipe in docs/dspy.md, is the run's.

The world: RAG with `top_k=1` on sim, where the loop accepts the knob change `top_k` 1 -> 2 in iteration 1
and a `respond` rewrite in iteration 2. The first run goes two iterations (sets A, then B); the second only
one, so its accepted set is A again: the text the registry already holds under an older version."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import dspy
import pytest
from hydra import compose, initialize_config_module
from memtrace_loop.experiments.export import export
from memtrace_loop.experiments.lifecycle import EXIT_USAGE, exit_code
from memtrace_loop.experiments.optimize import optimize
from memtrace_loop.experiments.run import run
from memtrace_loop.memory_systems.registry import build_memory_system
from memtrace_loop.optimizers.gepa_program import (
    STATE_KEY,
    MemoryProgram,
    ProgramStateError,
    load_program,
    save_program_state,
)
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.core.prompt_files import PromptFileError, read_prompts
from memtrace_loop.pipeline.core.records import PromptSet
from memtrace_loop.pipeline.tracking.prompt_registry import KNOBS_TAG, registry_name
from memtrace_loop.pipeline.tracking.tracker import CHAMPION
from mlflow import MlflowClient

from tests.support.store import fresh_store

pytestmark = pytest.mark.usefixtures("mlflow_db")

WORLD = ["memory_system=rag", "memory_system.top_k=1", "dataset.n_conversations=8", "workers=2"]
DSPY_DOC = Path(__file__).resolve().parents[2] / "docs" / "dspy.md"


def _compose(tmp_path: Path, app: str, *overrides: str):
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        return compose(app, overrides=[f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", f"cache_dir={tmp_path}/cache",
                                       *overrides])


@pytest.fixture(scope="module")
def rerun(tmp_path_factory):
    """Two optimize runs on one store: (tmp_path, first outcome, second outcome)."""
    tmp_path = tmp_path_factory.mktemp("rerun")
    fresh_store(tmp_path / "mlflow.db")
    before = Path.cwd()
    os.chdir(tmp_path)
    try:
        first = optimize(_compose(tmp_path, "optimize", *WORLD, "loop.max_iterations=2"))
        second = optimize(_compose(tmp_path, "optimize", *WORLD, "loop.max_iterations=1"))
    finally:
        os.chdir(before)
    return tmp_path, first, second


def _versions(tmp_path: Path) -> list:
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    name = registry_name("rag", "respond", "memtrace")
    return sorted(client.search_prompt_versions(name), key=lambda v: int(v.version))


@pytest.mark.slow  # two optimize runs (about 6 s together)
def test_a_rerun_adds_no_duplicate_versions_and_champion_is_the_last_accepted_set(rerun):
    tmp_path, first, second = rerun
    assert first["result"].final_prompts != second["result"].final_prompts  # B, then A again
    versions = _versions(tmp_path)
    kept = [(v.template, v.tags[KNOBS_TAG]) for v in versions]
    assert len(kept) == len(set(kept)) == 2  # A and B, each once (before: A, B, A again)
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    champion = client.get_prompt_version_by_alias(registry_name("rag", "respond", "memtrace"), CHAMPION)
    assert champion.template == second["result"].final_prompts["respond"]  # the last accepted text
    assert champion.version == versions[0].version  # A's own version, not a copy of it
    assert json.loads(champion.tags[KNOBS_TAG]) == {"top_k": 2}
    assert read_prompts(second["exported"][0]).knobs == {"top_k": 2}  # what the export says too


@pytest.mark.slow
def test_prompts_from_the_registry_reproduce_the_exported_test_score(rerun):
    tmp_path, _, second = rerun
    # the default top_k (10): the registered set's knobs (top_k 2) must come with it
    from_registry = run(_compose(tmp_path, "run", "memory_system=rag", "dataset.n_conversations=8",
                                 "split=test", "prompts=registry:rag@champion"))
    # the exported file's score (the export reproduces it: test_optimize_app.py), not a perfect one
    assert from_registry["judge_accuracy"] == second["test_final"] < 1


@pytest.mark.parametrize(("source", "says"), [
    ("registry:rag@nope", "Prompt alias nope not found"),
    ("registry:mem0@champion", "names memory system 'mem0', this run uses 'rag'"),
    ("registry:other/rag@champion", "memtrace-other-rag-respond not found"),
    ("registry:rag/2", "a registered set has no version number"),
    ("registry:rag", "expected registry:<system>@<alias>"),
    ("prompts:/memtrace-memtrace-rag-respond/9", "version=9) not found"),
    ("prompts:/memtrace-memtrace-rag-nothing@champion", "memtrace-memtrace-rag-nothing not found"),
])
@pytest.mark.slow
def test_a_registry_source_that_names_nothing_fails_in_one_line(rerun, source, says):
    tmp_path, _, _ = rerun
    with pytest.raises(PromptFileError) as error:
        run(_compose(tmp_path, "run", "memory_system=rag", "split=test", f"prompts={source}"))
    message = str(error.value)
    assert message.startswith(f"prompts={source}: ") and says in message and "\n" not in message
    assert exit_code(error.value) == EXIT_USAGE


def test_a_missing_tracking_store_is_named_not_created(tmp_path):
    store = tmp_path / "none" / "mlflow.db"
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        cfg = compose("run", overrides=[f"tracking.uri=sqlite:///{store}", f"cache_dir={tmp_path}/cache",
                                        "prompts=registry:mem0@champion"])
    with pytest.raises(PromptFileError, match=r"^prompts=registry:mem0@champion: no tracking store at sqlite:///"):
        run(cfg)
    assert not store.exists()


@pytest.mark.slow
def test_a_stage_uri_loads_that_stage_only(rerun):
    tmp_path, first, _ = rerun
    uri = f"prompts:/{registry_name('rag', 'respond', 'memtrace')}/2"  # B's text, without its knobs
    outcome = run(_compose(tmp_path, "run", *WORLD, "split=test", f"prompts={uri}"))
    assert outcome["judge_accuracy"] < first["test_final"]  # B needs top_k 2: with top_k 1 it misses


@pytest.mark.slow
def test_the_program_state_rebuilds_the_exported_system_with_its_knobs(rerun):
    tmp_path, _, second = rerun
    folder = Path(second["exported"][0]).parent
    state = json.loads((folder / "best_program.json").read_text())
    assert state[STATE_KEY]["system"] == "rag" and state[STATE_KEY]["knobs"]["top_k"] == 2
    program = load_program(folder)
    assert program.system.name == "rag" and program.system.knob_values()["top_k"] == 2  # not the default 10
    assert program.system.prompt_set() == second["result"].final_prompts
    # `memtrace export` writes the same state beside its file
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        cfg = compose("export", overrides=[f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
                                           f"run_id={second['run_id']}", f"out={tmp_path / 'mine.yaml'}"])
    path = export(cfg)
    exported = load_program(path.with_name("mine.program.json"))
    assert exported.system.knob_values() == program.system.knob_values()
    assert exported.system.prompt_set() == program.system.prompt_set()


def test_a_program_state_of_another_system_is_refused(tmp_path):
    path = save_program_state(build_memory_system({"name": "rag", "top_k": 3}, HashingEmbedder()),
                              PromptSet({"respond": "Answer briefly."}), tmp_path / "rag.json")
    program = MemoryProgram(build_memory_system({"name": "mem0"}, HashingEmbedder()))
    with pytest.raises(ProgramStateError, match="for memory system 'rag', this program's system is 'mem0'"):
        program.load(str(path))
    assert load_program(path).system.knob_values()["top_k"] == 3


@pytest.mark.slow
def test_the_documented_dspy_evaluate_recipe_gives_the_runs_test_score(rerun, monkeypatch):
    tmp_path, _, second = rerun
    monkeypatch.chdir(tmp_path)
    (recipe,) = re.findall(r"```python\n(.*?)```", DSPY_DOC.read_text().split("## Scoring it with dspy.Evaluate")[1],
                           flags=re.S)[:1]
    namespace = {"run_dir": str(Path(second["exported"][0]).parent)}
    exec(compile(recipe, str(DSPY_DOC), "exec"), namespace)  # exactly the documented code
    assert isinstance(namespace["result"], dspy.evaluate.EvaluationResult)
    assert namespace["result"].score == round(100 * second["test_final"], 2)
