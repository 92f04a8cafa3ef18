"""`RetryPolicy`: how long one logical LM call may try (the record; the loop is `pipeline.backends.resilience`).

Its field defaults are THE defaults of the `lm.<role>` keys `num_retries`, `retry_after_cap_s` and
`deadline_s` (`pipeline.backends.lm.LMConfig`), so it lives apart from the retry loop, which imports
DSPy's lm15 errors: the config tree and its validation read it without importing DSPy. It retries nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RetryPolicy"]


@dataclass(frozen=True)
class RetryPolicy:
    """How long one logical call may try: the rules are `pipeline.backends.resilience`'s docstring."""

    num_retries: int = 5
    retry_after_cap_s: float = 60.0
    deadline_s: float = 300.0

    def __post_init__(self) -> None:
        if self.num_retries < 0 or self.retry_after_cap_s <= 0 or self.deadline_s <= 0:
            raise ValueError("num_retries must be >= 0, retry_after_cap_s and deadline_s > 0")

    @property
    def attempts(self) -> int:
        return self.num_retries + 1

    def backoff(self, retry: int) -> float:
        """The wait before retry number `retry` (1-based) when the server names none: 1, 2, 4, ... s."""
        return float(min(2 ** min(retry - 1, 16), self.retry_after_cap_s))
