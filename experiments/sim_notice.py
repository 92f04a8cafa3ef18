"""Say loudly when a run's numbers come from the test world: the stand-in LM on a real dataset.

The stand-in LM (`lm` backend `sim`) answers and judges from the simulated world's rules; on the
simulated dataset that is the offline default, on a real dataset (LoCoMo, LongMemEval) it still runs
end to end but its scores (mem0 on the LoCoMo subset: 6.0% judge accuracy) measure the test world, not a model.
`stand_in_notice(plain)` is the one sentence that says so (None when the numbers are not test-world
numbers on real data); `stand_in_tags(plain)` are the MLflow tags of every run: `memtrace.test_world`
(`true` whenever the stand-in answers or judges) and, with the notice, `memtrace.test_world.note`.
The apps print the notice as a WARNING at the start and the end, tag the run and put it on report.html
as a banner. This module decides nothing else and prints nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SIM_BACKEND = "sim"
REAL_DATASET_KINDS = ("locomo", "longmemeval")
SCORED_ROLES = ("task", "judge")  # the roles whose LM makes the scores: the answers and their verdicts
TEST_WORLD_TAG = "memtrace.test_world"
TEST_WORLD_NOTE_TAG = "memtrace.test_world.note"


def stand_in_roles(plain: Mapping[str, Any]) -> tuple[str, ...]:
    """The scored roles (`task`, `judge`) whose LM is the stand-in (`backend: sim`)."""
    lms = plain.get("lm") or {}
    return tuple(role for role in SCORED_ROLES if (lms.get(role) or {}).get("backend") == SIM_BACKEND)


def stand_in_notice(plain: Mapping[str, Any]) -> str | None:
    """The warning for the stand-in LM on a real dataset (None otherwise)."""
    kind = (plain.get("dataset") or {}).get("kind")
    roles = stand_in_roles(plain)
    if kind not in REAL_DATASET_KINDS or not roles:
        return None
    return (
        f"TEST WORLD: the stand-in LM (lm backend 'sim', role(s) {', '.join(roles)}) runs on the benchmark "
        f"dataset '{kind}': every score here comes from the simulated test world, not from a language "
        "model. Use a real model (e.g. lm=openai with your endpoint) to measure one."
    )


def stand_in_tags(plain: Mapping[str, Any]) -> dict[str, str]:
    """`memtrace.test_world` (true when the stand-in answers or judges) and, on real data, the notice."""
    tags = {TEST_WORLD_TAG: str(bool(stand_in_roles(plain))).lower()}
    notice = stand_in_notice(plain)
    if notice is not None:
        tags[TEST_WORLD_NOTE_TAG] = notice
    return tags
