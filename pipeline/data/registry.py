"""Datasets by config kind: `dataset.kind` -> (schema, loader).

Each schema is a frozen record holding the defaults of its `dataset` config node (`conf/dataset/<kind>.yaml`
only selects it and wires paths to environment variables). `load_dataset(cfg, base_dir)` validates the
node (a `ConfigError` naming `dataset.<key>` for an unknown key, a wrong type or an out-of-range value)
and loads the whole dataset; relative paths are taken from `base_dir`. Files and hub datasets
(`dataset.hub=<id>`, which replaces `dataset.path`) are read through Hugging Face `datasets`
(`pipeline.data.reader`) and parsed by their layout's one parser. The simulated world
(`pipeline.sim`) is reached from here only (and from the LM-backend registry). Splitting is
`pipeline.data.locomo.split_by_conversation`; nothing here evaluates or caches.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from memtrace_loop.pipeline.core.config import ConfigError, parse_config, require, require_categories, require_text
from memtrace_loop.pipeline.core.records import CATEGORY_NAMES, Dataset
from memtrace_loop.pipeline.data.locomo import DataError, load_locomo, load_locomo_hub, parse_locomo
from memtrace_loop.pipeline.data.longmemeval import (
    CATEGORY_BY_TYPE,
    HUB_VARIANT,
    abstention_categories,
    load_longmemeval,
    load_longmemeval_hub,
)

__all__ = [
    "ENTRY_BY_KIND",
    "DatasetEntry",
    "LoCoMoConfig",
    "LongMemEvalConfig",
    "SimDatasetConfig",
    "dataset_config",
    "load_dataset",
]


@dataclass(frozen=True)
class SimDatasetConfig:
    """The simulated world's synthetic conversations (LoCoMo layout, planted facts, known failure causes)."""

    seed: int = 0
    n_conversations: int = 8
    sessions_per_conversation: int = 6
    turns_per_session: int = 14
    exclude_categories: tuple[int, ...] = (5,)  # LoCoMo protocol: adversarial questions are not in the overall score

    def __post_init__(self) -> None:
        require(self, seed=(0, None), n_conversations=(1, None), sessions_per_conversation=(1, None),
                turns_per_session=(2, None))
        require_categories(self, known=CATEGORY_NAMES)


@dataclass(frozen=True)
class LoCoMoConfig:
    """LoCoMo in the benchmark's own layout, from a file (e.g. locomo10.json) or a Hugging Face dataset (`hub`)."""

    path: str | None = None
    hub: str | None = None  # a hub dataset id (or a local folder laid out like one); replaces `path`
    hub_file: str | None = None  # the data file in the hub dataset (e.g. locomo10.json); None: its default files
    hub_split: str = "train"
    exclude_categories: tuple[int, ...] = (5,)  # LoCoMo protocol: adversarial questions are not in the overall score

    def __post_init__(self) -> None:
        require_text(self, "path", "hub", "hub_file", "hub_split")
        require_categories(self, known=CATEGORY_NAMES)
        if self.path is None and self.hub is None:
            raise ValueError("path must name a LoCoMo file (or set dataset.hub=<hugging face dataset>)")


@dataclass(frozen=True)
class LongMemEvalConfig:
    """LongMemEval in the benchmark's own layout, from a file or from the Hugging Face hub (`hub`)."""

    path: str | None = None
    hub: str | None = None  # e.g. xiaowu0162/longmemeval-cleaned (or a local folder laid out like it); replaces `path`
    variant: str | None = HUB_VARIANT  # hub file stem: longmemeval_s_cleaned | longmemeval_m_cleaned | ...
    hub_split: str = "train"
    question_date_in_text: bool = True  # append "(question date: ...)": records have no date field
    exclude_categories: tuple[int, ...] = ()  # 1-6 the question types, 11-16 their abstention questions

    def __post_init__(self) -> None:
        require_text(self, "path", "hub", "variant", "hub_split")
        require_categories(self, known=(*CATEGORY_BY_TYPE.values(), *abstention_categories()))
        if self.path is None and self.hub is None:
            raise ValueError("path must name a LongMemEval file (or set dataset.hub=<hugging face dataset>)")


def _resolve(path: str, base_dir: Path) -> Path:
    candidate = Path(path)
    return candidate if candidate.is_absolute() else base_dir / candidate


def _load_sim(config: SimDatasetConfig, base_dir: Path) -> Dataset:
    from memtrace_loop.pipeline.sim.world import generate_locomo

    samples = generate_locomo(
        seed=config.seed, n_conversations=config.n_conversations,
        sessions_per_conversation=config.sessions_per_conversation, turns_per_session=config.turns_per_session,
    )
    return parse_locomo(samples, source=f"sim(seed={config.seed})")


def _load_locomo(config: LoCoMoConfig, base_dir: Path) -> Dataset:
    if config.hub:
        return load_locomo_hub(config.hub, data_files=config.hub_file, split=config.hub_split)
    path = _resolve(str(config.path), base_dir)
    if not path.exists():
        raise DataError(str(path), "LoCoMo file not found (set dataset.path=... or MEMTRACE_LOCOMO)")
    return load_locomo(path)


def _load_longmemeval(config: LongMemEvalConfig, base_dir: Path) -> Dataset:
    if config.hub:
        return load_longmemeval_hub(
            config.hub, variant=config.variant, split=config.hub_split,
            question_date_in_text=config.question_date_in_text,
        )
    path = _resolve(str(config.path), base_dir)
    if not path.exists():
        raise DataError(
            str(path), "LongMemEval file not found (set dataset.path=..., MEMTRACE_LONGMEMEVAL or dataset.hub=...)"
        )
    return load_longmemeval(path, question_date_in_text=config.question_date_in_text)


@dataclass(frozen=True)
class DatasetEntry:
    schema: type
    load: Callable[[Any, Path], Dataset]


ENTRY_BY_KIND: Mapping[str, DatasetEntry] = MappingProxyType(
    {
        "sim": DatasetEntry(SimDatasetConfig, _load_sim),
        "locomo": DatasetEntry(LoCoMoConfig, _load_locomo),
        "longmemeval": DatasetEntry(LongMemEvalConfig, _load_longmemeval),
    }
)


def _entry(kind: object) -> DatasetEntry:
    if not isinstance(kind, str) or kind not in ENTRY_BY_KIND:
        raise ConfigError(f"dataset.kind: unknown kind {kind!r} (expected one of {list(ENTRY_BY_KIND)})")
    return ENTRY_BY_KIND[str(kind)]


def dataset_config(cfg: Mapping[str, Any]) -> Any:
    """The validated config record of the `dataset` node `cfg` (its `kind` key selects the schema)."""
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"dataset: must be a mapping, got {type(cfg).__name__}")
    kind = cfg.get("kind")
    return parse_config(_entry(kind).schema, {k: v for k, v in cfg.items() if k != "kind"}, "dataset")


def load_dataset(cfg: Mapping[str, Any], base_dir: str | Path | None = None) -> Dataset:
    """The whole dataset named by the `dataset` node `cfg`."""
    return _entry(cfg.get("kind")).load(dataset_config(cfg), Path(base_dir or "."))
