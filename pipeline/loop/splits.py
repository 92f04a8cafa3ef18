"""The loop's three splits (`Splits`), and the part of train and dev the loop answers (`Splits.scored`).

Only records: how a dataset is split is `pipeline.data` (`split_by_conversation`); what the loop does
with each split is `pipeline.loop.optimization`.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from memtrace_loop.pipeline.core.records import Dataset

__all__ = ["Splits"]


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
