"""LoCoMo into the typed records of `pipeline.core.records`.

`parse_locomo` is the one parser behind `load_locomo` (a file) and `load_locomo_hub`: pydantic raw records
(a `DataError` names file, record and field), messy evidence ids cleaned, unknown evidence dropped with a
warning, an empty dataset refused (`require_content`). No splitting (`pipeline.data.splits`), no network or
caching of its own, no printing.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from memtrace_loop.pipeline.core.config import require_categories, require_text
from memtrace_loop.pipeline.core.records import CATEGORY_NAMES, Conversation, Dataset, Question, Turn
from memtrace_loop.pipeline.data.reader import DataError, hub_source, read_file_rows, read_hub_rows
from memtrace_loop.pipeline.data.spec import DatasetSpec, resolve_path
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

logger = logging.getLogger(__name__)

ADVERSARIAL_CATEGORY = 5
ADVERSARIAL_GOLD = "Not mentioned in the conversation"

_SESSION_KEY = re.compile(r"session_(\d+)")
_DIA_ID = re.compile(r"D\s*(\d+)\s*:\s*(\d+)")
_DATE_TIME = re.compile(
    r"(\d{1,2}):(\d{2})\s*([ap])\.?\s*m\.?\s+on\s+(\d{1,2})\s+([A-Za-z]+)\.?,?\s+(\d{4})", re.IGNORECASE
)
_MONTH_NAMES = (
    "january", "february", "march", "april", "may", "june", "july", "august", "september", "october", "november",
    "december",
)
_MONTHS = {name: number for number, month in enumerate(_MONTH_NAMES, 1) for name in (month, month[:3])}
_MONTHS["sept"] = 9
_CAPTION_PREFIX = re.compile(r"^\s*an?\s+(photo|photograph|photography|picture|image)\s+of\s+", re.IGNORECASE)


def require_content(dataset: Dataset, source: str) -> Dataset:
    """`dataset` itself; a `DataError` naming `source` when it has no conversations or no questions."""
    if not dataset.conversations:
        raise DataError(source, "the dataset has no conversations (an empty list of records)")
    if not dataset.questions:
        raise DataError(source, f"the dataset has no questions ({len(dataset.conversations)} conversation(s))")
    return dataset


# --------------------------------------------------------------------------- raw LoCoMo records


class _Raw(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _RawTurn(_Raw):
    speaker: str
    dia_id: str
    text: str
    blip_caption: str | None = None


class _RawQA(_Raw):
    question: str
    category: int
    answer: str | int | float | None = None
    adversarial_answer: str | int | float | None = None
    evidence: list[str] = []

    @field_validator("category")
    @classmethod
    def _known_category(cls, value: int) -> int:
        if value not in CATEGORY_NAMES:
            raise ValueError(f"unknown category {value}; expected one of {sorted(CATEGORY_NAMES)}")
        return value


class _RawSample(_Raw):
    sample_id: str
    conversation: dict[str, Any]
    qa: list[Any]


ModelT = TypeVar("ModelT", bound=BaseModel)


def validate_record(
    model: type[ModelT], item: object, source: str, record: str | None, where: str = "",
    error_type: type[DataError] = DataError,
) -> ModelT:
    """`item` parsed as `model`, or an `error_type` naming the source, the record and the field (the first
    pydantic error, prefixed with `where`)."""
    try:
        return model.model_validate(item)
    except ValidationError as error:
        first = error.errors()[0]
        path = ".".join(str(part) for part in first["loc"]) or "<record>"
        raise error_type(source, first["msg"], record, f"{where}.{path}" if where else path) from error


# --------------------------------------------------------------------------- small parsers


def normalize_dia_id(raw: str) -> str | None:
    """`"D30:05"` -> `"D30:5"`, `" D3 : 7 "` -> `"D3:7"`; None when `raw` is not `D<int>:<int>`."""
    match = _DIA_ID.fullmatch(raw.strip())
    if match is None:
        return None
    return f"D{int(match.group(1))}:{int(match.group(2))}"


def clean_evidence(entries: Sequence[str]) -> tuple[tuple[str, ...], int]:
    """Split `"D8:6; D9:17"`-style entries, normalize ids, drop malformed ones (a bare `"D"`)."""
    ids: list[str] = []
    malformed = 0
    for entry in entries:
        for piece in re.split(r"[;,]", entry):
            if not piece.strip():
                continue
            dia_id = normalize_dia_id(piece)
            if dia_id is None:
                malformed += 1
            elif dia_id not in ids:
                ids.append(dia_id)
    return tuple(ids), malformed


def parse_session_date(text: str) -> str:
    """`"1:56 pm on 8 May, 2023"` -> `"2023-05-08T13:56"`; ValueError when unparsable."""
    match = _DATE_TIME.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"unparsable date-time {text!r}; expected like '1:56 pm on 8 May, 2023'")
    hour, minute, half, day, month_name, year = match.groups()
    month = _MONTHS.get(month_name.lower())
    if month is None:
        raise ValueError(f"unknown month {month_name!r} in {text!r}")
    hour12 = int(hour)
    if not 1 <= hour12 <= 12:
        raise ValueError(f"hour {hour12} out of range in {text!r}")
    hour24 = hour12 % 12 + (12 if half.lower() == "p" else 0)
    moment = datetime(int(year), month, int(day), hour24, int(minute))  # ValueError on 31 Feb etc.
    return moment.isoformat(timespec="minutes")


def _turn_text(raw: _RawTurn) -> str:
    if not raw.blip_caption or not raw.blip_caption.strip():
        return raw.text
    caption = _CAPTION_PREFIX.sub("", raw.blip_caption.strip())
    return f"{raw.text} [shares a photo of {caption}]".strip()


# --------------------------------------------------------------------------- LoCoMo


def _parse_conversation(sample_id: str, record: str, raw: dict[str, Any], source: str) -> Conversation:
    speakers: list[str] = []
    for key in ("speaker_a", "speaker_b"):
        value = raw.get(key)
        if not isinstance(value, str) or not value.strip():
            raise DataError(source, "missing or not a non-empty string", record, f"conversation.{key}")
        speakers.append(value)

    session_numbers = sorted(int(m.group(1)) for key in raw if (m := _SESSION_KEY.fullmatch(key)))
    if not session_numbers:
        raise DataError(source, "no session_N lists", record, "conversation")
    turns: list[Turn] = []
    seen: set[str] = set()
    for number in session_numbers:
        session_key, date_key = f"session_{number}", f"session_{number}_date_time"
        session = raw[session_key]
        if not isinstance(session, list):
            raise DataError(
                source, f"expected a list of turns, got {type(session).__name__}", record,
                f"conversation.{session_key}",
            )
        date_text = raw.get(date_key)
        if not isinstance(date_text, str):
            raise DataError(source, "missing session date-time", record, f"conversation.{date_key}")
        try:
            time = parse_session_date(date_text)
        except ValueError as error:
            raise DataError(source, str(error), record, f"conversation.{date_key}") from error
        for index, item in enumerate(session):
            where = f"conversation.{session_key}[{index}]"
            turn = validate_record(_RawTurn, item, source, record, where)
            dia_id = normalize_dia_id(turn.dia_id) or turn.dia_id.strip()
            if not dia_id:
                raise DataError(source, "empty dialog id", record, f"{where}.dia_id")
            if dia_id in seen:
                raise DataError(source, f"duplicate dialog id {dia_id!r}", record, f"{where}.dia_id")
            seen.add(dia_id)
            turns.append(Turn(id=dia_id, speaker=turn.speaker, text=_turn_text(turn), session=number, time=time))
    if not turns:
        raise DataError(source, "no turns in any session", record, "conversation")
    return Conversation(id=sample_id, speakers=tuple(speakers), turns=tuple(turns))


def _parse_question(
    sample_id: str, record: str, index: int, item: object, turn_ids: set[str], source: str
) -> tuple[Question, list[str], int]:
    """One question, plus the evidence ids it named that the conversation lacks, and malformed count."""
    where = f"qa[{index}]"
    raw = validate_record(_RawQA, item, source, record, where)
    if not raw.question.strip():
        raise DataError(source, "empty question", record, f"{where}.question")
    if raw.category == ADVERSARIAL_CATEGORY:
        gold = ADVERSARIAL_GOLD  # the adversarial answer is the trap, never the gold
    else:
        gold = "" if raw.answer is None else str(raw.answer).strip()
        if not gold:
            raise DataError(source, "missing or empty answer", record, f"{where}.answer")
    evidence, malformed = clean_evidence(raw.evidence)
    unknown = [dia_id for dia_id in evidence if dia_id not in turn_ids]
    question = Question(
        id=f"{sample_id}:q{index}", conversation_id=sample_id, text=raw.question.strip(), gold=gold,
        category=raw.category, evidence=tuple(dia_id for dia_id in evidence if dia_id in turn_ids),
    )
    return question, unknown, malformed


def parse_locomo(samples: object, source: str) -> Dataset:
    """Parse already-decoded LoCoMo JSON (a list of samples); `source` names it in errors and the name."""
    if not isinstance(samples, list):
        raise DataError(source, f"expected a JSON list of samples, got {type(samples).__name__}")
    conversations: list[Conversation] = []
    questions: list[Question] = []
    seen_ids: set[str] = set()
    for position, item in enumerate(samples):
        record = f"sample #{position}"
        if isinstance(item, dict) and isinstance(item.get("sample_id"), str):
            record = f"sample {item['sample_id']!r} (#{position})"
        sample = validate_record(_RawSample, item, source, record)
        if sample.sample_id in seen_ids:
            raise DataError(source, "duplicate sample id", record, "sample_id")
        seen_ids.add(sample.sample_id)
        conversation = _parse_conversation(sample.sample_id, record, sample.conversation, source)
        turn_ids = {turn.id for turn in conversation.turns}
        unknown_total: list[str] = []
        malformed_total = 0
        for index, qa in enumerate(sample.qa):
            question, unknown, malformed = _parse_question(sample.sample_id, record, index, qa, turn_ids, source)
            questions.append(question)
            unknown_total.extend(f"{question.id}->{dia_id}" for dia_id in unknown)
            malformed_total += malformed
        if unknown_total:
            logger.warning(
                "%s: %s: dropped %d evidence id(s) not in the conversation: %s", source, record, len(unknown_total),
                ", ".join(unknown_total),
            )
        if malformed_total:
            logger.info("%s: %s: dropped %d malformed evidence entries", source, record, malformed_total)
        if not sample.qa:
            logger.warning("%s: %s: no questions (field 'qa' is empty): the conversation is never asked about",
                           source, record)
        conversations.append(conversation)
    return require_content(
        Dataset(name=Path(source).stem or source, conversations=tuple(conversations), questions=tuple(questions)),
        source,
    )


LOCOMO_COLUMNS = ("sample_id", "conversation", "qa", "event_summary", "observation", "session_summary")


def load_locomo(path: str | Path) -> Dataset:
    """Read a LoCoMo JSON file (through `datasets`: `pipeline.data.reader`); `Dataset.name` is the file stem."""
    return parse_locomo(read_file_rows(path, LOCOMO_COLUMNS, "samples"), str(path))


def load_locomo_hub(
    name: str, data_files: str | list[str] | None = None, split: str = "train", revision: str | None = None
) -> Dataset:
    """LoCoMo from a Hugging Face dataset id (or a local folder laid out like one); `Dataset.name` is the stem
    of `data_files` (else the dataset's last name part)."""
    source = hub_source(name, data_files)
    dataset = parse_locomo(read_hub_rows(name, LOCOMO_COLUMNS, data_files, split, revision), source)
    stem = Path(data_files).stem if isinstance(data_files, str) else Path(name.rstrip("/")).name
    return dataclasses.replace(dataset, name=stem)


@dataclass(frozen=True)
class LoCoMoConfig:
    """LoCoMo in the benchmark's own layout, from a file (e.g. locomo10.json) or a Hugging Face dataset (`hub`)."""

    path: str | None = None
    hub: str | None = None  # a hub dataset id (or a local folder laid out like one); replaces `path`
    hub_file: str | None = None  # the data file in the hub dataset (e.g. locomo10.json); None: its default files
    hub_split: str = "train"
    exclude_categories: tuple[int, ...] = (5,)  # LoCoMo protocol: adversarial questions are not in the overall score

    def __post_init__(self) -> None:
        require_text(self, "path", "hub", "hub_file", "hub_split")
        require_categories(self, known=CATEGORY_NAMES)
        if self.path is None and self.hub is None:
            raise ValueError("path must name a LoCoMo file (or set dataset.hub=<hugging face dataset>)")


def load_configured(config: LoCoMoConfig, base_dir: Path) -> Dataset:
    if config.hub:
        return load_locomo_hub(config.hub, data_files=config.hub_file, split=config.hub_split)
    path = resolve_path(str(config.path), base_dir)
    if not path.exists():
        raise DataError(str(path), "LoCoMo file not found (set dataset.path=... or MEMTRACE_LOCOMO)")
    return load_locomo(path)


SPEC = DatasetSpec(LoCoMoConfig, load_configured)
