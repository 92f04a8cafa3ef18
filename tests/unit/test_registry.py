"""The one registry shape (`pipeline.core.registry`): its docstring's examples, a `module:NAME` line included."""

from __future__ import annotations

import doctest

import memtrace_loop.pipeline.core.registry as registry


def test_the_registry_examples_hold() -> None:
    failures, tried = doctest.testmod(registry)
    assert tried >= 5 and failures == 0
