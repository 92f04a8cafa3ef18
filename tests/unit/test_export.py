"""Prompt files: exact JSON/YAML round trips, malformed files, applying to a memory system."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from memtrace_loop.memory_systems.mem0.system import Mem0Memory
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.core.prompt_files import (
    ExportedPrompts,
    PromptFileError,
    apply_prompts,
    read_prompts,
    write_prompts,
)
from memtrace_loop.pipeline.core.records import PromptSet

TRICKY = (
    "Use {x} and {{y}} and {% if z %}z{% endif %}.\n"
    "  indented line with trailing spaces   \n"
    "\n"
    "unicode: é ü 日本 — “quotes” 'single' \"double\" \\ backslash\ttab\n"
    "yes\n"
    "- not a list\n"
    "# not a comment: really"
)


def _exported(**overrides: object) -> ExportedPrompts:
    values: dict[str, object] = {
        "system": "mem0",
        "prompts": PromptSet(
            {"extract": TRICKY, "decide": "Decide.\nTwo lines.", "answer.predict": "yes", "respond": "null"}
        ),
        "source_run": "0123abcd",
        "metrics": {"dev.judge_accuracy": 0.5, "dev.ci_low": 0.25, "n": 3},
        "created": "2025-01-02T03:04:05+00:00",
    }
    values.update(overrides)
    return ExportedPrompts(**values)  # type: ignore[arg-type]


def _system() -> Mem0Memory:
    return Mem0Memory(HashingEmbedder())


@pytest.mark.parametrize("suffix", [".json", ".yaml", ".yml"])
def test_round_trip_is_exact(tmp_path: Path, suffix: str) -> None:
    exported = _exported()
    first = write_prompts(exported, tmp_path / f"prompts{suffix}")
    loaded = read_prompts(first)
    assert loaded == exported
    assert loaded.prompts["extract"] == TRICKY
    assert loaded.metrics["n"] == 3.0
    assert loaded.origin == str(first)
    second = write_prompts(loaded, tmp_path / f"again{suffix}")
    assert first.read_bytes() == second.read_bytes()


def test_json_layout_is_ordered_and_utf8(tmp_path: Path) -> None:
    path = write_prompts(_exported(), tmp_path / "p.json")
    raw = path.read_bytes()
    assert "é".encode() in raw  # written as UTF-8, not escaped
    data = json.loads(raw.decode("utf-8"))
    assert list(data) == ["format_version", "system", "created", "source_run", "metrics", "prompts"]
    assert list(data["prompts"]) == sorted(data["prompts"])
    assert list(data["metrics"]) == sorted(data["metrics"])
    assert data["format_version"] == 1


def test_real_prompt_set_round_trips_through_yaml(tmp_path: Path) -> None:
    system = _system()
    exported = ExportedPrompts.create("mem0", system.prompt_set(), now=datetime(2025, 1, 1, tzinfo=UTC))
    path = write_prompts(exported, tmp_path / "p.yaml")
    assert "extract: |" in path.read_text(encoding="utf-8")  # multi-line instructions stay readable
    assert read_prompts(path) == exported
    assert exported.created == "2025-01-01T00:00:00+00:00"
    assert exported.source_run is None


def test_unknown_suffix_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PromptFileError, match=r"p\.txt.*\.json, \.yaml or \.yml"):
        write_prompts(_exported(), tmp_path / "p.txt")
    with pytest.raises(PromptFileError, match=r"p\.toml"):
        read_prompts(tmp_path / "p.toml")


def test_invalid_records_cannot_be_built() -> None:
    with pytest.raises(ValueError, match=r"prompts\['extract'\]"):
        _exported(prompts=PromptSet({"extract": "  "}))
    with pytest.raises(ValueError, match=r"metrics\['x'\].*finite"):
        _exported(metrics={"x": float("nan")})
    with pytest.raises(ValueError, match="created"):
        _exported(created="yesterday")
    stamped = ExportedPrompts.create("mem0", PromptSet({"extract": "x"}), metrics={"test": 0.5, "dev": float("nan")})
    assert dict(stamped.metrics) == {"test": 0.5}  # a score over no questions is left out, never written as NaN


def _valid_data() -> dict[str, object]:
    return {
        "format_version": 1,
        "system": "mem0",
        "created": "2025-01-02T03:04:05+00:00",
        "source_run": None,
        "metrics": {"acc": 0.5},
        "prompts": {"extract": "Extract.", "answer.predict": "Answer."},
    }


def _with(**changes: object) -> dict[str, object]:
    data = _valid_data()
    for key, value in changes.items():
        if value is _DROP:
            del data[key]
        else:
            data[key] = value
    return data


_DROP = object()

MALFORMED = [
    ("missing prompts", _with(prompts=_DROP), "prompts", "missing"),
    ("missing system", _with(system=_DROP), "system", "missing"),
    ("missing source_run", _with(source_run=_DROP), "source_run", "missing"),
    ("extra key", _with(comment="hi"), "comment", "unknown key"),
    ("system not a string", _with(system=3), "system", "string"),
    ("empty system", _with(system=""), "system", "non-empty"),
    ("prompts not a mapping", _with(prompts=["a"]), "prompts", "dictionary"),
    ("non-string instruction", _with(prompts={"extract": 3}), "prompts['extract']", "string"),
    ("null instruction", _with(prompts={"extract": None}), "prompts['extract']", "string"),
    ("empty instruction", _with(prompts={"extract": ""}), "prompts['extract']", "non-empty"),
    ("blank instruction", _with(prompts={"answer.predict": " \n "}), "prompts['answer.predict']", "non-empty"),
    ("no stages", _with(prompts={}), "prompts", "at least one stage"),
    ("metric is text", _with(metrics={"acc": "high"}), "metrics['acc']", "number"),
    ("metric is bool", _with(metrics={"acc": True}), "metrics['acc']", "number"),
    ("bad time", _with(created="soon"), "created", "ISO-8601"),
    ("future format", _with(format_version=2), "format_version", "unsupported format version 2"),
    ("version as text", _with(format_version="1"), "format_version", "integer"),
]


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
@pytest.mark.parametrize(("case", "data", "field", "problem"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_file_names_file_and_field(
    tmp_path: Path, suffix: str, case: str, data: dict[str, object], field: str, problem: str
) -> None:
    path = tmp_path / f"bad{suffix}"
    text = json.dumps(data) if suffix == ".json" else yaml.safe_dump(data)
    path.write_text(text, encoding="utf-8")
    with pytest.raises(PromptFileError) as caught:
        read_prompts(path)
    message = str(caught.value)
    assert str(path) in message, case
    assert f"field {field}" in message, message
    assert problem in message, message


@pytest.mark.parametrize(
    ("name", "text", "problem"),
    [
        ("broken.json", '{"system": "mem0",', "not valid JSON"),
        ("broken.yaml", "system: [unclosed\n", "not valid YAML"),
        ("dup.json", '{"system": "mem0", "system": "rag"}', "duplicate key 'system'"),
        ("dup.yaml", "system: mem0\nsystem: rag\n", "duplicate key 'system'"),
        ("list.json", "[1, 2]", "field <top level>: must be a mapping"),
        ("empty.yaml", "", "field <top level>: must be a mapping"),
        ("latin1.json", "", "cannot be read"),
    ],
)
def test_unparsable_file_names_file(tmp_path: Path, name: str, text: str, problem: str) -> None:
    path = tmp_path / name
    if name.startswith("latin1"):
        path.write_bytes('{"system": "caf\u00e9"}'.encode("latin-1"))
    else:
        path.write_text(text, encoding="utf-8")
    with pytest.raises(PromptFileError, match=problem) as caught:
        read_prompts(path)
    assert str(path) in str(caught.value)


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    with pytest.raises(PromptFileError, match=r"absent\.yaml does not exist"):
        read_prompts(path)


def test_unquoted_yaml_timestamp_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "hand.yaml"
    path.write_text(
        "format_version: 1\nsystem: mem0\ncreated: 2025-01-02T03:04:05Z\nsource_run: null\nmetrics: {}\n"
        "prompts:\n  extract: Extract.\n",
        encoding="utf-8",
    )
    assert read_prompts(path).created == "2025-01-02T03:04:05+00:00"


# --------------------------------------------------------------------------- apply


def test_apply_to_wrong_system_raises_and_changes_nothing(tmp_path: Path) -> None:
    system = _system()
    before = system.prompt_set()
    path = write_prompts(_exported(system="rag", prompts=PromptSet({"extract": "New."})), tmp_path / "rag.json")
    with pytest.raises(PromptFileError) as caught:
        apply_prompts(system, read_prompts(path))
    assert str(caught.value) == f"prompt file {path} is for memory system 'rag', this run uses 'mem0'"
    assert system.prompt_set() == before


def test_apply_unknown_stages_raises_and_changes_nothing(tmp_path: Path) -> None:
    system = _system()
    before = system.prompt_set()
    prompts = PromptSet({"extract": "New extract.", "answer.predict": "A.", "rerank": "R."})
    path = write_prompts(_exported(prompts=prompts), tmp_path / "p.yaml")
    with pytest.raises(PromptFileError) as caught:
        apply_prompts(system, read_prompts(path))
    message = str(caught.value)
    assert str(path) in message
    assert "['answer.predict', 'rerank']" in message
    assert "mem0" in message
    assert system.prompt_set() == before


def test_apply_partial_file_changes_only_its_stages(tmp_path: Path) -> None:
    system = _system()
    before = system.prompt_set()
    # DSPy normalizes instructions like docstrings (tabs expanded, outer whitespace stripped), so
    # this text has neither; everything else — braces, quotes, unicode, inner lines — is kept.
    text = "Extract facts about {speaker} and {{names}}.\n\n  - one per line\n“é” 日本"
    path = write_prompts(_exported(prompts=PromptSet({"extract": text})), tmp_path / "partial.json")
    updated = apply_prompts(system, read_prompts(path))
    assert updated is not system
    assert updated.prompt_set() == before.with_instruction("extract", text)
    assert updated.extract.signature.instructions == text
    assert system.prompt_set() == before  # the original is untouched


def test_apply_record_without_file_names_its_run() -> None:
    with pytest.raises(PromptFileError, match="exported prompt set of run 0123abcd is for memory system 'rag'"):
        apply_prompts(_system(), _exported(system="rag"))
