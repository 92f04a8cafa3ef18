"""The loop's settings records: `LoopSettings` (budget, gate, patience, ...) and `ScreenSettings` (`loop.screen`).

Their field defaults are THE defaults of the `loop` config node (`experiments.config.LoopConfig` reads
them). Records only, DSPy-free, so the config tree and its validation read them without importing the
loop (`pipeline.loop.optimization`, `pipeline.loop.screening` use them). Nothing here runs anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["LoopSettings", "ScreenSettings"]


@dataclass(frozen=True)
class ScreenSettings:
    """`loop.screen`: whether candidates are screened, the guard's size, and the audit switch (a
    diagnostic: screened-out candidates are also evaluated on the whole dev split, outside the budget,
    to count how many would have passed the gate; the loop's decisions do not change)."""

    enabled: bool = True
    guard_fraction: float = 0.25  # share of the incumbent's correct dev questions sampled as the guard
    min_guard: int = 5
    audit: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.guard_fraction <= 1 or self.min_guard < 0:
            raise ValueError(
                f"loop.screen: guard_fraction must be in [0, 1] and min_guard >= 0, got "
                f"{self.guard_fraction} and {self.min_guard}"
            )



@dataclass(frozen=True)
class LoopSettings:
    max_iterations: int = 6  # the default of `loop.max_iterations` (conf/optimize.yaml has always run 6)
    patience: int = 2
    min_gain: float = 0.02  # paired dev-accuracy gain a candidate must reach to be accepted
    max_candidates: int = 2  # candidates evaluated per iteration: the budget
    exclude_categories: tuple[int, ...] = (5,)
    workers: int = 8
    seed: int = 0
    budget_calls: int = 0  # task + rewriter + attributor LM calls; 0: no budget (see the module doc)
    budget_counts_cached: bool = True  # calls served by DSPy's response cache count against the budget
    verify_cases: int | None = 8  # train failures a replay check verifies per iteration (a sample; None: all)
    train_conversations: int = 0  # train conversations each incumbent is evaluated and attributed on (0: all)
    screen: ScreenSettings = field(default_factory=ScreenSettings)  # candidate screening (pipeline.loop.screening)

