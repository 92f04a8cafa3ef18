"""Turning a composed (and validated, see `experiments.config`) Hydra config into the objects a run
needs: dataset split, LMs, system, judge, attributor. Config names meet constructors through the registries
(`pipeline.backends.registry`, `pipeline.data.registry`, `memory_systems.registry`,
`optimizers.registry`, `pipeline.analysis.attribution.registry`). It does not run anything and does not log.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dspy
import hydra
from hydra.core.hydra_config import HydraConfig
from memtrace_loop.memory_systems.base import MemorySystem
from memtrace_loop.memory_systems.registry import build_memory_system
from memtrace_loop.pipeline.analysis.attribution.protocol import Attributor
from memtrace_loop.pipeline.analysis.attribution.registry import build_attributor
from memtrace_loop.pipeline.backends.call_count import CallLedger
from memtrace_loop.pipeline.backends.embeddings import build_embedder
from memtrace_loop.pipeline.backends.failure_guard import FailureGuard
from memtrace_loop.pipeline.backends.lm import LMSet
from memtrace_loop.pipeline.backends.local_server import LocalServers
from memtrace_loop.pipeline.backends.registry import build_lm_set
from memtrace_loop.pipeline.backends.retry_ledger import RetryLedger
from memtrace_loop.pipeline.backends.structured_output import StructuredOutputAdapter
from memtrace_loop.pipeline.core.config import ConfigError
from memtrace_loop.pipeline.core.prompt_files import read_prompts
from memtrace_loop.pipeline.core.records import Dataset
from memtrace_loop.pipeline.core.redaction import config_secrets
from memtrace_loop.pipeline.core.stop import StopToken
from memtrace_loop.pipeline.data.locomo import SPLIT_NAMES, Split, split_by_conversation
from memtrace_loop.pipeline.data.registry import load_dataset
from memtrace_loop.pipeline.loop.runner import make_judge
from memtrace_loop.pipeline.tracking.export import apply_prompts
from omegaconf import DictConfig, OmegaConf


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


def select_split(dataset: Dataset, split: str, fractions: list[float], seed: int) -> Dataset:
    """`all`, or one split of a seeded split by conversation (ValueError naming an unknown split; an
    `EmptySplitError`, a ConfigError, naming the split and `splits.fractions` for an empty one)."""
    if split == "all":
        return dataset
    return split_by_conversation(dataset, fractions=tuple(fractions), seed=seed).select(split)


def secret_values(cfg: Mapping[str, Any]) -> tuple[str, ...]:
    """The values of every environment variable named by an `api_key_env` anywhere in the config, and
    the credentials inside its URLs (`pipeline.core.redaction.config_secrets`)."""
    return config_secrets(cfg, os.environ)


def build_components(
    plain: Mapping[str, Any],
    base_dir: Path,
    calls: CallLedger | None = None,
    *,
    stop: StopToken | None = None,
    guard: FailureGuard | None = None,
    retries: RetryLedger | None = None,
    servers: LocalServers | None = None,
) -> tuple[LMSet, MemorySystem, dspy.Predict]:
    """The LMs, the memory system (task LM set, `prompts` file applied if given) and the judge. With
    `calls`, every LM is a copy counting its role's calls into that ledger; `stop`, `guard` and
    `retries` are the run's stop token, failure guard and retry ledger, shared by every LM; `servers`
    the run's local llama.cpp servers (`lm=local`; see `local_models`)."""
    lms = build_lm_set(plain["lm"], stop=stop, guard=guard, retries=retries, servers=servers)
    if calls is not None:
        lms = calls.counted(lms)
    system = build_memory_system(plain["memory_system"], build_embedder(plain["embedder"]))
    system = with_prompt_file(system, plain.get("prompts"), base_dir)
    system.set_lm(lms.task)
    return lms, system, make_judge(lms.judge)


@contextmanager
def local_models() -> Iterator[LocalServers]:
    """What an app that builds LMs runs inside: the run's `LocalServers` (a `local` role's llama.cpp
    server starts when its LM is built and stops on the way out, also on an error or interruption)
    and DSPy's adapter set to `StructuredOutputAdapter` (JSON-schema output for the LMs configured
    with `structured_output: json_schema`; every other LM as with DSPy's default ChatAdapter),
    the previous adapter restored afterwards."""
    previous = dspy.settings.adapter
    dspy.configure(adapter=StructuredOutputAdapter())
    try:
        with LocalServers() as servers:
            yield servers
    finally:
        dspy.configure(adapter=previous)


__all__ = [
    "ConfigError",
    "attributor_of",
    "build_components",
    "build_memory_system",
    "launch_dir",
    "load_dataset",
    "local_models",
    "resolve",
    "secret_values",
    "select_split",
    "splits_of",
    "to_plain",
    "with_prompt_file",
]


def attributor_of(
    plain: Mapping[str, Any], lms: LMSet | None, system: MemorySystem | None, judge: dspy.Predict | None
) -> Attributor:
    """The attributor the `attributor` node selects (lineage when the config has none), with the run's
    embedder for matching by meaning and `system` + `judge` for replay verification."""
    node = plain.get("attributor") or {"name": "lineage"}
    embedder = build_embedder(plain["embedder"]) if "embedder" in plain else None
    return build_attributor(node, lms, system, judge, embedder)


def splits_of(plain: Mapping[str, Any], base_dir: Path) -> Split:
    """Train / dev / test of the configured dataset, each with conversations and questions (else an
    `EmptySplitError` naming the split and `splits.fractions`)."""
    dataset = load_dataset(plain["dataset"], base_dir)
    split = split_by_conversation(dataset, tuple(plain["splits"]["fractions"]), int(plain["splits"]["seed"]))
    return split.require(*SPLIT_NAMES)
