"""Turning a validated app config (`experiments.config`) into the objects a run needs: dataset split,
LMs, system, judge, optimizer, attributor, each met through its registry; the run's stop token, ledger
and local servers come in one `RunServices`. It reads no config mapping, runs nothing and logs nothing.
The LM stack (DSPy, MLflow's prompt registry) is imported by the builders that need it, when called.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import hydra
from hydra.core.hydra_config import HydraConfig
from memtrace_loop.experiments.config import AttributeConfig, Chosen, OptimizeConfig, RunConfig
from memtrace_loop.memory_systems.registry import build_memory_system as build_memory_system  # for the tests
from memtrace_loop.memory_systems.registry import spec_of
from memtrace_loop.optimizers.registry import OPTIMIZERS
from memtrace_loop.pipeline.analysis.attribution.registry import attributor_from_settings
from memtrace_loop.pipeline.backends.embeddings import EmbedderConfig, build_embedder
from memtrace_loop.pipeline.backends.registry import build_lm_set
from memtrace_loop.pipeline.core.prompt_files import apply_prompts
from memtrace_loop.pipeline.core.records import Dataset
from memtrace_loop.pipeline.core.redaction import config_secrets
from memtrace_loop.pipeline.data.registry import DATASETS
from memtrace_loop.pipeline.data.registry import load_dataset as load_dataset  # for the tests
from memtrace_loop.pipeline.data.splits import SPLIT_NAMES, Split, split_by_conversation
from omegaconf import DictConfig, OmegaConf

if TYPE_CHECKING:
    import dspy
    from memtrace_loop.memory_systems.base import MemorySystem
    from memtrace_loop.optimizers.base import Optimizer
    from memtrace_loop.pipeline.analysis.attribution.protocol import Attributor
    from memtrace_loop.pipeline.backends.lm import LMSet
    from memtrace_loop.pipeline.backends.local_server import LocalServers
    from memtrace_loop.pipeline.backends.services import RunServices
    from memtrace_loop.pipeline.core.prompt_formats import PromptFormat
    from memtrace_loop.pipeline.tracking.prompt_registry import RegistryAccess


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


def with_prompt_file(
    system: MemorySystem, prompts: str | Path | None, base_dir: Path, formats: Sequence[PromptFormat] = (),
    registry: RegistryAccess | None = None,
) -> MemorySystem:
    """`system` with the prompt set `prompts` names applied (unchanged when empty): a file of our layout,
    a document of one of `formats` (only its stages change), or registered prompts read through
    `registry` (`registry:<system>@<alias>`, `prompts:/...`; `pipeline.tracking.prompt_registry`)."""
    if not prompts:
        return system
    from memtrace_loop.pipeline.tracking.prompt_registry import load_prompt_source  # MLflow's registry

    stages = system.prompt_set().stages()
    return apply_prompts(system, load_prompt_source(str(prompts), system.name, stages, base_dir, formats, registry))


def select_split(dataset: Dataset, split: str, fractions: Sequence[float], seed: int) -> Dataset:
    """`all`, or one split of a seeded split by conversation (ValueError naming an unknown split; an
    `EmptySplitError`, a ConfigError, naming the split and `splits.fractions` for an empty one)."""
    if split == "all":
        return dataset
    return split_by_conversation(dataset, fractions=tuple(fractions), seed=seed).select(split)


def secret_values(cfg: Mapping[str, Any]) -> tuple[str, ...]:
    """The values of the environment variables every `api_key_env` names, and the credentials in its URLs."""
    return config_secrets(cfg, os.environ)


def load_chosen_dataset(dataset: Chosen[Any], base_dir: Path) -> Dataset:
    return DATASETS.get(dataset.name).load(dataset.settings, base_dir)


def build_system(memory_system: Chosen[Any], embedder: EmbedderConfig) -> MemorySystem:
    return spec_of(memory_system.name).build(memory_system.settings, build_embedder(embedder))


def build_prompted_system(
    memory_system: Chosen[Any], embedder: EmbedderConfig, prompts: str | None, base_dir: Path,
    registry: RegistryAccess | None = None,
) -> MemorySystem:
    """`build_system` with the `prompts` file (any layout of its spec's `prompt_formats`) or registered
    prompts (read through `registry`) applied."""
    formats = spec_of(memory_system.name).prompt_formats
    return with_prompt_file(build_system(memory_system, embedder), prompts, base_dir, formats, registry)


def build_components(
    config: RunConfig | OptimizeConfig, base_dir: Path, services: RunServices | None = None
) -> tuple[LMSet, MemorySystem, dspy.Predict]:
    """The LMs, the memory system (task LM set, `prompts` applied) and the judge; every LM shares the
    run's `services` (stop token, the ledger its role's calls count into, local servers)."""
    from memtrace_loop.pipeline.analysis.judge import make_judge
    from memtrace_loop.pipeline.tracking.prompt_registry import RegistryAccess

    lms = build_lm_set(config.lm, services)
    registry = RegistryAccess(config.tracking.uri, config.tracking.experiment)
    system = build_prompted_system(config.memory_system, config.embedder, config.prompts, base_dir, registry)
    system.set_lm(lms.task)
    return lms, system, make_judge(lms.judge)


def build_optimizer(
    config: OptimizeConfig, lms: LMSet, system: MemorySystem, attributor: Attributor, work_dir: Path
) -> Optimizer:
    """The optimizer of the `optimizer` group, built once for its run (its own files under `work_dir`)."""
    from memtrace_loop.optimizers.base import OptimizerSetup

    setup = OptimizerSetup(config.optimizer.settings, lms.rewriter, system, attributor, work_dir)
    return OPTIMIZERS.get(config.optimizer.name).build(setup)


@contextmanager
def local_models() -> Iterator[LocalServers]:
    """What an app that builds LMs runs inside: the run's `LocalServers` (a `local` role's llama.cpp
    server stops on the way out, also on an error or interruption) and DSPy's adapter set to
    `StructuredOutputAdapter` (JSON-schema output for LMs with `structured_output: json_schema`, DSPy's
    ChatAdapter for the rest), the previous adapter restored afterwards."""
    import dspy
    from memtrace_loop.pipeline.backends.local_server import LocalServers
    from memtrace_loop.pipeline.backends.structured_output import StructuredOutputAdapter

    previous = dspy.settings.adapter
    dspy.configure(adapter=StructuredOutputAdapter())
    try:
        with LocalServers() as servers:
            yield servers
    finally:
        dspy.configure(adapter=previous)


def attributor_of(
    config: RunConfig | OptimizeConfig | AttributeConfig, lms: LMSet | None, system: MemorySystem | None,
    judge: dspy.Predict | None,
) -> Attributor:
    """The attributor of the `attributor` group, with the run's embedder (matching by meaning) and
    `system` + `judge` (replay verification)."""
    chosen = config.attributor
    return attributor_from_settings(chosen.name, chosen.settings, lms, system, judge, build_embedder(config.embedder))


def splits_of(config: OptimizeConfig, base_dir: Path) -> Split:
    """Train / dev / test of the configured dataset, each non-empty (else an `EmptySplitError`)."""
    dataset = load_chosen_dataset(config.dataset, base_dir)
    return split_by_conversation(dataset, config.splits.fractions, config.splits.seed).require(*SPLIT_NAMES)


def run_split(config: RunConfig, base_dir: Path) -> Dataset:
    """The dataset split `memtrace run` runs on (`split=all`: the whole dataset)."""
    dataset = load_chosen_dataset(config.dataset, base_dir)
    return select_split(dataset, config.split, config.splits.fractions, config.splits.seed)
