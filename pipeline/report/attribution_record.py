"""Which attribution of a run's failures a report or an export shows, and how its counts are said.

`AttributionRecord` (attributor, verify, when, by which command, where, source run), written by `memtrace
attribute` into its folder and, as `latest_attribution.json`, into the source run's (atomically);
`latest_attributions` is what `report` and `graph convert` read (the latest, else the run's own);
`FailureCount` is the one count both print; `attributions_from_rows` reads attributions.json back (a joint set
with the blamed error type, no alternatives: the saved blame.json is read as written). JSON files only: no
attribution, no MLflow.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memtrace_loop.pipeline.analysis.attribution.records import (
    Attribution,
    AttributionCost,
    Check,
    ErrorType,
    Fault,
    Tunable,
)
from memtrace_loop.pipeline.analysis.blame import BlameTable
from memtrace_loop.pipeline.core.files import write_atomically
from memtrace_loop.pipeline.core.records import CaseResult
from memtrace_loop.pipeline.core.run_folder import RunFolder
from memtrace_loop.pipeline.data.locomo import validate_record
from memtrace_loop.pipeline.data.reader import DataError
from pydantic import BaseModel, ConfigDict

logger = logging.getLogger(__name__)

RUN_COMMAND = "memtrace run"
ATTRIBUTE_COMMAND = "memtrace attribute"


def now_utc() -> str:
    """The time of day as a record stamps it: ISO 8601, UTC, whole seconds."""
    return datetime.now(UTC).replace(microsecond=0).isoformat()


@dataclass(frozen=True)
class AttributionRecord:
    """One attribution of a run's failures: who made it, how, when, and where its attributions.json is."""

    attributor: str  # the attributor's name (lineage, llm, ...)
    verify: bool  # each blame checked by a replay
    made_at: str  # ISO 8601 UTC
    command: str  # RUN_COMMAND or ATTRIBUTE_COMMAND
    folder: str  # the folder holding its attributions.json
    source: str = ""  # the source run as the user named it (a folder, or "run <MLflow id>")
    source_dir: str = ""  # the folder holding the source run's cases.json and graphs/
    source_run_id: str = ""  # the source run's MLflow run id, when known
    mlflow_run_id: str = ""  # this attribution's own MLflow run (`attribute` with log=true)

    def label(self) -> str:
        """One line for the page and the console: attributor, verify on/off, by what, when, where."""
        when = self.made_at.replace("T", " ").replace("+00:00", " UTC")
        where = f", in {self.folder}" if self.folder else ""
        logged = f" (MLflow run {self.mlflow_run_id})" if self.mlflow_run_id else ""
        return f"{self.attributor}, verify {'on' if self.verify else 'off'}, by {self.command} at {when}{where}{logged}"

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, ensure_ascii=False)


class _RecordFile(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)  # newer fields are ignored
    attributor: str
    verify: bool
    made_at: str
    command: str
    folder: str
    source: str = ""
    source_dir: str = ""
    source_run_id: str = ""
    mlflow_run_id: str = ""


