"""The bounded map the run's stores share (pipeline/core/lru.py): worked example, order of use, bounds."""

from __future__ import annotations

import doctest

import pytest
from memtrace_loop.pipeline.core import lru
from memtrace_loop.pipeline.core.lru import Lru


def test_the_worked_example_in_the_module_doc_holds():
    failures, tried = doctest.testmod(lru)
    assert tried >= 3 and failures == 0


def test_membership_does_not_count_as_use_but_get_and_put_do():
    store = Lru[int](max_entries=2)
    store.put("a", 1)
    store.put("b", 2)
    assert "a" in store  # not a use: "a" is still the least recently used
    store.put("c", 3)
    assert sorted(store.keys()) == ["b", "c"]
    store.put("b", 20)  # a put is a use: "c" goes next
    store.put("d", 4)
    assert (store.get("b"), store.get("c"), len(store)) == (20, None, 2)


def test_a_copy_is_independent_and_zero_keeps_nothing():
    store = Lru[int](max_entries=3)
    store.put("a", 1)
    copied = store.copy()
    copied.put("b", 2)
    assert ("b" in store, len(copied), copied.max_entries) == (False, 2, 3)
    nothing = Lru[int](max_entries=0)
    nothing.put("a", 1)
    assert nothing.get("a") is None and len(nothing) == 0
    with pytest.raises(ValueError, match="at least 0"):
        Lru[int](max_entries=-1)
