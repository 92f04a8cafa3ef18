"""MLflow prompt registry on a temporary SQLite store: versions, verbatim templates, names, errors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import mlflow
import pytest
from memtrace_loop.pipeline.core.records import PromptSet
from memtrace_loop.pipeline.tracking.prompt_registry import (
    PromptRegistryError,
    load_registered_set,
    load_registered_stage,
    prompt_uri,
    register_prompt_set,
    registry_name,
)
from memtrace_loop.pipeline.tracking.tracker import CHAMPION
from mlflow import MlflowClient

# every test starts with a fresh, migrated MLflow store at tmp_path/mlflow.db (a copy of a template: tests/conftest.py)
pytestmark = pytest.mark.usefixtures("mlflow_db")

BRACES = "Use {x} and {{y}} and {{ z }}, {% if a %}b{% endif %}, {0} and }{.\n  Keep  spacing\ttabs  \n"


@pytest.fixture
def store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/mlflow.db"


def test_registry_names_are_what_mlflow_accepts() -> None:
    assert registry_name("mem0", "answer.predict") == "memtrace-mem0-answer.predict"
    assert registry_name("my system", "a/b:c@d") == "memtrace-my_system-a_b_c_d"
    assert prompt_uri("mem0", "extract") == "prompts:/memtrace-mem0-extract@latest"
    assert prompt_uri("mem0", "extract", 3) == "prompts:/memtrace-mem0-extract/3"
    assert prompt_uri("mem0", "extract", "3") == "prompts:/memtrace-mem0-extract/3"
    assert registry_name("mem0", "extract", "locomo run") == "memtrace-locomo_run-mem0-extract"
    assert prompt_uri("mem0", "extract", "champion", "exp") == "prompts:/memtrace-exp-mem0-extract@champion"
    with pytest.raises(PromptRegistryError):
        prompt_uri("mem0", "extract", 0)
    with pytest.raises(PromptRegistryError):
        prompt_uri("mem0", "extract", "bad/alias")


def test_two_versions_round_trip_verbatim(store: str) -> None:
    first = PromptSet({"extract": BRACES, "answer.predict": "Answer {{question}} briefly.", "decide": "Decide."})
    second = first.with_instruction("extract", BRACES + "second {{version}}")

    uris_1 = register_prompt_set("mem0", first, "iteration 1", {"run": "r1"}, registry_uri=store)
    uris_2 = register_prompt_set("mem0", second, "iteration 2", {"run": "r2"}, registry_uri=store)

    assert uris_1 == {
        "answer.predict": "prompts:/memtrace-mem0-answer.predict/1",
        "decide": "prompts:/memtrace-mem0-decide/1",
        "extract": "prompts:/memtrace-mem0-extract/1",
    }
    assert uris_2["extract"] == "prompts:/memtrace-mem0-extract/2"
    for uris, prompts in ((uris_1, first), (uris_2, second)):
        assert PromptSet({s: load_registered_stage(u, registry_uri=store).text for s, u in uris.items()}) == prompts
    assert load_registered_set("mem0", first.stages(), 1, registry_uri=store).prompts == first
    assert load_registered_set("mem0", first.stages(), registry_uri=store).prompts == second  # latest
    loaded = load_registered_set("mem0", ["extract"], "latest", registry_uri=store).prompts
    assert loaded["extract"] == BRACES + "second {{version}}"

    version = MlflowClient(tracking_uri=store, registry_uri=store).get_prompt_version("memtrace-mem0-extract", 2)
    assert version.commit_message == "iteration 2"
    assert version.tags["run"] == "r2"
    assert version.tags["memtrace.stage"] == "extract"
    assert version.tags["memtrace.system"] == "mem0"


@pytest.fixture
def current_store(store: str) -> Iterator[str]:
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(store)
    try:
        yield store
    finally:
        mlflow.set_tracking_uri(previous)


def test_default_store_is_the_current_tracking_uri(current_store: str) -> None:
    uris = register_prompt_set("mem0", PromptSet({"respond": "R {x}"}), "c")
    assert uris == {"respond": "prompts:/memtrace-mem0-respond/1"}
    assert load_registered_set("mem0", ["respond"]).prompts == PromptSet({"respond": "R {x}"})
    assert load_registered_set("mem0", ["respond"], registry_uri=current_store).prompts["respond"] == "R {x}"


def test_versions_are_linked_to_a_run(current_store: str, tmp_path: Path) -> None:
    client = MlflowClient()
    run = client.create_run(client.create_experiment("e"))
    register_prompt_set("mem0", PromptSet({"extract": "E.", "decide": "D."}), run_id=run.info.run_id)
    linked = client.get_run(run.info.run_id).data.tags["mlflow.linkedPrompts"]
    assert "memtrace-mem0-extract" in linked
    assert "memtrace-mem0-decide" in linked
    other = f"sqlite:///{tmp_path}/other.db"
    with pytest.raises(PromptRegistryError, match="current MLflow tracking URI"):
        register_prompt_set("mem0", PromptSet({"extract": "E."}), run_id=run.info.run_id, registry_uri=other)


def test_missing_prompts_and_wrong_stage_raise(store: str) -> None:
    register_prompt_set("mem0", PromptSet({"extract": "E."}), registry_uri=store)
    with pytest.raises(PromptRegistryError, match=r"stage 'decide'.*not found"):
        load_registered_set("mem0", ["extract", "decide"], registry_uri=store)
    with pytest.raises(PromptRegistryError, match=r"memtrace-mem0-extract/5"):
        load_registered_set("mem0", ["extract"], 5, registry_uri=store)
    assert load_registered_stage("prompts:/memtrace-mem0-extract/1", registry_uri=store).stage == "extract"
    with pytest.raises(PromptRegistryError, match="not a prompt URI"):
        load_registered_stage("models:/memtrace-mem0-extract/1", registry_uri=store)


def test_invalid_input_registers_nothing(store: str) -> None:
    client = MlflowClient(tracking_uri=store, registry_uri=store)
    with pytest.raises(PromptRegistryError, match="no stages"):
        register_prompt_set("mem0", PromptSet(), registry_uri=store)
    with pytest.raises(PromptRegistryError, match="'decide' must be a non-empty string"):
        register_prompt_set("mem0", PromptSet({"extract": "E.", "decide": " "}), registry_uri=store)
    with pytest.raises(PromptRegistryError, match="both map to"):
        register_prompt_set("mem0", PromptSet({"a/b": "x", "a:b": "y"}), registry_uri=store)
    assert client.get_prompt("memtrace-mem0-extract") is None


def test_a_version_only_for_a_changed_stage_and_the_champion_alias_moves(current_store: str) -> None:
    client = MlflowClient()
    experiment = client.create_experiment("e")
    first_run = client.create_run(experiment).info.run_id
    second_run = client.create_run(experiment).info.run_id
    first = PromptSet({"extract": "E1.", "decide": "D1."})
    second = first.with_instruction("decide", "D2.")
    uris_1 = register_prompt_set("mem0", first, "it 1", run_id=first_run, experiment="exp", alias=CHAMPION)
    uris_2 = register_prompt_set("mem0", second, "it 2", run_id=second_run, experiment="exp", alias=CHAMPION)
    again = register_prompt_set("mem0", second, "it 3", experiment="exp")  # nothing changed: nothing new

    assert uris_2 == again == {"extract": "prompts:/memtrace-exp-mem0-extract/1",  # unchanged: reused
                               "decide": "prompts:/memtrace-exp-mem0-decide/2"}
    assert uris_1["decide"] == "prompts:/memtrace-exp-mem0-decide/1"
    versions = list(client.search_prompt_versions("memtrace-exp-mem0-extract"))
    assert [v.version for v in versions] == [1]
    champion = load_registered_set("mem0", ["extract", "decide"], CHAMPION, experiment="exp").prompts
    assert champion == second
    assert client.get_prompt_version_by_alias("memtrace-exp-mem0-decide", CHAMPION).version == 2
    assert client.get_prompt_version("memtrace-exp-mem0-decide", 2).tags["memtrace.experiment"] == "exp"
    # each version is linked to the run that made it, only to that one
    first_links = client.get_run(first_run).data.tags["mlflow.linkedPrompts"]
    second_links = client.get_run(second_run).data.tags["mlflow.linkedPrompts"]
    assert "memtrace-exp-mem0-extract" in first_links and "memtrace-exp-mem0-decide" in first_links
    assert "memtrace-exp-mem0-decide" in second_links and "memtrace-exp-mem0-extract" not in second_links
    # another experiment's prompts are apart
    register_prompt_set("mem0", PromptSet({"extract": "other."}), experiment="other")
    assert load_registered_set("mem0", ["extract"], experiment="exp").prompts["extract"] == "E1."


def test_an_alias_must_be_a_name_other_than_latest(store: str) -> None:
    for alias in ("latest", "3", "a/b"):
        with pytest.raises(PromptRegistryError, match="alias"):
            register_prompt_set("mem0", PromptSet({"extract": "E."}), alias=alias, registry_uri=store)


def test_a_text_registered_before_is_reused_and_the_champion_moves_back_to_it(store: str) -> None:
    a, b = PromptSet({"decide": "D1."}), PromptSet({"decide": "D2."})
    for accepted in (a, b, a):  # a rerun accepts the first text again (issue 25, item 6)
        uris = register_prompt_set("mem0", accepted, alias=CHAMPION, registry_uri=store)
    client = MlflowClient(tracking_uri=store, registry_uri=store)
    assert uris == {"decide": "prompts:/memtrace-mem0-decide/1"}  # A's own version, no copy
    assert sorted(int(v.version) for v in client.search_prompt_versions("memtrace-mem0-decide")) == [1, 2]
    assert client.get_prompt_version_by_alias("memtrace-mem0-decide", CHAMPION).version == 1

    # knobs belong to the set: the same text with other knobs is a new version, loaded back with them
    knobbed = register_prompt_set("mem0", a, alias=CHAMPION, knobs={"top_k": 20}, registry_uri=store)
    assert knobbed == {"decide": "prompts:/memtrace-mem0-decide/3"}
    found = load_registered_set("mem0", ["decide"], CHAMPION, registry_uri=store)
    assert found.prompts == a and dict(found.knobs) == {"top_k": 20}
    assert load_registered_set("mem0", ["decide"], 1, registry_uri=store).knobs == {}

    # stages whose versions carry different knobs were not registered as one set
    register_prompt_set("mem0", PromptSet({"extract": "E."}), alias="mixed", knobs={"top_k": 5}, registry_uri=store)
    register_prompt_set("mem0", PromptSet({"decide": "D2."}), alias="mixed", registry_uri=store)
    with pytest.raises(PromptRegistryError, match="not registered as one set: their knobs differ"):
        load_registered_set("mem0", ["extract", "decide"], "mixed", registry_uri=store)
