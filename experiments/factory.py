"""Turning a composed Hydra config into the objects a run needs: dataset split, LMs, system, judge.

The only place where config names meet constructors. It does not run anything and does not log.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import dspy
import hydra
from hydra.core.hydra_config import HydraConfig
from memtrace_loop.memory_systems.base import MemorySystem
from memtrace_loop.memory_systems.registry import build_memory_system
from memtrace_loop.pipeline.backends.embeddings import build_embedder
from memtrace_loop.pipeline.backends.lm import LMSet, build_lm_set
from memtrace_loop.pipeline.core.records import Dataset
from memtrace_loop.pipeline.data.locomo import DataError, Split, parse_locomo, split_by_conversation
from memtrace_loop.pipeline.data.locomo import load_locomo as _load_locomo
from memtrace_loop.pipeline.data.longmemeval import load_longmemeval, load_longmemeval_hub
from memtrace_loop.pipeline.loop.runner import make_judge
from memtrace_loop.pipeline.sim.world import generate_locomo
from memtrace_loop.pipeline.tracking.export import apply_prompts, read_prompts
from omegaconf import DictConfig, OmegaConf


class ConfigError(ValueError):
    """A config value that cannot be used, named by its key."""


def to_plain(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(cfg, DictConfig):
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    return dict(cfg)


def launch_dir() -> Path:
    """The directory memtrace was started in (Hydra apps may run elsewhere); relative paths resolve here."""
    return Path(hydra.utils.get_original_cwd()) if HydraConfig.initialized() else Path.cwd()


def resolve(path: str | Path, base_dir: Path) -> Path:
    path = Path(path)
    return path if path.is_absolute() else base_dir / path


def with_prompt_file(system: MemorySystem, prompts: str | Path | None, base_dir: Path) -> MemorySystem:
    """`system` with the exported prompt set at `prompts` applied (unchanged when `prompts` is empty)."""
    return apply_prompts(system, read_prompts(resolve(prompts, base_dir))) if prompts else system


def load_dataset(cfg: Mapping[str, Any], base_dir: str | Path | None = None) -> Dataset:
    """The whole dataset named by `cfg` (`dataset` group)."""
    kind = cfg.get("kind")
    if kind == "sim":
        samples = generate_locomo(
            seed=int(cfg.get("seed", 0)),
            n_conversations=int(cfg.get("n_conversations", 8)),
            sessions_per_conversation=int(cfg.get("sessions_per_conversation", 6)),
            turns_per_session=int(cfg.get("turns_per_session", 14)),
        )
        return parse_locomo(samples, source=f"sim(seed={cfg.get('seed', 0)})")
    if kind == "locomo":
        path = resolve(str(cfg.get("path")), Path(base_dir or "."))
        if not path.exists():
            raise DataError(str(path), "LoCoMo file not found (set dataset.path=... or MEMTRACE_LOCOMO)")
        return _load_locomo(path)
    if kind == "longmemeval":
        date_in_text = bool(cfg.get("question_date_in_text", True))
        if cfg.get("hub"):
            return load_longmemeval_hub(
                str(cfg["hub"]), variant=cfg.get("variant"), split=str(cfg.get("hub_split", "train")),
                question_date_in_text=date_in_text,
            )
        path = resolve(str(cfg.get("path")), Path(base_dir or "."))
        if not path.exists():
            raise DataError(
                str(path), "LongMemEval file not found (set dataset.path=..., MEMTRACE_LONGMEMEVAL or dataset.hub=...)"
            )
        return load_longmemeval(path, question_date_in_text=date_in_text)
    raise ConfigError(f"dataset.kind: unknown kind {kind!r} (expected 'sim', 'locomo' or 'longmemeval')")


def select_split(dataset: Dataset, split: str, fractions: list[float], seed: int) -> Dataset:
    """`all`, or one split of a seeded split by conversation (ValueError naming the split otherwise)."""
    if split == "all":
        return dataset
    return split_by_conversation(dataset, fractions=tuple(fractions), seed=seed).select(split)


def secret_values(cfg: Mapping[str, Any]) -> tuple[str, ...]:
    """The values of every environment variable named by an `api_key_env` anywhere in the config."""
    names: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, Mapping):
            for key, value in node.items():
                if key == "api_key_env" and isinstance(value, str):
                    names.add(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(cfg)
    return tuple(v for v in (os.environ.get(n) for n in sorted(names)) if v)


def build_components(plain: Mapping[str, Any], base_dir: Path) -> tuple[LMSet, MemorySystem, dspy.Predict]:
    """The LMs, the memory system (task LM set, `prompts` file applied if given) and the judge."""
    lms = build_lm_set(plain["lm"])
    system = build_memory_system(plain["memory_system"], build_embedder(plain["embedder"]))
    system = with_prompt_file(system, plain.get("prompts"), base_dir)
    system.set_lm(lms.task)
    return lms, system, make_judge(lms.judge)


def splits_of(plain: Mapping[str, Any], base_dir: Path) -> Split:
    dataset = load_dataset(plain["dataset"], base_dir)
    return split_by_conversation(dataset, tuple(plain["splits"]["fractions"]), int(plain["splits"]["seed"]))
