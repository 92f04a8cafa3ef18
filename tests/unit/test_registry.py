"""The one registry shape (`pipeline.core.registry`): a module line, a `module:NAME` line, an unknown name."""

from __future__ import annotations

import pytest
from memtrace_loop.pipeline.core.config import ConfigError
from memtrace_loop.pipeline.core.registry import Registry


def test_a_line_names_a_module_or_a_module_attribute_and_an_unknown_name_lists_the_names() -> None:
    registry = Registry("demo", "demo.name", {"json": "json", "loads": "json:loads"}, attribute="dumps")
    assert registry.names == ("json", "loads")
    assert registry.get("json")({"a": 1}) == '{"a": 1}'
    assert registry.get("loads")("[1]") == [1]
    with pytest.raises(ConfigError, match=r"^demo\.name: unknown demo 'yaml' \(available: json, loads\)$"):
        registry.get("yaml")
