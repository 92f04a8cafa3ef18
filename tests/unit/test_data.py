"""Tests for pipeline.data: the LoCoMo loader (real subset, hand-written fixture, broken files) and splits."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
from memtrace_loop.pipeline.core.records import Conversation, Dataset, Question, Turn
from memtrace_loop.pipeline.data.locomo import (
    ADVERSARIAL_GOLD,
    DataError,
    clean_evidence,
    load_locomo,
    normalize_dia_id,
    parse_locomo,
    parse_session_date,
)
from memtrace_loop.pipeline.data.splits import EmptySplitError, Split, split_by_conversation

from tests.support.paths import FIXTURES, LOCOMO
from tests.support.requires import missing_locomo, requires

FIXTURE = FIXTURES / "locomo_mini.json"

needs_locomo = requires(missing_locomo())


# --------------------------------------------------------------------------- small parsers


@pytest.mark.parametrize(
    ("text", "iso"),
    [
        ("1:56 pm on 8 May, 2023", "2023-05-08T13:56"),
        ("12:48 am on 1 February, 2023", "2023-02-01T00:48"),
        ("12:00 pm on 15 January, 2022", "2022-01-15T12:00"),
        ("9:05 AM on 3 Mar, 2022", "2022-03-03T09:05"),
        ("10:31 am on 13 October, 2023", "2023-10-13T10:31"),
    ],
)
def test_parse_session_date(text: str, iso: str) -> None:
    assert parse_session_date(text) == iso


@pytest.mark.parametrize(
    "text",
    [
        "",
        "sometime in spring",
        "13:10 pm on 8 May, 2023",
        "1:10 pm on 31 February, 2023",
        "1:10 pm on 8 Mai, 2023",
    ],
)
def test_parse_session_date_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_session_date(text)


def test_clean_evidence_splits_pads_and_drops() -> None:
    ids, malformed = clean_evidence(["D8:6; D9:17", "D", "D30:05", " D3 : 7 ", "D8:6", ""])
    assert ids == ("D8:6", "D9:17", "D30:5", "D3:7")
    assert malformed == 1  # the bare "D"; the empty entry is ignored, the repeated D8:6 deduplicated
    assert normalize_dia_id("D30:05") == "D30:5"
    assert normalize_dia_id("D") is None
    assert normalize_dia_id("D1") is None


# --------------------------------------------------------------------------- hand-written fixture


@pytest.fixture
def mini() -> Dataset:
    return load_locomo(FIXTURE)


def test_fixture_conversations_and_turn_order(mini: Dataset) -> None:
    assert mini.name == "locomo_mini"
    assert [c.id for c in mini.conversations] == ["mini-1", "mini-2"]
    first, second = mini.conversations
    assert first.speakers == ("Ada", "Bruno")
    # session 2 comes first in the file; the date-only session_3 is skipped
    assert [t.id for t in first.turns] == ["D1:1", "D1:2", "D1:3", "D1:4", "D2:1", "D2:2", "D2:3"]
    assert [t.session for t in first.turns] == [1, 1, 1, 1, 2, 2, 2]
    assert first.turns[0].time == "2022-03-03T09:05"
    assert first.turns[-1].time == "2022-04-12T16:30"
    # numeric session order: 1, 2, 10 (not 1, 10, 2)
    assert [t.session for t in second.turns] == [1, 1, 2, 2, 10]
    assert second.turns[-1] == Turn(
        id="D10:1",
        speaker="Chen",
        text="I visited her there last weekend.",
        session=10,
        time="2022-02-02T19:00",
    )


def test_fixture_image_caption_is_appended(mini: Dataset) -> None:
    turn = mini.conversations[0].turn_by_id()["D2:3"]
    assert (
        turn.text == "Three already? Your stall must be popular. [shares a photo of a red kite above a beach]"
    )
    assert mini.conversations[0].turn_by_id()["D2:2"].text.endswith("Saturday.")


def test_fixture_questions(mini: Dataset) -> None:
    questions = {q.id: q for q in mini.questions}
    assert list(questions) == [f"mini-1:q{i}" for i in range(6)] + ["mini-2:q0", "mini-2:q1"]
    assert questions["mini-1:q0"] == Question(
        id="mini-1:q0",
        conversation_id="mini-1",
        text="When did Ada start pottery classes?",
        gold="The week of 3 March 2022",
        category=2,
        evidence=("D1:3",),
    )
    assert questions["mini-1:q1"].evidence == ("D1:2", "D2:1")  # "D1:2; D2:1" split in two
    assert questions["mini-1:q2"].gold == "3"  # int answer -> str
    assert questions["mini-1:q2"].evidence == ("D2:2",)  # "D2:02" unpadded
    adversarial = questions["mini-1:q3"]
    assert adversarial.category == 5
    assert adversarial.gold == ADVERSARIAL_GOLD == "Not mentioned in the conversation"
    assert adversarial.evidence == ("D1:4",)  # bare "D" dropped
    assert questions["mini-1:q4"].evidence == ("D2:3",)  # spaces stripped; unknown D9:9 dropped
    assert questions["mini-1:q5"].evidence == ()
    assert questions["mini-2:q1"].evidence == ("D10:1", "D2:2")


def test_unknown_evidence_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="memtrace_loop.pipeline.data.locomo"):
        load_locomo(FIXTURE)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "dropped 1 evidence id" in warnings[0]
    assert "mini-1:q4->D9:9" in warnings[0]
    assert "locomo_mini.json" in warnings[0]


def test_parse_locomo_in_memory_source() -> None:
    samples = json.loads(FIXTURE.read_text())
    dataset = parse_locomo(samples, source="inline")
    assert dataset.name == "inline"
    assert len(dataset.questions) == 8


# --------------------------------------------------------------------------- broken files


def _write(tmp_path: Path, name: str, samples: object) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(samples))
    return path


def _samples() -> list[dict]:
    return json.loads(FIXTURE.read_text())


def _error(path: Path) -> str:
    with pytest.raises(DataError) as info:
        load_locomo(path)
    assert isinstance(info.value, ValueError)
    return str(info.value)


def test_bad_json(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('[{"sample_id": "x",')
    message = _error(path)
    assert "broken.json" in message
    assert "invalid JSON" in message and "line 1" in message


def test_missing_file(tmp_path: Path) -> None:
    message = _error(tmp_path / "nowhere.json")
    assert "nowhere.json" in message and "cannot read" in message


def test_wrong_top_level_layout(tmp_path: Path) -> None:
    message = _error(_write(tmp_path, "layout.json", {"sample_id": "mini-1"}))
    assert "layout.json" in message and "expected a JSON list of samples" in message


def test_missing_conversation(tmp_path: Path) -> None:
    samples = _samples()
    del samples[0]["conversation"]
    message = _error(_write(tmp_path, "noconv.json", samples))
    assert "noconv.json" in message
    assert "mini-1" in message
    assert "field 'conversation'" in message
    assert "required" in message.lower()


def test_turn_missing_text(tmp_path: Path) -> None:
    samples = _samples()
    del samples[1]["conversation"]["session_2"][1]["text"]
    message = _error(_write(tmp_path, "notext.json", samples))
    assert "notext.json" in message
    assert "mini-2" in message
    assert "conversation.session_2[1].text" in message


def test_unparsable_session_date(tmp_path: Path) -> None:
    samples = _samples()
    samples[0]["conversation"]["session_1_date_time"] = "sometime in spring"
    message = _error(_write(tmp_path, "baddate.json", samples))
    assert "baddate.json" in message
    assert "mini-1" in message
    assert "conversation.session_1_date_time" in message
    assert "sometime in spring" in message


def test_session_without_date(tmp_path: Path) -> None:
    samples = _samples()
    del samples[1]["conversation"]["session_10_date_time"]
    message = _error(_write(tmp_path, "nodate.json", samples))
    assert "nodate.json" in message and "mini-2" in message and "session_10_date_time" in message


def test_question_missing_answer(tmp_path: Path) -> None:
    samples = _samples()
    del samples[1]["qa"][1]["answer"]
    message = _error(_write(tmp_path, "noanswer.json", samples))
    assert "noanswer.json" in message and "mini-2" in message and "qa[1].answer" in message


def test_question_bad_category(tmp_path: Path) -> None:
    samples = _samples()
    samples[0]["qa"][2]["category"] = 9
    message = _error(_write(tmp_path, "badcat.json", samples))
    assert "badcat.json" in message and "mini-1" in message and "qa[2].category" in message


def test_duplicate_dialog_id(tmp_path: Path) -> None:
    samples = _samples()
    samples[0]["conversation"]["session_2"][0]["dia_id"] = "D1:1"
    message = _error(_write(tmp_path, "dup.json", samples))
    assert "dup.json" in message and "mini-1" in message and "conversation.session_2[0].dia_id" in message


def test_data_error_parts() -> None:
    error = DataError("f.json", "is wrong", record="sample 'x' (#0)", field="qa[1].answer")
    assert str(error) == "f.json: sample 'x' (#0): field 'qa[1].answer': is wrong"
    assert (error.source, error.record, error.field, error.problem) == (
        "f.json",
        "sample 'x' (#0)",
        "qa[1].answer",
        "is wrong",
    )


# --------------------------------------------------------------------------- real LoCoMo subset


@pytest.fixture(scope="module")
def locomo() -> Dataset:
    return load_locomo(LOCOMO)


@needs_locomo
def test_locomo_counts(locomo: Dataset) -> None:
    assert locomo.name == "locomo2"
    counts = {c.id: (len(c.turns), len(locomo.questions_for(c.id))) for c in locomo.conversations}
    assert counts == {"conv-26": (419, 199), "conv-30": (369, 105)}


@needs_locomo
def test_locomo_turns_and_dates(locomo: Dataset) -> None:
    conv26, conv30 = locomo.conversations
    assert conv26.speakers == ("Caroline", "Melanie")
    assert conv30.speakers == ("Jon", "Gina")
    assert conv26.turns[0].id == "D1:1" and conv26.turns[0].time == "2023-05-08T13:56"
    assert conv30.turns[0].time == "2023-01-20T16:04"
    for conversation in locomo.conversations:
        sessions = [t.session for t in conversation.turns]
        assert sessions == sorted(sessions)
        assert len(set(sessions)) == 19
        assert all(
            re.fullmatch(r"D\d+:\d+", t.id) and t.id.startswith(f"D{t.session}:") for t in conversation.turns
        )
        assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d", t.time) for t in conversation.turns)
    # image turns carry their caption once, without "a photo of a photo of"
    assert sum("[shares a photo of " in t.text for t in conv26.turns) == 116
    assert sum("[shares a photo of " in t.text for t in conv30.turns) == 72
    assert not any("a photo of a photo of" in t.text for c in locomo.conversations for t in c.turns)


@needs_locomo
def test_locomo_questions(locomo: Dataset) -> None:
    questions = {q.id: q for q in locomo.questions}
    assert questions["conv-26:q0"].category == 2
    assert questions["conv-26:q0"].evidence == ("D1:3",)
    assert questions["conv-26:q37"].evidence == ("D8:6", "D9:17")  # raw entry "D8:6; D9:17"
    assert questions["conv-26:q30"].evidence == ()
    assert questions["conv-30:q0"].conversation_id == "conv-30"
    assert all(isinstance(q.gold, str) and q.gold for q in locomo.questions)
    turn_ids = {c.id: set(c.turn_by_id()) for c in locomo.conversations}
    assert all(e in turn_ids[q.conversation_id] for q in locomo.questions for e in q.evidence)
    # conv-26: 249 clean entries + the split one gives 2; conv-30: 131 clean entries
    assert sum(len(q.evidence) for q in locomo.questions) == 249 + 2 + 131
    categories = [q.category for q in locomo.questions]
    assert {c: categories.count(c) for c in range(1, 6)} == {1: 43, 2: 63, 3: 13, 4: 114, 5: 71}


@needs_locomo
def test_locomo_adversarial_gold(locomo: Dataset) -> None:
    raw = json.loads(LOCOMO.read_text())
    adversarial_answers = {
        f"{sample['sample_id']}:q{i}": str(qa["adversarial_answer"])
        for sample in raw
        for i, qa in enumerate(sample["qa"])
        if qa["category"] == 5
    }
    assert len(adversarial_answers) == 71
    for qid, trap in adversarial_answers.items():
        question = next(q for q in locomo.questions if q.id == qid)
        assert question.gold == ADVERSARIAL_GOLD
        assert question.gold != trap


@needs_locomo
def test_locomo_loads_without_warnings(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="memtrace_loop.pipeline.data.locomo"):
        load_locomo(LOCOMO)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@needs_locomo
def test_locomo_split_two_conversations(locomo: Dataset) -> None:
    split = split_by_conversation(locomo)
    assert len(split.train.conversations) == 1
    assert len(split.dev.conversations) == 1
    assert split.test.conversations == () and split.test.questions == ()


# --------------------------------------------------------------------------- splits


def _synthetic(n: int) -> Dataset:
    conversations = tuple(
        Conversation(
            id=f"c{i}",
            speakers=("A", "B"),
            turns=(Turn(id="D1:1", speaker="A", text=f"hello {i}", session=1, time="2024-01-01T10:00"),),
        )
        for i in range(n)
    )
    questions = tuple(
        Question(
            id=f"c{i}:q{j}", conversation_id=f"c{i}", text="q?", gold="a", category=4, evidence=("D1:1",)
        )
        for i in range(n)
        for j in range(3)
    )
    return Dataset(name="synth", conversations=conversations, questions=questions)


def _ids(dataset: Dataset) -> list[str]:
    return [c.id for c in dataset.conversations]


def test_split_is_deterministic_and_disjoint() -> None:
    dataset = _synthetic(10)
    split = split_by_conversation(dataset, seed=3)
    again = split_by_conversation(dataset, seed=3)
    assert split == again
    parts = [_ids(split.train), _ids(split.dev), _ids(split.test)]
    assert [len(p) for p in parts] == [6, 2, 2]
    flat = [cid for part in parts for cid in part]
    assert sorted(flat) == sorted(_ids(dataset)) and len(set(flat)) == 10
    for part in (split.train, split.dev, split.test):
        assert {q.conversation_id for q in part.questions} == set(_ids(part))
        assert len(part.questions) == 3 * len(part.conversations)
    assert split.train.name == "synth:train" and split.test.name == "synth:test"
    others = [split_by_conversation(dataset, seed=s) for s in range(4, 9)]
    assert any(_ids(o.test) != _ids(split.test) for o in others)


@pytest.mark.parametrize(("n", "sizes"), [(3, [1, 1, 1]), (4, [2, 1, 1]), (2, [1, 1, 0]), (1, [1, 0, 0])])
def test_split_sizes(n: int, sizes: list[int]) -> None:
    split = split_by_conversation(_synthetic(n))
    assert [len(getattr(split, name).conversations) for name in ("train", "dev", "test")] == sizes
    for name, size in zip(("train", "dev", "test"), sizes, strict=True):
        if size:
            assert split.select(name) is getattr(split, name)
        else:  # an empty split is refused, naming it and the fractions
            with pytest.raises(EmptySplitError, match=rf"split={name}: .*splits\.fractions=\[0\.5, 0\.25, 0\.25\]"):
                split.select(name)


def test_split_zero_fraction_gives_empty_split() -> None:
    split = split_by_conversation(_synthetic(5), fractions=(0.8, 0.2, 0.0))
    assert [len(s.conversations) for s in (split.train, split.dev, split.test)] == [4, 1, 0]


@pytest.mark.parametrize("fractions", [(0.5, 0.5, 0.5), (0.0, 0.5, 0.5), (1.2, -0.1, -0.1)])
def test_split_rejects_bad_fractions(fractions: tuple[float, float, float]) -> None:
    with pytest.raises(ValueError):
        split_by_conversation(_synthetic(5), fractions=fractions)


def test_split_select() -> None:
    split = split_by_conversation(_synthetic(4))
    assert isinstance(split, Split)
    assert split.select("dev") is split.dev
    with pytest.raises(ValueError, match="unknown split"):
        split.select("validation")
