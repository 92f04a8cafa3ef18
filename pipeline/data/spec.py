"""The dataset registry's contract: `DatasetSpec` (config record and `load(config, base_dir)`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memtrace_loop.pipeline.core.records import Dataset


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
