"""The mem0 config fragment (`memory_systems.mem0ai.fragment`) against the installed, real `mem0ai`:
written and read back, refused in one line when a key is not the installed mem0's, and — pasted as the
README says into a fresh `mem0.Memory.from_config` — the texts the library sends to its LLM."""

from __future__ import annotations

import datetime
import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from memtrace_loop.memory_systems.mem0ai.fragment import FORMAT_ID, MEM0_CONFIG_FRAGMENT, mem0_config_keys
from memtrace_loop.memory_systems.mem0ai.hooks import (
    DATE_PLACEHOLDER,
    HOOK_BY_STAGE,
    default_hooks,
    import_mem0,
    installed_version,
    with_session_date,
)
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.core.prompt_files import ExportedPrompts, PromptFileError, write_prompts
from memtrace_loop.pipeline.core.prompt_formats import read_prompt_file, write_prompt_formats
from memtrace_loop.pipeline.core.records import PromptSet

from tests.support.paths import REPO

FORMATS = (MEM0_CONFIG_FRAGMENT,)
EXTRA_RULE = "\n- Resolve relative dates (yesterday, last week) to absolute dates using the session date."
KEEP_BOTH = "\nWhen a new fact adds to an old one without contradicting it, keep both (UPDATE merging them)."


def optimized() -> ExportedPrompts:
    """An export as the loop writes it: changed hooks, our answer stage and a knob."""
    hooks = default_hooks()
    prompts = PromptSet({
        "fact_extraction": hooks["fact_extraction"] + EXTRA_RULE,
        "update_memory": hooks["update_memory"] + KEEP_BOTH,
        "respond": "Answer the question from the memories.",
    })
    return ExportedPrompts.create("mem0ai", prompts, source_run="run-1", metrics={"test_judge_accuracy": 0.5},
                                  knobs={"top_k": 20})


def written(tmp_path: Path) -> dict[str, Path]:
    return {p.name: p for p in write_prompt_formats(optimized(), FORMATS, tmp_path)}


def test_the_fragment_holds_only_mem0s_hook_keys_stamped_with_the_installed_version(tmp_path):
    files = written(tmp_path)
    assert set(files) == {"mem0_config.yaml", "mem0_config.json"}
    as_json = json.loads(files["mem0_config.json"].read_text())
    assert yaml.safe_load(files["mem0_config.yaml"].read_text()) == as_json  # one document, two syntaxes
    assert as_json["format"] == FORMAT_ID and as_json["mem0ai_version"] == installed_version() != ""
    assert set(as_json["config"]) == set(HOOK_BY_STAGE.values())  # no respond, no top_k
    assert set(as_json["config"]) <= mem0_config_keys()
    assert "top_k" not in files["mem0_config.yaml"].read_text()
    exported = optimized()
    for stage, key in HOOK_BY_STAGE.items():
        assert as_json["config"][key] == exported.prompts[stage]
    assert DATE_PLACEHOLDER in as_json["config"]["custom_fact_extraction_prompt"]
    assert DATE_PLACEHOLDER in as_json["note"]


@pytest.mark.parametrize("name", ["mem0_config.yaml", "mem0_config.json"])
def test_a_written_fragment_reads_back_as_the_hooks_and_nothing_else(tmp_path, name):
    loaded = read_prompt_file(written(tmp_path)[name], "mem0ai", FORMATS)
    exported = optimized()
    assert loaded.prompts == PromptSet({stage: exported.prompts[stage] for stage in HOOK_BY_STAGE})
    assert loaded.system == "mem0ai" and dict(loaded.knobs) == {}
    assert loaded.description == f"prompt file {tmp_path / name}"


def fragment_file(tmp_path: Path, **changes: Any) -> Path:
    document = {"format": FORMAT_ID, "mem0ai_version": installed_version(), "note": "", "source_run": None,
                "config": {"custom_update_memory_prompt": "Decide ADD, UPDATE, DELETE or NONE. Reply in JSON."}}
    path = tmp_path / "fragment.yaml"
    path.write_text(yaml.safe_dump({**document, **changes}))
    return path


def test_a_2x_key_the_installed_mem0_lacks_is_refused_naming_the_key_and_the_version(tmp_path):
    path = fragment_file(tmp_path, mem0ai_version="2.2.1", config={"custom_instructions": "Keep dates."})
    with pytest.raises(PromptFileError) as caught:
        read_prompt_file(path, "mem0ai", FORMATS)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message and "'custom_instructions'" in message
    assert f"installed mem0ai {installed_version()}" in message and "2.2.1" in message


