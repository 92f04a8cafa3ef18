"""Which overrides a `resume=` names as ignored (`ignored_overrides`): only those typed that differ from
the saved config; a key or group the user never typed is not an override, whatever its default."""

from __future__ import annotations

from memtrace_loop.experiments.optimize import ignored_overrides

SAVED = {"seed": 0, "workers": 8, "memory_system": {"name": "rag", "top_k": 5, "max_chunk_tokens": 200},
         "loop": {"min_gain": 0.0}}
# what Hydra composes for `resume=...` alone: the DEFAULT memory system (mem0), not the saved rag
COMPOSED = {"seed": 0, "workers": 2, "resume": "outputs/x", "memory_system": {"name": "mem0", "top_k": 10},
            "loop": {"min_gain": 0.5}}


def test_without_typed_overrides_every_differing_key_is_named() -> None:  # the compose API
    assert ignored_overrides(COMPOSED, SAVED) == [
        "loop.min_gain", "memory_system.max_chunk_tokens", "memory_system.name", "memory_system.top_k",
    ]


def test_only_typed_overrides_that_differ_are_named() -> None:
    assert ignored_overrides(COMPOSED, SAVED, ("resume",)) == []
    assert ignored_overrides(COMPOSED, SAVED, ("resume", "workers", "seed")) == []  # workers may change; seed equal
    assert ignored_overrides(COMPOSED, SAVED, ("resume", "loop.min_gain")) == ["loop.min_gain"]
    assert ignored_overrides(COMPOSED, SAVED, ("memory_system", "loop.min_gain")) == ["loop.min_gain", "memory_system"]
    assert ignored_overrides(COMPOSED, SAVED, ("memory_system.top_k",)) == ["memory_system.top_k"]
    assert ignored_overrides(COMPOSED, SAVED, ("memory_system.top",)) == []  # a prefix of a name is not its group
