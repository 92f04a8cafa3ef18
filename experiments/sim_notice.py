"""Say loudly when a run's numbers come from the test world: the stand-in LM on a real dataset.

On LoCoMo or LongMemEval the stand-in LM (`lm` backend `sim`) still runs end to end, but its scores
measure the test world, not a model. `stand_in_notice(config)` is the one sentence that says so (None
otherwise); `stand_in_tags(config)` are every run's MLflow tags (`memtrace.test_world`, and the note).
The apps print the notice at start and end, tag the run and put it on report.html. It prints nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memtrace_loop.pipeline.backends.lm import LMSetConfig

if TYPE_CHECKING:
    from memtrace_loop.experiments.config import AttributeConfig, OptimizeConfig, RunConfig

    _Configured = RunConfig | OptimizeConfig | AttributeConfig  # a validated app config with an LM set and dataset

SIM_BACKEND = "sim"
REAL_DATASET_KINDS = ("locomo", "longmemeval")
SCORED_ROLES = ("task", "judge")  # the roles whose LM makes the scores: the answers and their verdicts
TEST_WORLD_TAG = "memtrace.test_world"
TEST_WORLD_NOTE_TAG = "memtrace.test_world.note"


def stand_in_roles(lm: LMSetConfig) -> tuple[str, ...]:
    """The scored roles (`task`, `judge`) whose LM is the stand-in (`backend: sim`)."""
    return tuple(role for role in SCORED_ROLES if getattr(lm, role).backend == SIM_BACKEND)


def stand_in_notice(config: _Configured) -> str | None:
    """The warning for the stand-in LM on a real dataset (None otherwise)."""
    kind = config.dataset.name
    roles = stand_in_roles(config.lm)
    if kind not in REAL_DATASET_KINDS or not roles:
        return None
    return (
        f"TEST WORLD: the stand-in LM (lm backend 'sim', role(s) {', '.join(roles)}) runs on the benchmark "
        f"dataset '{kind}': every score here comes from the simulated test world, not from a language "
        "model. Use a real model (e.g. lm=openai with your endpoint) to measure one."
    )


def stand_in_tags(config: _Configured) -> dict[str, str]:
    """`memtrace.test_world` (true when the stand-in answers or judges) and, on real data, the notice."""
    tags = {TEST_WORLD_TAG: str(bool(stand_in_roles(config.lm))).lower()}
    notice = stand_in_notice(config)
    if notice is not None:
        tags[TEST_WORLD_NOTE_TAG] = notice
    return tags