@pytest.mark.parametrize(("changes", "needle"), [
    ({"config": {"vector_store": "x"}}, "config['vector_store'] is a mem0 config key but not a prompt hook"),
    ({"config": {}}, "key config: must hold at least one mem0 config key"),
    ({"format": "mem0ai-config-v9"}, "key 'format': 'mem0ai-config-v9' is not a prompt format of memory system"),
    ({"hooks": {}}, "key hooks: unknown key"),
    ({"mem0ai_version": ""}, "key mem0ai_version: must be a non-empty string"),
])
def test_a_malformed_fragment_is_refused_in_one_line_naming_the_file_and_key(tmp_path, changes, needle):
    path = fragment_file(tmp_path, **changes)
    with pytest.raises(PromptFileError, match=re.escape(needle)) as caught:
        read_prompt_file(path, "mem0ai", FORMATS)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)


def test_a_fragment_made_for_another_version_with_known_keys_loads_with_a_warning(tmp_path, caplog):
    path = fragment_file(tmp_path, mem0ai_version="1.0.5")
    with caplog.at_level(logging.WARNING):
        loaded = read_prompt_file(path, "mem0ai", FORMATS)
    assert set(loaded.prompts.stages()) == {"update_memory"}
    assert any("1.0.5" in r.getMessage() and installed_version() in r.getMessage() for r in caplog.records)


def test_our_own_layout_still_loads_whole_with_its_knobs_through_the_same_reader(tmp_path):
    exported = optimized()
    loaded = read_prompt_file(write_prompts(exported, tmp_path / "best_prompts.yaml"), "mem0ai", FORMATS)
    assert loaded == exported and dict(loaded.knobs) == {"top_k": 20} and "respond" in loaded.prompts


# --------------------------------------------------------------------------- the real library


def readme_lines() -> str:
    """The README's one Python block that merges the fragment into `Memory.from_config`."""
    blocks = re.findall(r"^```python\n(.*?)^```", (REPO / "README.md").read_text(), re.S | re.M)
    (block,) = [b for b in blocks if "Memory.from_config(" in b and "mem0_config" in b]
    return block


class RecordingLLM:
    """Stands where mem0's LLM object does: records each call's messages, answers in mem0's JSON shapes."""

    def __init__(self) -> None:
        self.calls: list[list[dict[str, str]]] = []

    def generate_response(self, messages: list[dict[str, str]], response_format: Any = None, **_: Any) -> str:
        self.calls.append(messages)
        if len(self.calls) == 1:
            return json.dumps({"facts": ["Caroline went to a support group on 7 May 2023"]})
        return json.dumps({"memory": [{"id": "0", "text": "Caroline went to a support group on 7 May 2023",
                                       "event": "ADD"}]})


class HashingEmbedding:
    """Stands where mem0's embedder does, embedding with our `HashingEmbedder`."""

    def __init__(self, embedder: HashingEmbedder) -> None:
        self.embedder = embedder

    def embed(self, text: str, memory_action: str | None = None) -> list[float]:
        return [float(v) for v in self.embedder.embed([text])[0]]


def user_config(tmp_path: Path, dims: int) -> dict[str, Any]:
    """A mem0 user's own settings: local Qdrant and SQLite history in `tmp_path` (the openai provider
    needs a key at construction; the LLM and embedder objects are replaced before any call)."""
    return {
        "vector_store": {"provider": "qdrant", "config": {"path": str(tmp_path / "qdrant"), "on_disk": True,
                                                          "collection_name": "user", "embedding_model_dims": dims}},
        "llm": {"provider": "openai", "config": {"api_key": "placeholder-not-a-key", "model": "gpt-4.1-mini"}},
        "embedder": {"provider": "openai", "config": {"api_key": "placeholder-not-a-key", "embedding_dims": dims}},
        "history_db_path": str(tmp_path / "history.db"),
    }


def test_the_fragment_pasted_as_the_readme_says_makes_mem0_send_the_exported_texts(tmp_path, monkeypatch):
    written(tmp_path)
    monkeypatch.chdir(tmp_path)
    mem0 = import_mem0()
    embedder = HashingEmbedder()
    namespace: dict[str, Any] = {"json": json, "datetime": datetime, "Memory": mem0.Memory,
                                 "config": user_config(tmp_path, embedder.dim)}
    before = datetime.date.today().isoformat()
    exec(readme_lines(), namespace)  # the user's three lines, as the README shows them
    dates = {before, datetime.date.today().isoformat()}
    memory = namespace["memory"]
    llm = RecordingLLM()
    memory.llm, memory.embedding_model = llm, HashingEmbedding(embedder)
    memory.add([{"role": "user", "content": "Caroline: I went to a LGBTQ support group yesterday."}],
               user_id="caroline")
    extraction, update = llm.calls
    exported = optimized()
    assert extraction[0]["role"] == "system"
    assert extraction[0]["content"] in {with_session_date(exported.prompts["fact_extraction"], d) for d in dates}
    assert EXTRA_RULE.strip() in extraction[0]["content"] and DATE_PLACEHOLDER not in extraction[0]["content"]
    assert [m["role"] for m in update] == ["user"]
    assert update[0]["content"].startswith(exported.prompts["update_memory"])
    assert [m["memory"] for m in memory.get_all(user_id="caroline")["results"]] == [
        "Caroline went to a support group on 7 May 2023"]
