"""The test world an LM backend may offer (only `sim` does): per stage, the perfect instruction and its
rules, read through `pipeline.backends.registry.backend_test_world`. A stage is named by its output
fields. This module defines the interface only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar, Protocol

__all__ = ["TestWorld"]


class TestWorld(Protocol):
    __test__: ClassVar[bool] = False  # not a pytest test class

    def perfect_instruction(self, instruction: str, output_fields: Iterable[str]) -> str:
        """`instruction` completed so the stage with `output_fields` makes no planted mistake
        (unchanged but for whitespace for a stage the world does not know)."""
        ...

    def rules(self, output_fields: Iterable[str]) -> tuple[str, ...]:
        """The ids of the rules that fix the stage with `output_fields` (empty for an unknown stage)."""
        ...
