"""Reciprocal rank fusion on hand-made rankings: the math, duplicates, ties and bad input."""

from __future__ import annotations

import pytest
from memtrace_loop.memory_systems.fusion import DEFAULT_K, reciprocal_rank_fusion


def test_scores_are_sums_of_reciprocal_ranks() -> None:
    fused = dict(reciprocal_rank_fusion([["a", "b", "c"], ["b", "c"]], k=60))
    assert fused["a"] == pytest.approx(1 / 61)
    assert fused["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert fused["c"] == pytest.approx(1 / 63 + 1 / 62)
    assert [item for item, _ in reciprocal_rank_fusion([["a", "b", "c"], ["b", "c"]])] == ["b", "c", "a"]


def test_the_default_constant_is_60_and_k_changes_the_order() -> None:
    rankings = [["x", "y"], ["y", "z"], ["z", "x"], ["x"]]
    assert DEFAULT_K == 60
    assert reciprocal_rank_fusion(rankings) == reciprocal_rank_fusion(rankings, k=60)
    # x: ranks 1, 2, 1; y: 2, 1; z: 2, 1 -> x first for any k
    assert reciprocal_rank_fusion(rankings, k=0)[0] == ("x", pytest.approx(1 + 1 / 2 + 1))
    # ranked second twice vs first once: equal at k=0 (1/2 + 1/2 = 1), ahead at k=60 (2/62 > 1/61)
    at_zero = reciprocal_rank_fusion([["a", "b"], ["c", "b"]], k=0)
    assert [item for item, _ in at_zero] == ["a", "b", "c"] and {s for _, s in at_zero} == {1.0}
    assert [item for item, _ in reciprocal_rank_fusion([["a", "b"], ["c", "b"]], k=60)] == ["b", "a", "c"]


def test_ties_go_to_the_item_seen_first() -> None:
    # a and b have mirror-image ranks: exactly equal scores
    fused = reciprocal_rank_fusion([["a", "b"], ["b", "a"]])
    assert [item for item, _ in fused] == ["a", "b"]
    assert fused[0][1] == fused[1][1]
    assert [i for i, _ in reciprocal_rank_fusion([["b", "a"], ["a", "b"]])] == ["b", "a"]
    # items only in later rankings come after equal-scored earlier ones
    assert [i for i, _ in reciprocal_rank_fusion([["p"], ["q"], ["r"]])] == ["p", "q", "r"]


def test_duplicates_count_once_and_empty_input_is_empty() -> None:
    assert dict(reciprocal_rank_fusion([["a", "a", "b"]]))["b"] == pytest.approx(1 / 62)
    assert dict(reciprocal_rank_fusion([["a", "a", "b"]]))["a"] == pytest.approx(1 / 61)
    assert reciprocal_rank_fusion([]) == []
    assert reciprocal_rank_fusion([[], []]) == []


def test_works_on_any_hashable_and_is_deterministic() -> None:
    rankings = [[3, 1, 2], [2, 3], [1]]
    assert reciprocal_rank_fusion(rankings) == reciprocal_rank_fusion([list(r) for r in rankings])
    assert {item for item, _ in reciprocal_rank_fusion(rankings)} == {1, 2, 3}


def test_negative_k_is_rejected() -> None:
    with pytest.raises(ValueError, match="k"):
        reciprocal_rank_fusion([["a"]], k=-1)