def read_record(path: Path) -> AttributionRecord:
    """The record in `path`; a `DataError` naming the file (and the field) when it is unreadable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise DataError(str(path), f"not an attribution record ({type(error).__name__}: {error})") from error
    return AttributionRecord(**validate_record(_RecordFile, data, str(path), None).model_dump())


def write_record(path: Path, record: AttributionRecord) -> Path:
    """`record` written to `path` whole or not at all."""
    return write_atomically(path, record.to_json())


def record_latest(saved_folder: Path, record: AttributionRecord) -> Path:
    """Record `record` as the latest attribution of the run saved in `saved_folder` (its run folder's
    `latest_attribution.json`, replaced atomically); returns the path."""
    return write_record(RunFolder.holding(saved_folder).latest_attribution, record)


@dataclass(frozen=True)
class ChosenAttributions:
    """The attributions a report or an export shows, the record saying which they are and, when it was
    saved with them, their blame table as made (None: recompute it from the attributions)."""

    record: AttributionRecord
    attributions: tuple[Attribution, ...]
    blame: BlameTable | None = None

    @classmethod
    def read(cls, record: AttributionRecord, folder: Path, results: Sequence[CaseResult]) -> ChosenAttributions | None:
        """The attributions (and blame.json) `folder` holds of `results`, as `record` (None: it holds none)."""
        path = folder / RunFolder.ATTRIBUTIONS
        if not path.is_file():
            return None
        found = attributions_from_rows(_rows(path), results)
        blame_path = folder / RunFolder.BLAME
        blame = BlameTable.from_rows(_rows(blame_path), len(found)) if blame_path.is_file() else None
        return cls(record, found, blame)


def _rows(path: Path) -> list[Mapping[str, Any]]:
    """The list of row objects in the JSON file `path` (a `DataError` naming it otherwise)."""
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise DataError(str(path), f"unreadable ({type(error).__name__}: {error})") from error
    if not isinstance(rows, list) or not all(isinstance(row, Mapping) for row in rows):
        raise DataError(str(path), "not a list of row objects")
    return rows


def run_own_record(folder: Path, run_config: Mapping[str, Any]) -> AttributionRecord:
    """The record of the attributions `memtrace run` saved in `folder` (its attributor from the run's config)."""
    chosen = run_config.get("attributor") or {}
    made = datetime.fromtimestamp((folder / RunFolder.ATTRIBUTIONS).stat().st_mtime, UTC).replace(microsecond=0)
    return AttributionRecord(
        str(chosen.get("name", "lineage")), bool(chosen.get("verify", False)), made.isoformat(), RUN_COMMAND,
        str(folder.resolve()), source_dir=str(folder.resolve()),
    )


def latest_attributions(
    saved_folder: Path, results: Sequence[CaseResult], run_config: Mapping[str, Any]
) -> ChosenAttributions | None:
    """The attributions of the run saved in `saved_folder` the user made last (see the module doc)."""
    pointer = RunFolder.holding(saved_folder).latest_attribution
    if pointer.is_file():
        record = read_record(pointer)
        latest = ChosenAttributions.read(record, Path(record.folder), results)
        if latest is not None:
            return latest
        logger.warning("%s: the attribution it names is gone (%s has no %s); showing the run's own",
                       pointer, record.folder, RunFolder.ATTRIBUTIONS)
    if not (saved_folder / RunFolder.ATTRIBUTIONS).is_file():
        return None
    return ChosenAttributions.read(run_own_record(saved_folder, run_config), saved_folder, results)


@dataclass(frozen=True)
class FailureCount:
    """Failures and attributions counted one way: `scored` failures (outside the excluded categories),
    `attributed` of them, and `excluded` failures in the excluded categories (never attributed)."""

    attributed: int
    scored: int
    excluded: int = 0
    excluded_categories: tuple[int, ...] = ()

    @classmethod
    def of(cls, results: Sequence[CaseResult], exclude_categories: Sequence[int],
           attributions: Sequence[Attribution]) -> FailureCount:
        left_out = set(exclude_categories)
        failed = [r for r in results if not r.correct]
        scored = {r.question.id for r in failed if r.question.category not in left_out}
        attributed = len({a.question_id for a in attributions} & scored)
        return cls(attributed, len(scored), len(failed) - len(scored), tuple(sorted(left_out)))

    def line(self) -> str:
        """`"25 of 25 scored failures attributed (12 more in excluded category 5, not scored)"`."""
        text = f"{self.attributed} of {self.scored} scored failures attributed"
        if self.excluded:
            noun = "category" if len(self.excluded_categories) == 1 else "categories"
            text += (f" ({self.excluded} more in excluded {noun} "
                     f"{', '.join(str(c) for c in self.excluded_categories)}, not scored)")
        return text


def checks_line(attributions: Sequence[Attribution]) -> str:
    """How many blames replay verified, refuted, could not verify and did not check: `"3 verified, ..."`."""
    return ", ".join(f"{sum(1 for a in attributions if a.check is check)} {check.value}"
                     for check in (Check.VERIFIED, Check.REFUTED, Check.UNVERIFIABLE, Check.UNCHECKED))


def attributions_from_rows(rows: Iterable[Mapping[str, Any]], results: Sequence[CaseResult]) -> tuple[Attribution, ...]:
    case_by_question = {r.question.id: r for r in results}
    found = []
    for row in rows:
        case = case_by_question.get(str(row.get("question_id", "")))
        if case is None:
            continue
        error_type = ErrorType(str(row["error_type"]))
        tunable = Tunable(str(row.get("tunable", Tunable.PROMPT.value)))
        joint = tuple(
            Fault(str(op), str(name), str(stage), error_type, tunable, str(row.get("reason", "")))
            for op, name, stage in zip(
                row.get("joint", ()), row.get("joint_names", ()), row.get("joint_stages", ()), strict=False
            )
        )
        verified = row.get("verified")
        check = Check(str(row["check"])) if "check" in row else Check.of(None if verified is None else bool(verified))
        found.append(
            Attribution(
                case, str(row["op"]), str(row.get("op_name", "")), str(row["stage"]), error_type,
                str(row.get("reason", "")), float(row.get("confidence", 0.0)), str(row.get("method", "")),
                tunable, tuple(str(e) for e in row.get("evidence", ())), bool(row.get("pseudo_evidence", False)),
                check, joint=joint,
                cost=AttributionCost(
                    int(row.get("cost_lm_calls", 0)), int(row.get("prompt_tokens", 0)),
                    int(row.get("completion_tokens", 0)), int(row.get("replay_calls", 0)),
                    float(row.get("seconds", 0.0)),
                ),
            )
        )
    return tuple(found)
