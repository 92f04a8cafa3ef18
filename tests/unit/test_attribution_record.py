"""`pipeline.report.attribution_record`: one count of failures (scored, attributed, excluded said apart),
a record read back as written (a broken one refused in one line naming the file), and the latest
attribution of a run folder: the pointer's while its folder holds it, else the run's own."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from memtrace_loop.pipeline.analysis.attribution.records import Attribution, Check, ErrorType
from memtrace_loop.pipeline.core.records import CaseResult, Question, Scores
from memtrace_loop.pipeline.data.reader import DataError
from memtrace_loop.pipeline.report.attribution_record import (
    AttributionRecord,
    FailureCount,
    checks_line,
    latest_attributions,
    read_record,
    record_latest,
    write_record,
)
from memtrace_loop.pipeline.tracking.run_logging import attribution_rows


def case(qid: str, category: int, correct: bool) -> CaseResult:
    question = Question(qid, "c1", f"question {qid}?", "gold", category)
    verdict = "CORRECT" if correct else "WRONG"
    return CaseResult(question, "gold" if correct else "other", verdict, Scores(1.0, 1.0, 1.0))


RESULTS = (case("q1", 1, False), case("q2", 2, False), case("q3", 5, False), case("q4", 1, True))


def blamed(result: CaseResult, check: Check) -> Attribution:
    return Attribution(result, "op:1", "extract_facts", "extract", ErrorType.EXTRACTION, "lost", 0.9, "lineage",
                       check=check)


def test_the_count_is_of_scored_failures_with_the_excluded_said_apart():
    count = FailureCount.of(RESULTS, (5,), [blamed(RESULTS[0], Check.VERIFIED)])
    assert count == FailureCount(1, 2, 1, (5,))
    assert count.line() == "1 of 2 scored failures attributed (1 more in excluded category 5, not scored)"
    assert FailureCount.of(RESULTS, (), []).line() == "0 of 3 scored failures attributed"


def test_checks_are_counted_by_state():
    found = [blamed(RESULTS[0], Check.VERIFIED), blamed(RESULTS[1], Check.UNCHECKED)]
    assert checks_line(found) == "1 verified, 0 refuted, 0 unverifiable, 1 unchecked"


def test_a_record_reads_back_and_a_broken_one_is_one_line_naming_the_file(tmp_path):
    record = AttributionRecord("lineage", True, "2026-01-02T03:04:05+00:00", "memtrace attribute", "/x", "run r")
    assert read_record(write_record(tmp_path / "r.json", record)) == record
    assert record.label() == "lineage, verify on, by memtrace attribute at 2026-01-02 03:04:05 UTC, in /x"
    (tmp_path / "bad.json").write_text(json.dumps({"attributor": "lineage", "verify": "yes"}))
    with pytest.raises(DataError, match=r"bad\.json.*verify") as error:
        read_record(tmp_path / "bad.json")
    assert "\n" not in str(error.value)


def saved_run(tmp_path: Path, check: Check) -> Path:
    folder = tmp_path / "run" / "artifacts"
    folder.mkdir(parents=True)
    rows = attribution_rows([blamed(RESULTS[0], check)])
    (folder / "attributions.json").write_text(json.dumps(rows))
    return folder


def test_the_latest_is_the_pointer_s_while_its_folder_holds_it_else_the_run_s_own(tmp_path, caplog):
    saved = saved_run(tmp_path, Check.UNCHECKED)
    config = {"attributor": {"name": "lineage", "verify": False}}
    own = latest_attributions(saved, RESULTS, config)
    assert own is not None and own.record.command == "memtrace run" and not own.record.verify
    later = tmp_path / "attribute"
    later.mkdir()
    (later / "attributions.json").write_text(json.dumps(attribution_rows([blamed(RESULTS[0], Check.VERIFIED)])))
    pointer = record_latest(saved, AttributionRecord("lineage", True, "t", "memtrace attribute", str(later)))
    assert pointer == tmp_path / "run" / "latest_attribution.json"  # the run folder, not its artifacts/
    latest = latest_attributions(saved, RESULTS, config)
    assert latest is not None and [a.check for a in latest.attributions] == [Check.VERIFIED]
    (later / "attributions.json").unlink()
    with caplog.at_level(logging.WARNING):
        fallback = latest_attributions(saved, RESULTS, config)
    assert fallback is not None and fallback.record.command == "memtrace run" and "is gone" in caplog.text


def test_a_saved_blame_table_reads_back_as_it_was_made():
    from memtrace_loop.pipeline.analysis.blame import BlameTable, aggregate_blame

    made = aggregate_blame([blamed(RESULTS[0], Check.VERIFIED), blamed(RESULTS[1], Check.REFUTED)])
    back = BlameTable.from_rows(json.loads(json.dumps(made.as_rows())), made.total)
    assert back.as_rows() == made.as_rows() and back.total == made.total == 2
