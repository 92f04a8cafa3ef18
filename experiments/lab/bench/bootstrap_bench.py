"""Bootstrap CIs, ours vs scipy.stats.bootstrap: `python -m memtrace_loop.experiments.lab.bench.bootstrap_bench`.

Both draw the same resamples (`np.random.default_rng(seed).integers(0, n, (n_resamples, n))`) and take
the mean of each; scipy is called with `method="percentile"`, the same confidence level, resample
count and a generator of the same seed. The table gives, per kind of input (0/1 judge scores as in
our reports, and normal values), how many intervals are bit-identical, the largest difference of an
interval end, and the time per interval.
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable, Sequence

import numpy as np
from memtrace_loop.pipeline.analysis.evaluation import bootstrap_ci
from rich.console import Console
from rich.table import Table
from scipy import stats


def scipy_ci(values: Sequence[float], n_resamples: int = 1000, confidence: float = 0.95, seed: int = 0
             ) -> tuple[float, float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns about degenerate (all-equal) bootstrap distributions
        result = stats.bootstrap((np.asarray(values, dtype=float),), np.mean, n_resamples=n_resamples,
                                 confidence_level=confidence, method="percentile",
                                 rng=np.random.default_rng(seed), vectorized=True)
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def inputs(kind: str, count: int, seed: int) -> list[tuple[np.ndarray, int]]:
    gen = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        n = int(gen.integers(2, 400))
        values = (gen.random(n) < gen.random()).astype(float) if kind == "judge 0/1" else gen.normal(size=n)
        out.append((values, int(gen.integers(0, 10))))
    return out


def timed(ci: Callable[..., tuple[float, float]], cases: list[tuple[np.ndarray, int]]) -> tuple[list, float]:
    started = time.perf_counter()
    out = [ci(values, seed=seed) for values, seed in cases]
    return out, 1e3 * (time.perf_counter() - started) / max(len(cases), 1)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=300)
    args = parser.parse_args(argv)
    table = Table(title="bootstrap_ci vs scipy.stats.bootstrap(method='percentile'), 1000 resamples, 95%")
    for column in ("input", "intervals", "identical", "max |end diff|", "ours ms", "scipy ms"):
        table.add_column(column, justify="left" if column == "input" else "right")
    for kind in ("judge 0/1", "normal"):
        cases = inputs(kind, args.cases, seed=123)
        ours, ours_ms = timed(bootstrap_ci, cases)
        theirs, scipy_ms = timed(scipy_ci, cases)
        same = sum(a == b for a, b in zip(ours, theirs, strict=True))
        diff = max(max(abs(a[0] - b[0]), abs(a[1] - b[1])) for a, b in zip(ours, theirs, strict=True))
        table.add_row(kind, str(len(cases)), str(same), f"{diff:.1e}", f"{ours_ms:.2f}", f"{scipy_ms:.2f}")
    Console().print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
