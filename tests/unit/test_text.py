"""Tests for pipeline.backends.text (the word tokenizers) and pipeline.backends.bm25 (Okapi BM25)."""

from __future__ import annotations

import math

import pytest
from memtrace_loop.pipeline.backends.bm25 import BM25Index
from memtrace_loop.pipeline.backends.text import (
    alnum_apostrophe_words,
    alnum_words,
    answer_tokens,
    long_letter_words,
    normalize_answer,
)

SAID = "Alice's 2nd dog, Rex, didn't bark at the O'Neils!"


def test_the_tokenizers_are_distinct_behaviours() -> None:
    assert alnum_words(SAID) == ["alice", "s", "2nd", "dog", "rex", "didn", "t", "bark", "at", "the", "o", "neils"]
    assert alnum_apostrophe_words(SAID) == ["alice's", "2nd", "dog", "rex", "didn't", "bark", "at", "the", "o'neils"]
    assert long_letter_words(SAID) == ["alice", "dog", "rex", "didn", "bark", "the", "neils"]
    assert answer_tokens(SAID) == ["alices", "2nd", "dog", "rex", "didnt", "bark", "at", "oneils"]
    assert normalize_answer(SAID) == " ".join(answer_tokens(SAID))


def test_tokenizers_ignore_non_ascii_letters_and_empty_text() -> None:
    assert alnum_words("Café 3D") == ["caf", "3d"]
    assert alnum_words("") == alnum_apostrophe_words("") == long_letter_words("") == answer_tokens("") == []


def test_bm25_scores_follow_the_okapi_formula_with_lucene_idf() -> None:
    docs = ["alice adopted a dog", "bob likes his dog and his dog likes him", "carol runs marathons"]
    index = BM25Index(docs)
    n, avg = 3, (4 + 9 + 3) / 3

    def weight(tf: int, length: int, df: int) -> float:
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        return idf * tf * 2.5 / (tf + 1.5 * (1 - 0.75 + 0.75 * length / avg))

    scores = index.scores("Dog dog ALICE?")  # repeated query terms count once
    assert scores == pytest.approx([weight(1, 4, 2) + weight(1, 4, 1), weight(2, 9, 2), 0.0])
    assert len(index) == 3


def test_bm25_top_breaks_ties_by_document_order_and_handles_empty_input() -> None:
    index = BM25Index(["red apple", "green pear", "red apple", "blue"])
    assert [i for i, _ in index.top("red apple", 3)] == [0, 2, 1]
    assert index.top("red", 0) == []
    assert index.scores("unknown words") == [0.0] * 4
    assert BM25Index([]).top("anything", 5) == []
