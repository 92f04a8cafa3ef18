"""Tests for the guesses of pipeline.interop.exec_network.foreign: repr values decoded only when exactly a
string's repr, kinds guessed in order of trust, times read in the formats smartcomment and others write."""

from __future__ import annotations

from datetime import datetime

import pytest
from memtrace_loop.pipeline.core.graph import OpKind
from memtrace_loop.pipeline.interop.exec_network.document import RawNode
from memtrace_loop.pipeline.interop.exec_network.foreign import decode_value, op_kind, parse_time, variable_kind


@pytest.mark.parametrize(("stored", "ours"), [
    ("'Rome'", "Rome"),
    ('"it\'s"', "it's"),
    ("'line\\nbreak'", "line\nbreak"),
    ("'caf\u00e9'", "caf\u00e9"),
    ("Rome", "Rome"),                      # not a repr: kept
    ("'a' + 'b'", "'a' + 'b'"),            # an expression, not a literal: kept
    ("'unterminated", "'unterminated"),
    ("\"'\"", "'"),
    ("'1'", "1"),
    ("1.0", "1.0"),                        # a number's repr stays text
    ("{'a': 1}", "{'a': 1}"),              # a dict's repr stays text
    ("'a' ", "'a' "),                      # trailing space: not exactly a repr
    (None, ""),
    (3, "3"),
    ({"k": [1, "x"]}, '{"k": [1, "x"]}'),
])
def test_decode_value(stored, ours) -> None:
    assert decode_value(stored) == ours


def test_kinds_in_order_of_trust() -> None:
    assert op_kind("memory-search", "operation") == OpKind.RETRIEVAL
    assert op_kind("llm_json_extraction", "llm_json_extraction", "json_parsing") == OpKind.EXTRACTION
    assert op_kind("mk", "operation", "judge") == OpKind.JUDGE  # an exact kind anywhere wins
    assert op_kind("step", "operation") == OpKind.OTHER
    node = RawNode(name="q-41", version=1, value="", category="question", class_name="query")
    assert variable_kind(node, "q-41") == "query"
    assert variable_kind(RawNode(name="x", version=1, category="memory"), "x") == "memory"
    assert variable_kind(RawNode(name="x", version=1, category="llm_response"), "x") == "answer"
    assert variable_kind(RawNode(name="x", version=1, category="queue_state"), "x") == "queue_state"


def test_parse_time() -> None:
    assert parse_time("2026-06-01 14:08:56.471") == datetime(2026, 6, 1, 14, 8, 56, 471000)
    assert parse_time("2026-06-01 14:08:56") == datetime(2026, 6, 1, 14, 8, 56)
    assert parse_time("2026-06-01T14:08:56+02:00") == datetime(2026, 6, 1, 14, 8, 56)
    assert parse_time("yesterday") is None and parse_time(None) is None and parse_time("") is None
