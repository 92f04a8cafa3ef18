"""`datasets` as the data layer (pipeline.data.reader): local files and hub ids are read through
`datasets.load_dataset` and parsed by the layout's one parser; values come back exactly as written
(varying keys, mixed-type answers), errors name the file, the cache is this test run's and nothing
touches the network (a local folder in hub repository layout stands where a hub id goes)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from memtrace_loop.pipeline.data.locomo import DataError, load_locomo, load_locomo_hub, parse_locomo
from memtrace_loop.pipeline.data.longmemeval import load_longmemeval, parse_longmemeval
from memtrace_loop.pipeline.data.reader import hub_source, read_file_rows, read_hub_rows
from memtrace_loop.pipeline.data.registry import load_dataset
from memtrace_loop.pipeline.sim.longmemeval import generate_longmemeval
from memtrace_loop.pipeline.tracking.run_logging import dataset_digest

from tests.support.paths import FIXTURES, LOCOMO, REPO
from tests.support.requires import missing_locomo, requires

MINI = FIXTURES / "locomo_mini.json"
SHIPPED_LONGMEMEVAL = REPO / "data" / "longmemeval_fixture.json"


def _samples() -> list[dict]:
    return json.loads(MINI.read_text(encoding="utf-8"))


def _write(path: Path, payload: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload), encoding="utf-8")
    return path


def test_the_cache_of_datasets_is_this_test_runs_and_offline() -> None:
    import datasets

    assert os.environ["HF_DATASETS_OFFLINE"] == "1" and os.environ["HF_HUB_OFFLINE"] == "1"
    cache = Path(datasets.config.HF_DATASETS_CACHE)
    assert cache == Path(os.environ["HF_DATASETS_CACHE"]) and "memtrace-tests-" in str(cache)
    load_locomo(MINI)
    assert any(cache.rglob("*.arrow"))  # what it read went to the temporary cache


def test_local_files_through_datasets_equal_the_decoded_json() -> None:
    direct = parse_locomo(_samples(), str(MINI))
    loaded = load_locomo(MINI)
    assert loaded.conversations == direct.conversations and loaded.questions == direct.questions
    assert dataset_digest(loaded) == dataset_digest(direct)
    assert [q.gold for q in loaded.questions if q.id == "mini-1:q2"] == ["3"]  # an int answer, as written


@requires(missing_locomo())
def test_the_real_locomo_subset_through_datasets_is_unchanged() -> None:
    direct = parse_locomo(json.loads(LOCOMO.read_text(encoding="utf-8")), str(LOCOMO))
    loaded = load_locomo(LOCOMO)
    assert loaded.conversations == direct.conversations and loaded.questions == direct.questions
    assert (len(loaded.conversations), len(loaded.questions)) == (2, 304)
    assert dataset_digest(loaded) == dataset_digest(direct)


def test_varying_keys_and_mixed_values_are_not_merged_or_coerced(tmp_path: Path) -> None:
    samples = _samples()
    samples[0]["qa"][0]["answer"] = 2.5  # a float beside ints and strings: no "3.0", no "2.50"
    samples[1]["qa"][0]["answer"] = 2022
    samples[0]["extra_field"] = {"anything": [1, "two"]}  # an unknown column: read, ignored by the parser
    rows = read_file_rows(_write(tmp_path / "mixed.json", samples), ("sample_id", "conversation", "qa"))
    assert rows == samples  # exactly as written: no session_N key added to the conversation lacking it
    loaded = load_locomo(tmp_path / "mixed.json")
    assert [q.gold for q in loaded.questions][:1] == ["2.5"] and "2022" in [q.gold for q in loaded.questions]
    assert "session_10" not in rows[0]["conversation"]


def test_json_lines_files_are_read_too(tmp_path: Path) -> None:
    path = tmp_path / "mini.jsonl"
    path.write_text("\n".join(json.dumps(sample) for sample in _samples()) + "\n", encoding="utf-8")
    assert load_locomo(path).questions == load_locomo(MINI).questions


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("broken.json", '[{"sample_id": "x",', "invalid JSON at line 1"),
        ("object.json", '{"sample_id": "x"}', "expected a JSON list of samples, got an object"),
        ("empty.json", "[]", "no conversations"),
        ("broken.jsonl", '{"sample_id": "x"}\n{"sample_id": ', "invalid JSON at line 2"),
    ],
)
def test_bad_files_are_data_errors_naming_the_file(tmp_path: Path, name: str, content: str, expected: str) -> None:
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError, match=expected) as info:
        load_locomo(path)
    assert info.value.source == str(path)


def test_a_record_that_is_not_an_object_is_named_by_the_parser(tmp_path: Path) -> None:
    with pytest.raises(DataError) as info:
        load_locomo(_write(tmp_path / "seven.json", [*_samples(), 7]))
    assert info.value.record == "sample #2"


# --------------------------------------------------------------------------- hub ids (a local repository folder)


def _hub_folder(tmp_path: Path, file: Path, name: str) -> Path:
    """A folder laid out like a hub dataset repository: a dataset card and the data file."""
    folder = tmp_path / "hub-repo"
    folder.mkdir(exist_ok=True)
    (folder / "README.md").write_text("---\nlicense: mit\n---\n# fixture\n", encoding="utf-8")
    shutil.copy(file, folder / name)
    return folder


def test_locomo_from_a_hub_id_is_parsed_like_the_file(tmp_path: Path) -> None:
    folder = _hub_folder(tmp_path, MINI, "locomo_mini.json")
    through_hub = load_locomo_hub(str(folder), data_files="locomo_mini.json")
    assert through_hub.questions == load_locomo(MINI).questions and through_hub.name == "locomo_mini"
    by_config = load_dataset({"kind": "locomo", "hub": str(folder), "hub_file": "locomo_mini.json"})
    assert dataset_digest(by_config) == dataset_digest(load_locomo(MINI))


def test_longmemeval_from_a_hub_id_in_the_benchmarks_repository_layout(tmp_path: Path) -> None:
    folder = _hub_folder(tmp_path, SHIPPED_LONGMEMEVAL, "longmemeval_s_cleaned.json")  # the hub's file name
    config = {"kind": "longmemeval", "hub": str(folder), "path": "ignored.json"}
    through_hub = load_dataset(config)
    direct = load_longmemeval(SHIPPED_LONGMEMEVAL)
    assert through_hub.name == "longmemeval_s_cleaned" and through_hub.questions == direct.questions
    assert dataset_digest(through_hub) == dataset_digest(direct)


def test_a_hub_id_that_cannot_be_loaded_offline_is_a_data_error_naming_it() -> None:
    with pytest.raises(DataError, match=r"^hf:nobody/no-such-dataset/x\.json: cannot load from the hub"):
        read_hub_rows("nobody/no-such-dataset", ("question_id",), "x.json")
    assert hub_source("a/b") == "hf:a/b"


def test_the_shipped_longmemeval_fixture_is_synthetic_and_loads() -> None:
    records = json.loads(SHIPPED_LONGMEMEVAL.read_text(encoding="utf-8"))
    assert records == generate_longmemeval(seed=0, n_questions=18, sessions_per_question=4, turns_per_session=8)
    dataset = load_longmemeval(SHIPPED_LONGMEMEVAL)
    assert (len(dataset.conversations), len(dataset.questions)) == (18, 18)
    assert dataset.questions == parse_longmemeval(records, "x").questions


def test_top_level_strings_that_look_like_json_stay_text(tmp_path: Path) -> None:
    records = generate_longmemeval(seed=0, n_questions=3, sessions_per_question=2, turns_per_session=4)
    records[0]["question_id"], records[0]["answer"] = "8e999", "2.50"  # a hex id, a number written as text
    records[1]["question_id"], records[1]["answer"] = "12345678", 3  # all digits; an int answer
    records[2]["answer"] = "null"
    loaded = load_longmemeval(_write(tmp_path / "ids.json", records))
    assert [q.id for q in loaded.questions][:2] == ["8e999", "12345678"]
    assert [q.gold for q in loaded.questions] == ["2.50", "3", "null"]
    assert loaded.questions == parse_longmemeval(records, "x").questions
