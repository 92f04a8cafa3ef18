"""What candidates cost: budget calls per candidate and per accepted one, the screen's verdicts and audit,
and the calls a run spent to reach 90% of its final dev gain. Pure functions over a run's iteration history
(what checkpoints keep, so the figures survive a resume); it counts no calls itself.

>>> from memtrace_loop.pipeline.analysis.blame import BlameTable
>>> from memtrace_loop.pipeline.loop.summaries import CandidateSummary, IterationSummary
>>> c = lambda ok, out, s, f: CandidateSummary(("respond",), 0.5, 0.1, (0, 0.2), ok, "", screened_out=out,
...                                           screen_calls=s, full_calls=f)
>>> h = (IterationSummary(0, .4, .40, (0, 1), BlameTable(), (), 100),
...      IterationSummary(1, .4, .40, (0, 1), BlameTable(), (c(False, True, 10, 0), c(True, False, 10, 50)), 200))
>>> costs = candidate_costs(h)
>>> costs.candidates, costs.screened_out, costs.per_candidate, costs.per_accepted
(2, 1, 35.0, 70.0)
>>> calls_to_gain(h, dev_final=0.6)
200.0
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from memtrace_loop.pipeline.loop.summaries import IterationSummary

__all__ = ["GAIN_FRACTION", "CandidateCosts", "ProgressPoint", "calls_to_fraction", "calls_to_gain", "candidate_costs"]

GAIN_FRACTION = 0.9  # calls to reach this fraction of the final gain
_TOLERANCE = 1e-12


@dataclass(frozen=True)
class ProgressPoint:
    """After one iteration: cumulative LM calls spent by its end, the incumbent's dev accuracy."""

    iteration: int
    calls: float
    dev_accuracy: float


@dataclass(frozen=True)
class CandidateCosts:
    """A run's candidates and their budget calls (means are NaN when there is nothing to average)."""

    candidates: int
    screened: int  # candidates with a screen (screening on, and the screen smaller than dev)
    screened_out: int
    accepted: int
    screen_calls: int
    full_calls: int
    audited: int  # screened-out candidates also evaluated fully (`loop.screen.audit`)
    audit_would_pass: int  # of those, how many reached the gate's min_gain on the whole dev split

    @property
    def calls(self) -> int:
        return self.screen_calls + self.full_calls

    @property
    def per_candidate(self) -> float:
        return self.calls / self.candidates if self.candidates else math.nan

    @property
    def per_accepted(self) -> float:
        """Candidate calls (screens and whole-dev evaluations, rejected ones included) per accepted candidate."""
        return self.calls / self.accepted if self.accepted else math.nan


def candidate_costs(history: Sequence[IterationSummary], min_gain: float = 0.0) -> CandidateCosts:
    """The candidates of every iteration in `history`, counted (`min_gain`: the gate's, for the audit)."""
    candidates = [c for summary in history for c in summary.candidates]
    audited = [c for c in candidates if c.screened_out and c.audit_gain is not None]
    return CandidateCosts(
        candidates=len(candidates),
        screened=sum(1 for c in candidates if c.screen_calls or c.screened_out),
        screened_out=sum(1 for c in candidates if c.screened_out),
        accepted=sum(1 for c in candidates if c.accepted),
        screen_calls=sum(c.screen_calls for c in candidates),
        full_calls=sum(c.full_calls for c in candidates),
        audited=len(audited),
        audit_would_pass=sum(1 for c in audited if c.audit_gain is not None and c.audit_gain >= min_gain),
    )


def calls_to_fraction(progress: Sequence[ProgressPoint], fraction: float = GAIN_FRACTION) -> float | None:
    """Cumulative LM calls spent when the dev gain over iteration 0 first reached `fraction` of the final
    (the last point's); None when the run did not gain or has no progress."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    points = sorted(progress, key=lambda p: p.iteration)
    if not points:
        return None
    baseline, final = points[0].dev_accuracy, points[-1].dev_accuracy
    total = final - baseline
    if not math.isfinite(total) or total <= _TOLERANCE:
        return None
    for point in points:
        if point.dev_accuracy - baseline >= fraction * total - _TOLERANCE:
            return point.calls
    return points[-1].calls  # unreachable: the last point reaches the whole gain


def calls_to_gain(
    history: Sequence[IterationSummary], dev_final: float, fraction: float = GAIN_FRACTION
) -> float | None:
    """`calls_to_fraction` over the history: `history[i].dev_accuracy` is the incumbent at the START of
    iteration i, so the one after iteration i is the start of i + 1 (or `dev_final`)."""
    ordered = sorted(history, key=lambda s: s.iteration)
    points = [
        ProgressPoint(s.iteration, float(s.budget_spent),
                      ordered[i + 1].dev_accuracy if i + 1 < len(ordered) else dev_final)
        for i, s in enumerate(ordered)
    ]
    return calls_to_fraction(points, fraction)
