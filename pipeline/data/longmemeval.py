"""LongMemEval (one record per question, each with its own haystack) as a `Dataset`.

`parse_longmemeval` is the one parser behind `load_longmemeval` (a local file) and `load_longmemeval_hub`:
each record is its own `Conversation` with LoCoMo-style turn ids `D<session>:<turn>`, evidence from
`has_answer`, a category per question type (abstentions apart, `ABSTENTION_OFFSET`) and the question date
appended to the question. Pydantic raw records; a `DataError` names source, record and field. No network by
default, no caching of its own, no printing.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

from memtrace_loop.pipeline.core.config import require_categories, require_text
from memtrace_loop.pipeline.core.records import Conversation, Dataset, Question, Turn
from memtrace_loop.pipeline.data.locomo import DataError, require_content, validate_record
from memtrace_loop.pipeline.data.reader import hub_source, read_file_rows, read_hub_rows
from memtrace_loop.pipeline.data.spec import DatasetSpec, resolve_path
from pydantic import BaseModel, ConfigDict

logger = logging.getLogger(__name__)

QUESTION_TYPES: tuple[str, ...] = (
    "single-session-user", "single-session-assistant", "single-session-preference", "multi-session",
    "temporal-reasoning", "knowledge-update",
)
CATEGORY_BY_TYPE: Mapping[str, int] = MappingProxyType({name: n for n, name in enumerate(QUESTION_TYPES, 1)})
ABSTENTION_OFFSET = 10
ABSTENTION_MARK = "_abs"
SPEAKERS: tuple[str, str] = ("user", "assistant")
HUB_NAME = "xiaowu0162/longmemeval-cleaned"
HUB_VARIANT = "longmemeval_s_cleaned"
GENERATED_ABSTENTION_GOLD = "The information provided is not enough; it is not mentioned in the chat history."

_DATE = re.compile(r"(\d{4})/(\d{1,2})/(\d{1,2})\s*(?:\(\s*[A-Za-z]{3,9}\s*\))?\s*(\d{1,2}):(\d{2})")


def category_of(question_type: str, abstention: bool) -> tuple[int, str]:
    """(category number, category label) of a question type; KeyError for an unknown type."""
    number = CATEGORY_BY_TYPE[question_type]
    if abstention:
        return number + ABSTENTION_OFFSET, f"{question_type} (abstention)"
    return number, question_type


def abstention_categories() -> tuple[int, ...]:
    """Every abstention category number (e.g. for `exclude_categories`)."""
    return tuple(n + ABSTENTION_OFFSET for n in CATEGORY_BY_TYPE.values())


def parse_date(text: str) -> str:
    """`"2023/05/20 (Sat) 02:21"` -> `"2023-05-20T02:21"` (the weekday is not checked); ValueError if bad."""
    match = _DATE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"unparsable date {text!r}; expected like '2023/05/20 (Sat) 02:21'")
    year, month, day, hour, minute = (int(part) for part in match.groups())
    return datetime(year, month, day, hour, minute).isoformat(timespec="minutes")  # ValueError on 31 Feb


def format_date(moment: datetime) -> str:
    """The LongMemEval date format: `datetime(2023, 5, 20, 2, 21)` -> `"2023/05/20 (Sat) 02:21"`."""
    return moment.strftime("%Y/%m/%d (%a) %H:%M")


# --------------------------------------------------------------------------- raw records


class _Raw(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _RawTurn(_Raw):
    role: str
    content: str
    has_answer: bool | None = None


class _RawRecord(_Raw):
    question_id: str
    question_type: str
    question: str
    answer: str | int | float
    question_date: str
    haystack_dates: list[str]
    haystack_session_ids: list[str]
    haystack_sessions: list[list[Any]]
    answer_session_ids: list[str] = []


def _record_name(item: object, position: int) -> str:
    if isinstance(item, Mapping) and isinstance(item.get("question_id"), str):
        return f"question {item['question_id']!r} (#{position})"
    return f"record #{position}"


def _parse_record(
    item: object, record: str, source: str, date_in_text: bool
) -> tuple[Conversation, Question, list[str]]:
    """One record -> (conversation, question, answer session ids missing from the haystack)."""
    raw = validate_record(_RawRecord, item, source, record)
    qid = raw.question_id.strip()
    if not qid:
        raise DataError(source, "empty question id", record, "question_id")
    abstention = ABSTENTION_MARK in qid
    question_type = raw.question_type.strip().removesuffix(ABSTENTION_MARK)
    if question_type not in CATEGORY_BY_TYPE:
        raise DataError(
            source, f"unknown question type {raw.question_type!r}; expected one of {', '.join(QUESTION_TYPES)}",
            record, "question_type",
        )
    if not raw.question.strip():
        raise DataError(source, "empty question", record, "question")
    gold = str(raw.answer).strip()
    if not gold:
        raise DataError(source, "empty answer", record, "answer")
    try:
        question_time = parse_date(raw.question_date)
    except ValueError as error:
        raise DataError(source, str(error), record, "question_date") from error
    n_sessions = len(raw.haystack_sessions)
    for key in ("haystack_dates", "haystack_session_ids"):
        if len(getattr(raw, key)) != n_sessions:
            raise DataError(
                source, f"has {len(getattr(raw, key))} entries for {n_sessions} haystack sessions", record, key
            )

    turns: list[Turn] = []
    evidence: list[str] = []
    for s_index, (session, date_text) in enumerate(zip(raw.haystack_sessions, raw.haystack_dates, strict=True)):
        try:
            time = parse_date(date_text)
        except ValueError as error:
            raise DataError(source, str(error), record, f"haystack_dates[{s_index}]") from error
        for t_index, entry in enumerate(session):
            where = f"haystack_sessions[{s_index}][{t_index}]"
            turn = validate_record(_RawTurn, entry, source, record, where)
            if turn.role not in SPEAKERS:
                raise DataError(source, f"unknown role {turn.role!r}; expected 'user' or 'assistant'", record,
                                f"{where}.role")
            turn_id = f"D{s_index + 1}:{t_index + 1}"
            turns.append(Turn(id=turn_id, speaker=turn.role, text=turn.content, session=s_index + 1, time=time))
            if turn.has_answer:
                evidence.append(turn_id)

    if not turns:
        raise DataError(source, "no turns in any haystack session", record, "haystack_sessions")
    category, label = category_of(question_type, abstention)
    text = raw.question.strip()
    if date_in_text:
        text = f"{text} (question date: {question_time})"
    known_sessions = set(raw.haystack_session_ids)
    missing = [sid for sid in raw.answer_session_ids if sid not in known_sessions]
    conversation = Conversation(id=qid, speakers=SPEAKERS, turns=tuple(turns))
    question = Question(
        id=qid, conversation_id=qid, text=text, gold=gold, category=category, evidence=tuple(evidence),
        category_label=label,
    )
    return conversation, question, missing


def parse_longmemeval(records: Iterable[object], source: str, question_date_in_text: bool = True) -> Dataset:
    """Parse decoded LongMemEval records (a list of dicts); `source` names them in errors and is the name."""
    if isinstance(records, (str, bytes, Mapping)) or not isinstance(records, Iterable):
        raise DataError(source, f"expected a list of question records, got {type(records).__name__}")
    conversations: list[Conversation] = []
    questions: list[Question] = []
    seen: set[str] = set()
    for position, item in enumerate(records):
        record = _record_name(item, position)
        conversation, question, missing = _parse_record(item, record, source, question_date_in_text)
        if question.id in seen:
            raise DataError(source, "duplicate question id", record, "question_id")
        seen.add(question.id)
        if missing:
            logger.warning("%s: %s: answer session id(s) not in the haystack: %s", source, record, ", ".join(missing))
        conversations.append(conversation)
        questions.append(question)
    return require_content(
        Dataset(name=Path(source).stem or source, conversations=tuple(conversations), questions=tuple(questions)),
        source,
    )


LONGMEMEVAL_COLUMNS = (
    "question_id", "question_type", "question", "answer", "question_date", "haystack_dates",
    "haystack_session_ids", "haystack_sessions", "answer_session_ids",
)


def load_longmemeval(path: str | Path, question_date_in_text: bool = True) -> Dataset:
    """Read a LongMemEval JSON file (a list of records); `Dataset.name` is the file stem."""
    records = read_file_rows(path, LONGMEMEVAL_COLUMNS, "question records")
    return parse_longmemeval(records, str(path), question_date_in_text)


def load_longmemeval_hub(
    name: str = HUB_NAME, variant: str | None = HUB_VARIANT, split: str = "train",
    data_files: str | list[str] | None = None, revision: str | None = None, question_date_in_text: bool = True,
) -> Dataset:
    """LongMemEval through `datasets.load_dataset` (network, unless the files are cached or `name` is a local folder
    laid out like the hub repository)."""
    files = data_files if data_files is not None else (f"{variant}.json" if variant else None)
    rows = read_hub_rows(name, LONGMEMEVAL_COLUMNS, files, split, revision)
    dataset = parse_longmemeval(rows, hub_source(name, files), question_date_in_text)
    stem = variant if variant and data_files is None else Path(str(files if isinstance(files, str) else name)).stem
    return dataclasses.replace(dataset, name=stem)


@dataclass(frozen=True)
class LongMemEvalConfig:
    """LongMemEval in the benchmark's own layout, from a file or from the Hugging Face hub (`hub`)."""

    path: str | None = None
    hub: str | None = None  # e.g. xiaowu0162/longmemeval-cleaned (or a local folder laid out like it); replaces `path`
    variant: str | None = HUB_VARIANT  # hub file stem: longmemeval_s_cleaned | longmemeval_m_cleaned | ...
    hub_split: str = "train"
    question_date_in_text: bool = True  # append "(question date: ...)": records have no date field
    exclude_categories: tuple[int, ...] = ()  # 1-6 the question types, 11-16 their abstention questions

    def __post_init__(self) -> None:
        require_text(self, "path", "hub", "variant", "hub_split")
        require_categories(self, known=(*CATEGORY_BY_TYPE.values(), *abstention_categories()))
        if self.path is None and self.hub is None:
            raise ValueError("path must name a LongMemEval file (or set dataset.hub=<hugging face dataset>)")


def load_configured(config: LongMemEvalConfig, base_dir: Path) -> Dataset:
    if config.hub:
        return load_longmemeval_hub(
            config.hub, variant=config.variant, split=config.hub_split,
            question_date_in_text=config.question_date_in_text,
        )
    path = resolve_path(str(config.path), base_dir)
    if not path.exists():
        raise DataError(
            str(path), "LongMemEval file not found (set dataset.path=..., MEMTRACE_LONGMEMEVAL or dataset.hub=...)"
        )
    return load_longmemeval(path, question_date_in_text=config.question_date_in_text)


SPEC = DatasetSpec(LongMemEvalConfig, load_configured)
