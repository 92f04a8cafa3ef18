"""Datasets by config kind: `DATASETS` (`dataset.kind` -> module exporting `SPEC`) and `load_dataset`.

`load_dataset(cfg, base_dir)` validates the node (a `ConfigError` naming `dataset.<key>`) and loads the
whole dataset. The `sim` kind is reached from here only. No splitting, no caching.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memtrace_loop.pipeline.core.config import ConfigError, parse_config
from memtrace_loop.pipeline.core.records import Dataset
from memtrace_loop.pipeline.core.registry import Registry
from memtrace_loop.pipeline.data.spec import DatasetSpec

__all__ = ["DATASETS", "DatasetSpec", "dataset_config", "load_dataset"]

DATASETS: Registry[DatasetSpec] = Registry(
    "dataset",
    "dataset.kind",
    {
        "sim": "memtrace_loop.pipeline.sim.dataset",
        "locomo": "memtrace_loop.pipeline.data.locomo",
        "longmemeval": "memtrace_loop.pipeline.data.longmemeval",
    },
    unknown="{key}: unknown kind {name!r} (expected one of {choices})",
)


def dataset_config(cfg: Mapping[str, Any]) -> Any:
    """The validated config record of the `dataset` node `cfg` (its `kind` key selects the schema)."""
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"dataset: must be a mapping, got {type(cfg).__name__}")
    kind = cfg.get("kind")
    return parse_config(DATASETS.get(kind).schema, {k: v for k, v in cfg.items() if k != "kind"}, "dataset")


def load_dataset(cfg: Mapping[str, Any], base_dir: str | Path | None = None) -> Dataset:
    """The whole dataset named by the `dataset` node `cfg`."""
    return DATASETS.get(cfg.get("kind")).load(dataset_config(cfg), Path(base_dir or "."))
