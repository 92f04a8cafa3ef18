"""The loop's three splits (`Splits`), the part of train and dev the loop answers (`Splits.scored`), and
the train conversations one train evaluation takes when the loop reads train in parts (`train_part`).

Only records and pure functions: how a dataset is split is `pipeline.data` (`split_by_conversation`);
what the loop does with each split is `pipeline.loop.optimization`.
"""

from __future__ import annotations

import random
from collections.abc import Collection
from dataclasses import dataclass

from memtrace_loop.pipeline.core.records import Dataset

__all__ = ["Splits", "train_part"]


@dataclass(frozen=True)
class Splits:
    train: Dataset
    dev: Dataset
    test: Dataset

    def scored(self, excluded: Collection[int]) -> Splits:
        """Train and dev without the questions of the `excluded` categories (LoCoMo's adversarial category
        5 by default) and the conversations left without a question: the gate, attribution and every
        optimizer read only scored questions, so the loop does not spend calls answering the others.
        Test stays whole: its report shows every category."""
        return Splits(self.train.without_categories(excluded), self.dev.without_categories(excluded), self.test)


def train_part(train: Dataset, conversations: int, round_: int, seed: int) -> Dataset:
    """The train conversations of round `round_` when each train evaluation takes `conversations` of them
    (0, or at least as many as there are: all of train): the next `conversations` of one seeded order,
    wrapping around, so successive rounds see different conversations and every one is seen in turn.

    >>> from memtrace_loop.pipeline.core.records import Conversation
    >>> train = Dataset("d", tuple(Conversation(f"c{i}", ("A",), ()) for i in range(4)), ())
    >>> [[c.id for c in train_part(train, 1, r, seed=0).conversations] for r in range(5)]
    [['c2'], ['c0'], ['c1'], ['c3'], ['c2']]
    >>> [c.id for c in train_part(train, 3, 1, seed=0).conversations]  # file order kept within a part
    ['c0', 'c2', 'c3']
    >>> train_part(train, 0, 7, seed=0) is train
    True
    """
    ids = [c.id for c in train.conversations]
    if conversations <= 0 or conversations >= len(ids):
        return train
    random.Random(seed).shuffle(ids)
    start = (round_ * conversations) % len(ids)
    return train.subset(tuple((ids + ids)[start:start + conversations]))
