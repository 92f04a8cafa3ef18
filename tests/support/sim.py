"""Test helpers for the simulated world: the stand-in LM without a response cache, and sim datasets."""

from __future__ import annotations

import dspy

from pipeline.data import parse_locomo
from pipeline.lm import LMConfig, build_lm
from pipeline.records import Dataset
from pipeline.sim.world import generate_locomo


def sim_lm() -> dspy.LM:
    """The deterministic stand-in LM, uncached so every test sees the current stand-in code."""
    return build_lm(LMConfig(backend="sim", model="stand-in", cache=False))


def sim_dataset(seed: int = 0, n_conversations: int = 4) -> Dataset:
    return parse_locomo(generate_locomo(seed=seed, n_conversations=n_conversations), "sim")
