"""The optimizers' settings records: the schema and single home of the defaults of each `optimizer` option.

`RewriteSettings` (`attribution`, `uniform`, `uniform_reasons`: the optimizers that rewrite the blamed
stages' instructions), `GepaSettings` (`gepa`, `gepa_blame`) and `NoSettings` (`none`). Records only,
DSPy-free: the config tree and its validation read them without importing an optimizer
(`optimizers.registry` names them with their builders). Nothing here optimizes anything.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

from memtrace_loop.pipeline.core.config import require

__all__ = ["DEFAULT_MAX_INSTRUCTION_CHARS", "GepaSettings", "NoSettings", "RewriteSettings"]

DEFAULT_MAX_INSTRUCTION_CHARS = 2000


@dataclass(frozen=True)
class RewriteSettings:
    """Settings of the optimizers that rewrite the blamed stages' instructions (the single home of their
    defaults; the `optimizer` config node of `attribution` and `uniform`)."""

    top_stages: int = 2  # stages rewritten (one candidate each) per iteration
    max_instruction_chars: int = DEFAULT_MAX_INSTRUCTION_CHARS
    max_feedback_chars: int = 4000

    def __post_init__(self) -> None:
        for key, value in asdict(self).items():
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{key} must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class GepaSettings:
    """The `optimizer` config node of `gepa` and `gepa_blame` (their spec's schema)."""

    max_metric_calls: int = 100  # added per loop iteration: questions GEPA may answer (minibatches + dev)
    reflection_minibatch_size: int = 3
    candidate_selection_strategy: Literal["pareto", "current_best"] = "pareto"
    use_merge: bool = False
    num_threads: int = 4
    seed: int = 0  # GEPA's seed

    def __post_init__(self) -> None:
        require(self, max_metric_calls=(1, None), reflection_minibatch_size=(1, None), num_threads=(1, None),
                seed=(0, None))


@dataclass(frozen=True)
class NoSettings:
    """The `none` baseline has no settings (the schema of its config node)."""

