"""The one train/dev/test split record: `Split`, cut by `split_by_conversation` (seeded, by conversation).

`Split.select` / `Split.require` refuse an empty part (`EmptySplitError` naming `splits.fractions` and
`splits.seed`); `Split.scored` drops the questions no score reads; `train_part` is the train conversations
one train evaluation reads (`loop.train_conversations`). Pure: it reads no file and does not decide what
is done with each part.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

from memtrace_loop.pipeline.core.config import ConfigError
from memtrace_loop.pipeline.core.records import Dataset

__all__ = ["SPLIT_NAMES", "EmptySplitError", "Split", "split_by_conversation", "train_part"]

logger = logging.getLogger(__name__)

SplitName = Literal["train", "dev", "test"]
SPLIT_NAMES: tuple[SplitName, ...] = ("train", "dev", "test")


class EmptySplitError(ConfigError):
    """A split that was asked for has no conversations (the message names it, the fractions and the seed)."""


@dataclass(frozen=True, slots=True)
class Split:
    """Disjoint train / dev / test datasets; every conversation is in exactly one of them (`fractions`
    and `seed`: how they were cut, for messages)."""

    train: Dataset
    dev: Dataset
    test: Dataset
    fractions: tuple[float, float, float] | None = None
    seed: int | None = None

    def select(self, name: str) -> Dataset:
        """The dataset of split `name` ("train", "dev" or "test"); ValueError for any other name and an
        `EmptySplitError` when it has no conversations."""
        if name not in SPLIT_NAMES:
            raise ValueError(f"unknown split {name!r}; expected one of {', '.join(SPLIT_NAMES)}")
        self.require(name)
        return getattr(self, name)

    def require(self, *names: str) -> Split:
        """This split; an `EmptySplitError` naming the first of `names` without conversations or questions."""
        for name in names:
            part: Dataset = getattr(self, name)
            if not part.conversations or not part.questions:
                raise EmptySplitError(self.empty_message(name))
        return self

    def empty_message(self, name: str) -> str:
        """Why split `name` is empty, naming the config keys that made it so."""
        total = sum(len(part.conversations) for part in (self.train, self.dev, self.test))
        how = f"splits.fractions={list(self.fractions)}" if self.fractions is not None else "the fractions"
        seed = f", splits.seed={self.seed}" if self.seed is not None else ""
        n_conversations = len(getattr(self, name).conversations)
        if n_conversations:
            return (f"split={name}: the {name} split has {n_conversations} conversation(s) but no questions "
                    f"({how}{seed})")
        return (f"split={name}: the {name} split is empty: {how}{seed} over {total} conversation(s) gives it "
                f"none (use more conversations or give {name} a larger share)")

    def scored(self, excluded: Collection[int]) -> Split:
        """Train and dev without the questions of the `excluded` categories (LoCoMo's adversarial category
        5 by default) and the conversations left without a question: the gate, attribution and every
        optimizer read only scored questions, so the loop does not spend calls answering the others.
        Test stays whole: its report shows every category."""
        return Split(self.train.without_categories(excluded), self.dev.without_categories(excluded), self.test,
                     self.fractions, self.seed)


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


def _split_sizes(n: int, fractions: tuple[float, float, float]) -> tuple[int, int, int]:
    """Conversations per split: rounded shares, at least one for every split with a positive
    fraction when there are enough conversations; train is filled first, then dev, then test."""
    wanted = [f > 0 for f in fractions]
    if n < sum(wanted):
        sizes = [0, 0, 0]
        remaining = n
        for i in range(3):  # priority: train, dev, test
            if wanted[i] and remaining:
                sizes[i], remaining = 1, remaining - 1
        return sizes[0], sizes[1], sizes[2]
    dev = max(1, round(n * fractions[1])) if wanted[1] else 0
    test = max(1, round(n * fractions[2])) if wanted[2] else 0
    while n - dev - test < 1:  # train must keep one; take from the larger of dev/test
        if dev >= test and dev > 1:
            dev -= 1
        else:
            test -= 1
    return n - dev - test, dev, test


def split_by_conversation(
    dataset: Dataset, fractions: tuple[float, ...] = (0.5, 0.25, 0.25), seed: int = 0
) -> Split:
    """Shuffle the conversations with `seed` and cut them into train / dev / test, each conversation (with
    its questions) in exactly one. Every part with a positive fraction gets a conversation when there
    are enough; with fewer, train is served first, then dev, then test, and the rest stay empty (a
    warning; `Split.require` refuses them). A zero fraction always gives an empty part."""
    if len(fractions) != 3 or any(not math.isfinite(f) or f < 0 for f in fractions):
        raise ValueError(f"fractions must be three non-negative numbers, got {fractions!r}")
    if not math.isclose(sum(fractions), 1.0, abs_tol=1e-6):
        raise ValueError(f"fractions must sum to 1, got {fractions!r} (sum {sum(fractions)})")
    if fractions[0] <= 0:
        raise ValueError("the train fraction must be positive")
    if not dataset.conversations:
        raise ValueError(f"dataset {dataset.name!r} has no conversations to split")
    ids = [conversation.id for conversation in dataset.conversations]
    random.Random(seed).shuffle(ids)
    n_train, n_dev, _ = _split_sizes(len(ids), fractions)
    parts = (ids[:n_train], ids[n_train : n_train + n_dev], ids[n_train + n_dev :])
    empty = [name for name, part, f in zip(SPLIT_NAMES, parts, fractions, strict=True) if f > 0 and not part]
    if empty:
        logger.warning(
            "dataset %r has %d conversation(s): split(s) %s left empty", dataset.name, len(ids), empty
        )
    train, dev, test = (
        dataset.subset(tuple(part), name=f"{dataset.name}:{name}")
        for name, part in zip(SPLIT_NAMES, parts, strict=True)
    )
    return Split(train=train, dev=dev, test=test, fractions=fractions, seed=seed)
