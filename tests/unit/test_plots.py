"""Plots render valid, deterministic PNGs from small hand-made inputs."""

from __future__ import annotations

import math
import struct
from pathlib import Path
from types import MappingProxyType

import pytest
from memtrace_loop.pipeline.analysis.attribution.records import Tunable
from memtrace_loop.pipeline.analysis.blame import BlameTable, StageBlame
from memtrace_loop.pipeline.tracking.plots import IterationScore, plot_blame, plot_scores

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    assert len(data) > 5_000  # a real picture, not an empty canvas
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _table(*rows: tuple[str, str, int]) -> BlameTable:
    total = sum(count for _, _, count in rows)
    return BlameTable(
        tuple(
            StageBlame(
                stage, Tunable(tunable), count, count / total, MappingProxyType({"ExtractionError": count}), ("q1",)
            )
            for stage, tunable, count in rows
        ),
        total,
    )


SCORES = [
    IterationScore(0, 0.42, 0.35, 0.50, train_accuracy=0.45),
    IterationScore(1, 0.48, 0.40, 0.56, train_accuracy=0.52, accepted=(0.48,), rejected=(0.40, 0.44)),
    IterationScore(2, 0.48, 0.40, 0.56, rejected=(0.45, 0.47, 0.43)),
    IterationScore(3, 0.55, 0.47, 0.62, train_accuracy=0.60, accepted=(0.55,)),
]

BLAME = [
    (0, _table(("extract", "prompt", 12), ("decide", "prompt", 8), ("retrieve", "knobs", 5), ("respond", "prompt", 3))),
    (1, _table(("decide", "prompt", 9), ("extract", "prompt", 7), ("retrieve", "knobs", 4), ("respond", "prompt", 2))),
    (2, _table(("decide", "prompt", 6), ("retrieve", "knobs", 5), ("respond", "prompt", 4), ("extract", "prompt", 3))),
]


def test_both_plots_render_valid_pngs(tmp_path: Path) -> None:
    scores = plot_scores(SCORES, tmp_path / "out" / "scores.png")
    blame = plot_blame(BLAME, tmp_path / "out" / "blame.png")
    assert scores == tmp_path / "out" / "scores.png"
    assert blame == tmp_path / "out" / "blame.png"
    assert _png_size(scores)[0] > 400
    assert _png_size(blame)[0] > 400


def test_plots_are_deterministic_and_order_independent(tmp_path: Path) -> None:
    a = plot_scores(SCORES, tmp_path / "a.png").read_bytes()
    b = plot_scores(list(reversed(SCORES)), tmp_path / "b.png").read_bytes()
    assert a == b
    c = plot_blame(BLAME, tmp_path / "c.png").read_bytes()
    d = plot_blame(list(reversed(BLAME)), tmp_path / "d.png").read_bytes()
    assert c == d


def test_edge_cases_still_render(tmp_path: Path) -> None:
    _png_size(plot_scores([], tmp_path / "empty_scores.png"))
    _png_size(plot_blame([], tmp_path / "empty_blame.png"))
    _png_size(plot_blame([(0, BlameTable())], tmp_path / "no_blame.png"))
    single = IterationScore(0, 0.3, math.nan, math.nan, accepted=(0.3,))
    _png_size(plot_scores([single], tmp_path / "single.png"))


def test_bad_inputs_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"\.png"):
        plot_scores(SCORES, tmp_path / "scores.jpg")
    with pytest.raises(ValueError, match="unique"):
        plot_scores([SCORES[0], SCORES[0]], tmp_path / "dup.png")
    with pytest.raises(ValueError, match="unique"):
        plot_blame([BLAME[0], BLAME[0]], tmp_path / "dup.png")


def test_no_pyplot_state_is_left_behind(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt  # imported here only to inspect its global figure list

    before = plt.get_fignums()
    plot_scores(SCORES, tmp_path / "s.png")
    plot_blame(BLAME, tmp_path / "b.png")
    assert plt.get_fignums() == before
