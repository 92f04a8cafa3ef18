"""The simulated world as a dataset kind (`dataset=sim`): its config record and loader, as `SPEC`.

Reached only through the dataset registry (`pipeline.data.registry`), like the rest of the sim world.
It does not generate anything itself (`pipeline.sim.world` does) or split the dataset.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from memtrace_loop.pipeline.core.config import require, require_categories
from memtrace_loop.pipeline.core.records import CATEGORY_NAMES, Dataset
from memtrace_loop.pipeline.data.locomo import parse_locomo
from memtrace_loop.pipeline.data.spec import DatasetSpec
from memtrace_loop.pipeline.sim.world import generate_locomo


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


def load_configured(config: SimDatasetConfig, base_dir: Path) -> Dataset:
    samples = generate_locomo(
        seed=config.seed, n_conversations=config.n_conversations,
        sessions_per_conversation=config.sessions_per_conversation, turns_per_session=config.turns_per_session,
    )
    return parse_locomo(samples, source=f"sim(seed={config.seed})")


SPEC = DatasetSpec(SimDatasetConfig, load_configured)
