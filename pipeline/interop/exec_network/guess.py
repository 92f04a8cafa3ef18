"""Guesses for what a foreign ExecNetwork document does not say.

A node's and an operation's kind (category, name prefix, keywords), a record's time (`parse_time`) and a
stored value (`decode_value`: smartcomment's `repr()` of a string back to the string). A guess never raises.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from memtrace_loop.pipeline.backends.text import alnum_words
from memtrace_loop.pipeline.core.conventions import VarKind
from memtrace_loop.pipeline.core.graph import OpKind
from memtrace_loop.pipeline.core.literals import literal_eval
from memtrace_loop.pipeline.interop.exec_network.document import RawNode

# the kinds a foreign node's category or name prefix is taken as directly (the rest are guessed by keywords)
_OUR_KINDS: tuple[VarKind, ...] = (
    VarKind.TURN, VarKind.FACTS, VarKind.RETRIEVED, VarKind.DECISION, VarKind.MEMORY, VarKind.QUERY,
    VarKind.CONTEXT, VarKind.ANSWER, VarKind.GOLD, VarKind.VERDICT, VarKind.PROMPT,
)
_VARIABLE_KEYWORDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("prompt", ("prompt", "instruction")),
    ("turn", ("turn", "message", "utterance", "dialog")),
    ("memory", ("memory", "mem")),
    ("query", ("query", "question")),
    ("gold", ("gold", "golden", "reference")),
    ("verdict", ("verdict", "judge", "judgement", "label")),
    ("answer", ("answer", "prediction", "response")),
    ("context", ("context", "retrieved", "retrieval", "chunk")),
    ("facts", ("fact", "facts")),
    ("decision", ("decision", "action")),
)
_OP_KEYWORDS: tuple[tuple[OpKind, tuple[str, ...]], ...] = (
    (OpKind.JUDGE, ("judge", "grade")),
    (OpKind.RESPONSE, ("answer", "respond", "response")),
    (OpKind.DELETION, ("delet", "remov", "forget")),
    (OpKind.UPDATE, ("updat", "decision", "decide", "merg", "trim", "overwrit")),
    (OpKind.EXTRACTION, ("extract", "add", "chunk", "insert", "segment", "episode", "narrat", "summar")),
    (OpKind.RETRIEVAL, ("retriev", "search", "recall", "rerank", "fusion", "query", "fetch")),
)


def parse_time(text: Any) -> datetime | None:
    """A record's `created_at` as a datetime (None when missing or unreadable)."""
    if not isinstance(text, str) or not text.strip():
        return None
    for fmt in ("%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S"):
        try:
            return datetime.strptime(text.strip(), fmt)
        except ValueError:
            pass
    try:
        return datetime.fromisoformat(text.strip()).replace(tzinfo=None)
    except ValueError:
        return None


def _tokens(*texts: Any) -> list[str]:
    return [t for text in texts if text for t in alnum_words(str(text))]


def variable_kind(node: RawNode, name: str) -> str:
    """Our kind of their node `node` (our name `name`); a category we do not know is kept."""
    category = str(node.category or "").strip().lower()
    if category in _OUR_KINDS:
        return category
    if ":" in name and name.split(":", 1)[0] in _OUR_KINDS:
        return name.split(":", 1)[0]
    tokens = _tokens(node.category, node.class_name, node.name)
    for kind, words in _VARIABLE_KEYWORDS:
        if any(t == w for t in tokens for w in words):
            return kind
    return category or "value"


def op_kind(*texts: Any) -> OpKind:
    """Our kind of an operation from its texts, in order of trust (name, category, edge categories)."""
    for text in texts:
        if str(text or "").lower() in {k.value for k in OpKind}:
            return OpKind(str(text).lower())
    for text in texts:
        tokens = _tokens(text)
        for kind, stems in _OP_KEYWORDS:
            if any(t.startswith(s) for t in tokens for s in stems):
                return kind
    return OpKind.OTHER


def decode_value(value: Any) -> str:
    """Our string for their stored value: smartcomment's `repr()` of a string (`"'Rome'"`) becomes the
    string itself; any other string stays; non-strings become JSON."""
    if isinstance(value, str):
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            try:
                decoded = literal_eval(value)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                return value
            if isinstance(decoded, str) and repr(decoded) == value:
                return decoded
        return value
    return "" if value is None else json.dumps(value, ensure_ascii=False)
