"""`splits.train_part`: the train conversations one train evaluation reads with `loop.train_conversations`."""

from __future__ import annotations

import doctest

import pytest
from memtrace_loop.pipeline.core.records import Conversation, Dataset, Question
from memtrace_loop.pipeline.data import splits
from memtrace_loop.pipeline.data.splits import train_part

TRAIN = Dataset(
    "d",
    tuple(Conversation(f"c{i}", ("A",), ()) for i in range(5)),
    tuple(Question(f"c{i}:q{j}", f"c{i}", "?", "a", 1) for i in range(5) for j in range(2)),
)


def test_the_worked_examples_hold() -> None:
    failures, tried = doctest.testmod(splits)
    assert tried >= 4 and failures == 0


@pytest.mark.parametrize("k", [1, 2, 3])
def test_successive_parts_have_k_conversations_with_their_questions_and_cover_train(k: int) -> None:
    parts = [train_part(TRAIN, k, r, seed=3) for r in range(5)]
    assert all(len(p.conversations) == k for p in parts)
    assert all({q.conversation_id for q in p.questions} == {c.id for c in p.conversations} for p in parts)
    assert all(len(p.questions) == 2 * k for p in parts)
    assert {c.id for p in parts for c in p.conversations} == {c.id for c in TRAIN.conversations}
    assert [c.id for c in parts[0].conversations] != [c.id for c in parts[1].conversations]


def test_the_order_is_the_seeds_and_zero_or_too_many_read_all_of_train() -> None:
    assert train_part(TRAIN, 1, 0, seed=0) == train_part(TRAIN, 1, 0, seed=0)
    assert {train_part(TRAIN, 1, 0, seed=s).conversations[0].id for s in range(10)} != {"c0"}
    assert train_part(TRAIN, 0, 4, seed=0) is TRAIN
    assert train_part(TRAIN, 5, 1, seed=0) is TRAIN
