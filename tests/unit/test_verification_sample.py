"""Which failures of a run the replay check samples: every blamed stage gets its turn, up to the limit."""

from __future__ import annotations

import pytest
from memtrace_loop.experiments.config import LoopConfig
from memtrace_loop.pipeline.analysis.attribution.verification import verification_sample


@pytest.mark.parametrize(
    ("stages", "limit", "expected"),
    [
        ("xxxyz", 3, [0, 3, 4]),  # one per stage first, most blamed stage first
        ("xxxyz", 4, [0, 1, 3, 4]),  # then the most blamed stage's next
        ("xxxyz", None, [0, 1, 2, 3, 4]),  # no limit: all
        ("xxxyz", 9, [0, 1, 2, 3, 4]),
        ("zyyx", 2, [1, 3]),  # y (2 blames) first, then the tie x, z by name: x
        ("", 3, []),
    ],
)
def test_sample_spreads_over_blamed_stages(stages, limit, expected):
    assert sorted(verification_sample(stages, limit)) == sorted(expected)


def test_the_sample_bound_is_validated():
    with pytest.raises(ValueError, match="verify_cases"):
        LoopConfig(verify_cases=0)
    assert LoopConfig(verify_cases=None).verify_cases is None
    assert LoopConfig().verify_cases == 8
