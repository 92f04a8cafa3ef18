"""The dataset registry's contract: what a dataset kind's module exports as `SPEC`.

A `DatasetSpec` holds the kind's config record (the schema and single home of the defaults of its
`dataset` config node) and its loader, `load(config, base_dir) -> Dataset` (relative paths taken from
`base_dir`, see `resolve_path`). It does not list the kinds (`pipeline.data.registry` does) or load
anything itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memtrace_loop.pipeline.core.records import Dataset

__all__ = ["DatasetSpec", "resolve_path"]


@dataclass(frozen=True)
class DatasetSpec:
    """A dataset kind: its config record and its loader."""

    schema: type
    load: Callable[[Any, Path], Dataset]
    compare: bool = False  # datasets are not swept by default


def resolve_path(path: str, base_dir: Path) -> Path:
    """`path` as given when absolute, else under `base_dir`."""
    candidate = Path(path)
    return candidate if candidate.is_absolute() else base_dir / candidate
