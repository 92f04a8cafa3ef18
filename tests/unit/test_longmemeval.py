"""Tests for pipeline.data.longmemeval: the generated fixture loads (turns, evidence, categories, dates),
abstention questions, malformed records, the hub path through `datasets`,
the config dispatch and `memtrace run dataset=longmemeval` end to end."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from memtrace_loop.experiments.factory import load_dataset
from memtrace_loop.experiments.run import run
from memtrace_loop.pipeline.data.locomo import DataError
from memtrace_loop.pipeline.data.longmemeval import (
    ABSTENTION_OFFSET,
    CATEGORY_BY_TYPE,
    QUESTION_TYPES,
    abstention_categories,
    format_date,
    load_longmemeval,
    load_longmemeval_hub,
    parse_date,
    parse_longmemeval,
)
from memtrace_loop.pipeline.data.splits import split_by_conversation
from memtrace_loop.pipeline.sim.longmemeval import generate_longmemeval
from mlflow.tracking import MlflowClient

# every test starts with a fresh, migrated MLflow store at tmp_path/mlflow.db (a copy of a template: tests/conftest.py)
pytestmark = pytest.mark.usefixtures("mlflow_db")


@pytest.fixture(scope="module")
def records() -> list[dict]:
    return generate_longmemeval(seed=2, n_questions=14, sessions_per_question=3, turns_per_session=6)


@pytest.fixture
def fixture_file(tmp_path: Path, records: list[dict]) -> Path:
    path = tmp_path / "longmemeval_fixture.json"
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- dates and the generator


@pytest.mark.parametrize(
    ("text", "iso"),
    [
        ("2023/05/20 (Sat) 02:21", "2023-05-20T02:21"),
        ("2023/5/2 (Tue) 9:05", "2023-05-02T09:05"),
        ("2022/12/31 23:59", "2022-12-31T23:59"),
    ],
)
def test_parse_date(text: str, iso: str) -> None:
    assert parse_date(text) == iso


@pytest.mark.parametrize("text", ["", "20 May 2023", "2023/02/30 (Thu) 10:00", "2023/05/20 (Sat) 25:00"])
def test_parse_date_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_date(text)


def test_generator_writes_the_longmemeval_layout_deterministically(records: list[dict]) -> None:
    assert records == generate_longmemeval(seed=2, n_questions=14, sessions_per_question=3, turns_per_session=6)
    assert records[:5] == generate_longmemeval(seed=2, n_questions=5, sessions_per_question=3, turns_per_session=6)
    assert records != generate_longmemeval(seed=4, n_questions=14, sessions_per_question=3, turns_per_session=6)
    keys = {"question_id", "question_type", "question", "answer", "question_date", "haystack_dates",
            "haystack_session_ids", "haystack_sessions", "answer_session_ids"}
    for record in records:
        assert set(record) == keys
        assert record["question_type"] in QUESTION_TYPES
        assert len(record["haystack_dates"]) == len(record["haystack_sessions"]) == len(record["haystack_session_ids"])
        stamp = re.compile(r"\d{4}/\d{2}/\d{2} \([A-Z][a-z]{2}\) \d{2}:\d{2}")
        assert all(stamp.fullmatch(d) for d in (*record["haystack_dates"], record["question_date"]))
        for session in record["haystack_sessions"]:
            assert all(set(turn) == {"role", "content", "has_answer"} for turn in session)
    assert {r["question_type"] for r in records} == set(QUESTION_TYPES)
    assert any("_abs" in r["question_id"] for r in records)


# --------------------------------------------------------------------------- loading


def test_fixture_loads_into_one_conversation_per_question(fixture_file: Path, records: list[dict]) -> None:
    dataset = load_longmemeval(fixture_file)
    assert dataset.name == "longmemeval_fixture"
    assert len(dataset.conversations) == len(dataset.questions) == len(records)
    for record, conversation, question in zip(records, dataset.conversations, dataset.questions, strict=True):
        qid = record["question_id"]
        assert conversation.id == question.id == question.conversation_id == qid
        assert conversation.speakers == ("user", "assistant")
        flat = [(s, t, turn) for s, session in enumerate(record["haystack_sessions"], 1)
                for t, turn in enumerate(session, 1)]
        assert [turn.id for turn in conversation.turns] == [f"D{s}:{t}" for s, t, _ in flat]
        for turn, (s, _, raw) in zip(conversation.turns, flat, strict=True):
            assert (turn.speaker, turn.text, turn.session) == (raw["role"], raw["content"], s)
            assert turn.time == parse_date(record["haystack_dates"][s - 1])
        assert question.evidence == tuple(f"D{s}:{t}" for s, t, raw in flat if raw["has_answer"])
        assert question.gold == str(record["answer"]).strip()
        assert question.text == f"{record['question']} (question date: {parse_date(record['question_date'])})"
        base = CATEGORY_BY_TYPE[record["question_type"]]
        if "_abs" in qid:
            assert question.category == base + ABSTENTION_OFFSET
            assert question.category_name == f"{record['question_type']} (abstention)"
        else:
            assert question.category == base and question.category_name == record["question_type"]
            assert question.evidence, qid  # every generated non-abstention question has evidence
    split = split_by_conversation(dataset, seed=0)
    assert sum(len(part.questions) for part in (split.train, split.dev, split.test)) == len(records)


def test_turn_ids_are_usable_graph_variable_names(fixture_file: Path) -> None:
    dataset = load_longmemeval(fixture_file)
    turn_ids = {turn.id for conversation in dataset.conversations for turn in conversation.turns}
    assert all(re.fullmatch(r"D\d+:\d+", turn_id) for turn_id in turn_ids)


def test_abstention_questions_keep_their_gold_and_their_type() -> None:
    record = generate_longmemeval(seed=0, n_questions=1)[0]
    record = {**record, "question_id": "7161e7e2_abs", "question_type": "temporal-reasoning",
              "answer": "The information provided is not enough. You mentioned the trip but not its date."}
    plain = {**record, "question_id": "7161e7e2"}
    dataset = parse_longmemeval([record, plain], "mem")
    abstention, normal = dataset.questions
    assert abstention.gold == record["answer"]
    assert (abstention.category, abstention.category_label) == (15, "temporal-reasoning (abstention)")
    assert (normal.category, normal.category_label) == (5, "temporal-reasoning")
    assert abstention.category in abstention_categories() and normal.category not in abstention_categories()
    tagged = parse_longmemeval([{**plain, "question_type": "temporal-reasoning_abs"}], "mem").questions[0]
    assert tagged.category == 5  # a type tag alone does not make an abstention question; the id does


def test_question_date_can_stay_out_of_the_text(records: list[dict]) -> None:
    dataset = parse_longmemeval(records[:2], "mem", question_date_in_text=False)
    assert [q.text for q in dataset.questions] == [r["question"] for r in records[:2]]


def test_missing_has_answer_and_numeric_answers_are_accepted(records: list[dict]) -> None:
    record = json.loads(json.dumps(records[0]))
    for session in record["haystack_sessions"]:
        for turn in session:
            del turn["has_answer"]
    record["answer"] = 3
    question = parse_longmemeval([record], "mem").questions[0]
    assert question.evidence == () and question.gold == "3"


def test_unknown_answer_sessions_are_logged(records: list[dict], caplog) -> None:
    record = {**records[0], "answer_session_ids": ["answer_nowhere_9"]}
    parse_longmemeval([record], "mem")
    assert "answer_nowhere_9" in caplog.text


def broken(records: list[dict], change) -> list[dict]:
    copy = json.loads(json.dumps(records[:3]))
    change(copy[1])
    return copy


@pytest.mark.parametrize(
    ("change", "field", "problem"),
    [
        (lambda r: r.pop("question"), "question", "Field required"),
        (lambda r: r.update(question="  "), "question", "empty question"),
        (lambda r: r.update(question_type="open-domain"), "question_type", "unknown question type"),
        (lambda r: r.update(question_date="yesterday"), "question_date", "unparsable date"),
        (lambda r: r["haystack_dates"].pop(), "haystack_dates", "entries for"),
        (lambda r: r["haystack_dates"].__setitem__(1, "2023-05-01"), "haystack_dates[1]", "unparsable date"),
        (lambda r: r["haystack_sessions"][1][2].update(role="system"), "haystack_sessions[1][2].role",
         "unknown role"),
        (lambda r: r["haystack_sessions"][0][0].pop("content"), "haystack_sessions[0][0].content", "Field required"),
        (lambda r: r.update(answer=""), "answer", "empty answer"),
        (lambda r: r.update(haystack_sessions="nope"), "haystack_sessions", "valid list"),
    ],
)
def test_malformed_records_name_file_record_and_field(tmp_path, records, change, field, problem) -> None:
    path = tmp_path / "bad.json"
    data = broken(records, change)
    path.write_text(json.dumps(data))
    with pytest.raises(DataError) as info:
        load_longmemeval(path)
    error = info.value
    assert error.source == str(path) and error.field == field and problem in error.problem
    assert error.record == f"question {data[1]['question_id']!r} (#1)"
    assert str(path) in str(error) and field in str(error)


def test_file_level_problems(tmp_path, records) -> None:
    with pytest.raises(DataError, match="cannot read file"):
        load_longmemeval(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("[{")
    with pytest.raises(DataError, match="invalid JSON"):
        load_longmemeval(bad)
    bad.write_text(json.dumps({"question_id": "x"}))
    with pytest.raises(DataError, match="expected a JSON list"):
        load_longmemeval(bad)
    bad.write_text(json.dumps([records[0], records[0]]))
    with pytest.raises(DataError, match="duplicate question id") as info:
        load_longmemeval(bad)
    assert info.value.record == f"question {records[0]['question_id']!r} (#1)"
    bad.write_text(json.dumps([records[0], 7]))
    with pytest.raises(DataError) as info:
        load_longmemeval(bad)
    assert info.value.record == "record #1"


# --------------------------------------------------------------------------- hub path


def test_hub_loader_uses_the_same_parser_through_datasets(fixture_file: Path) -> None:
    through_hub = load_longmemeval_hub("json", data_files=str(fixture_file), split="train")
    direct = load_longmemeval(fixture_file)
    assert through_hub.conversations == direct.conversations
    assert through_hub.questions == direct.questions


# --------------------------------------------------------------------------- config and run


def composed(*overrides: str):
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        return compose("run", overrides=list(overrides))


def test_config_dispatch(fixture_file: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MEMTRACE_LONGMEMEVAL", str(fixture_file))
    from omegaconf import OmegaConf

    plain = OmegaConf.to_container(composed("dataset=longmemeval").dataset, resolve=True)
    assert plain["kind"] == "longmemeval" and plain["path"] == str(fixture_file) and plain["hub"] is None
    assert plain["exclude_categories"] == []
    assert len(load_dataset(plain).questions) == 14
    relative = {**plain, "path": fixture_file.name}
    assert load_dataset(relative, base_dir=fixture_file.parent).name == "longmemeval_fixture"
    with pytest.raises(DataError, match="LongMemEval file not found"):
        load_dataset({**plain, "path": str(tmp_path / "nope.json")})


@pytest.mark.slow
def test_memtrace_run_on_the_longmemeval_fixture(fixture_file: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # the run saves its results below the working directory
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    cfg = composed(
        "dataset=longmemeval", f"dataset.path={fixture_file}", f"tracking.uri={uri}", "tracking.experiment=lme",
        f"cache_dir={tmp_path}/cache", "workers=2", "run_name=lme-fixture",
    )
    outcome = run(cfg)
    client = MlflowClient(tracking_uri=uri)
    found = client.get_run(outcome["run_id"])
    metrics = found.data.metrics
    assert metrics["eval/n"] == 14  # nothing excluded by default
    assert 0.0 <= metrics["eval/judge_accuracy"] <= 1.0
    assert "eval/cat/temporal_reasoning/judge_accuracy" in metrics
    assert any(key.startswith("eval/cat/") and "abstention" in key for key in metrics)
    assert found.data.tags["memtrace.dataset"] == "longmemeval_fixture"
    graphs = client.list_artifacts(outcome["run_id"], "graphs")
    assert len(graphs) == 14
    assert format_date  # the date writer is public for fixture authors
