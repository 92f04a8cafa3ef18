"""Reciprocal rank fusion: rankings folded into one by the sum of `1 / (k + rank)` (Cormack et al., 2009).

Only an item's first occurrence per ranking counts; ties go to the item seen first. Ranks only, no scores.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import TypeVar

DEFAULT_K = 60

T = TypeVar("T", bound=Hashable)


def reciprocal_rank_fusion(rankings: Iterable[Sequence[T]], k: int = DEFAULT_K) -> list[tuple[T, float]]:
    """The items of all `rankings` with their fused scores, best first (ties: first seen first)."""
    if k < 0:
        raise ValueError(f"the RRF constant k must be >= 0, got {k}")
    score_by_item: dict[T, float] = {}
    first_seen: dict[T, int] = {}
    for ranking in rankings:
        seen_here: set[T] = set()
        rank = 0
        for item in ranking:
            if item in seen_here:
                continue
            seen_here.add(item)
            rank += 1
            score_by_item[item] = score_by_item.get(item, 0.0) + 1.0 / (k + rank)
            first_seen.setdefault(item, len(first_seen))
    # rounding makes mathematically equal sums (added in another order) tie exactly
    return sorted(score_by_item.items(), key=lambda pair: (-round(pair[1], 12), first_seen[pair[0]]))
