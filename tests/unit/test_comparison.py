"""The comparison of optimizers on hand-built runs with known answers: the paired gain over questions x
seeds, the pairing against the reference optimizer, calls to 90% of the gain, pooled rows, and the
Markdown table and plot made from them."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from memtrace_loop.experiments.lab.compare import audit_note, optimizer_run, progress_points
from memtrace_loop.experiments.lab.comparison import (
    POOLED,
    OptimizerRun,
    QuestionOutcome,
    compare_runs,
    comparison_figure,
    markdown_report,
    paired_estimate,
    plot_comparison,
    rows_to_json,
    wilson_interval,
)
from memtrace_loop.pipeline.analysis.evaluation import bootstrap_ci
from memtrace_loop.pipeline.loop.costs import CandidateCosts, ProgressPoint, calls_to_fraction

from tests.support.tracking import InMemoryTracker


def questions(start: list[int], final: list[int]) -> tuple[QuestionOutcome, ...]:
    pairs = enumerate(zip(start, final, strict=True))
    return tuple(QuestionOutcome(f"q{i}", float(s), float(f)) for i, (s, f) in pairs)


def run(optimizer: str, system: str, seed: int, start: list[int], final: list[int], **costs) -> OptimizerRun:
    values = {"lm_calls": 100.0, "tokens": 1000.0, "prompt_chars": 50.0, "seconds": 1.0, **costs}
    return OptimizerRun(f"{optimizer}-{system}-{seed}", optimizer, system, seed, questions(start, final), **values)


def costs(candidates: int, screened_out: int, accepted: int, screen: int, full: int, audited: int = 0,
          would_pass: int = 0) -> CandidateCosts:
    return CandidateCosts(candidates, 0, screened_out, accepted, screen, full, audited, would_pass)


def curve(*points: tuple[float, float]) -> tuple[ProgressPoint, ...]:
    return tuple(ProgressPoint(i, calls, dev) for i, (calls, dev) in enumerate(points))


def row_of(rows, optimizer, system):
    (found,) = [r for r in rows if r.optimizer == optimizer and r.system == system]
    return found


# --------------------------------------------------------------------------- the paired gain


def test_the_gain_pools_every_question_of_every_seed_into_one_paired_bootstrap():
    seed0 = run("attribution", "mem0", 0, [0, 0, 1, 1], [1, 1, 1, 0])  # differences +1 +1 0 -1
    seed1 = run("attribution", "mem0", 1, [0, 0], [1, 1])  # +1 +1
    (row,) = compare_runs([seed0, seed1])
    pooled = [1.0, 1.0, 0.0, -1.0, 1.0, 1.0]
    assert row.gain.n == 6
    assert row.gain.mean == pytest.approx(3 / 6)  # not the mean of the two runs' gains (0.625)
    assert (row.gain.ci_low, row.gain.ci_high) == bootstrap_ci(pooled, n_resamples=1000, seed=0)
    assert row.gain_by_run == (0.25, 1.0)
    assert (row.start_accuracy, row.final_accuracy) == (pytest.approx(2 / 6), pytest.approx(5 / 6))
    assert row.seeds == (0, 1) and row.runs == 2


def test_the_interval_is_paired_not_two_independent_accuracies():
    # ten questions, all but one scored the same before and after: a small but sure gain
    start = [1, 0, 1, 0, 1, 0, 1, 0, 1, 0]
    final = [1, 0, 1, 0, 1, 0, 1, 0, 1, 1]
    (row,) = compare_runs([run("uniform", "rag", 0, start, final)])
    assert row.gain.mean == pytest.approx(0.1)
    assert row.gain.ci_low == 0.0 and row.gain.ci_high > 0.0  # unpaired accuracies would straddle zero widely


def test_paired_estimate_of_nothing_is_nan_with_n_zero():
    empty = paired_estimate([])
    assert empty.n == 0 and math.isnan(empty.mean) and math.isnan(empty.ci_low)


# --------------------------------------------------------------------------- calls to 90% of the gain


def test_calls_to_ninety_percent_is_the_first_iteration_reaching_it():
    progress = curve((100, 0.50), (200, 0.60), (300, 0.68), (400, 0.70))  # 90% of +0.20 is +0.18
    assert calls_to_fraction(progress) == 300
    assert calls_to_fraction(progress, 0.5) == 200
    assert calls_to_fraction(progress, 1.0) == 400


def test_calls_to_ninety_percent_counts_the_first_time_even_if_dev_falls_back_later():
    assert calls_to_fraction(curve((10, 0.5), (20, 0.8), (30, 0.7))) == 20  # final gain 0.2, reached at 20


def test_no_gain_means_no_calls_to_ninety_percent():
    assert calls_to_fraction(curve((10, 0.5), (20, 0.5))) is None
    assert calls_to_fraction(curve((10, 0.5), (20, 0.4))) is None
    assert calls_to_fraction(()) is None
    with pytest.raises(ValueError, match="fraction"):
        calls_to_fraction(curve((10, 0.5)), 0.0)


def test_rows_average_calls_to_ninety_percent_over_the_runs_that_gained():
    gained = run("attribution", "mem0", 0, [0], [1], progress=curve((100, 0.5), (250, 0.7), (400, 0.72)))
    gained2 = run("attribution", "mem0", 1, [0], [1], progress=curve((100, 0.5), (150, 0.9)))
    flat = run("attribution", "mem0", 2, [0], [0], progress=curve((100, 0.5), (300, 0.5)))
    (row,) = compare_runs([gained, gained2, flat])
    assert row.calls_to_90 == pytest.approx((250 + 150) / 2)
    assert row.runs_with_gain == 2 and row.runs == 3


def test_progress_points_put_the_dev_of_the_next_iteration_after_each_one():
    # dev is logged at the START of each iteration; iteration 1 accepted a candidate (+0.2)
    points = progress_points({0: 0.5, 1: 0.5, 2: 0.7}, 0.7, {0: 100.0, 1: 250.0, 2: 400.0})
    assert [(p.iteration, p.calls, p.dev_accuracy) for p in points] == [(0, 100, 0.5), (1, 250, 0.7), (2, 400, 0.7)]
    assert calls_to_fraction(points) == 250


# --------------------------------------------------------------------------- rows, pooling, the reference


def sweep() -> list[OptimizerRun]:
    # question ids repeat across systems and seeds: pairing must key on (system, seed, question)
    return [
        run("uniform", "mem0", 0, [0, 0, 1], [1, 0, 1], lm_calls=300),
        run("attribution", "mem0", 0, [0, 0, 1], [1, 1, 1], lm_calls=200),
        run("attribution", "rag", 0, [0, 1], [1, 1], lm_calls=100),
        run("uniform", "rag", 0, [0, 1], [0, 0], lm_calls=500),
    ]


def test_rows_per_system_then_pooled_with_the_reference_first():
    rows = compare_runs(sweep())
    assert [(r.optimizer, r.system) for r in rows] == [
        ("attribution", "mem0"), ("uniform", "mem0"), ("attribution", "rag"), ("uniform", "rag"),
        ("attribution", POOLED), ("uniform", POOLED),
    ]
    pooled = row_of(rows, "uniform", POOLED)
    assert pooled.gain.n == 5 and pooled.gain.mean == pytest.approx((1 + 0 + 0 + 0 - 1) / 5)
    assert pooled.lm_calls == pytest.approx(400) and pooled.runs == 2
    assert row_of(rows, "attribution", POOLED).gain.mean == pytest.approx(3 / 5)


def test_vs_reference_pairs_final_scores_on_the_same_system_seed_and_question():
    rows = compare_runs(sweep())
    assert row_of(rows, "attribution", "mem0").vs_reference is None
    mem0 = row_of(rows, "uniform", "mem0").vs_reference
    assert mem0.n == 3 and mem0.mean == pytest.approx(-1 / 3)  # q1: 0 vs 1
    pooled = row_of(rows, "uniform", POOLED).vs_reference
    # mem0: 0, -1, 0; rag: -1, -1  -> -3/5 (pairing by question id alone would mix the systems up)
    assert pooled.n == 5 and pooled.mean == pytest.approx(-3 / 5)
    assert compare_runs(sweep(), reference=None)[0].vs_reference is None


def test_units_missing_on_one_side_are_left_out_of_the_reference_pairing():
    runs = [run("attribution", "mem0", 0, [0, 0], [1, 1]), run("uniform", "mem0", 0, [0, 0, 0], [0, 1, 1])]
    vs = row_of(compare_runs(runs), "uniform", "mem0").vs_reference
    assert vs.n == 2 and vs.mean == pytest.approx(-0.5)


def test_one_system_has_no_pooled_rows_and_duplicates_are_refused():
    assert all(r.system != POOLED for r in compare_runs(sweep()[:2]))
    with pytest.raises(ValueError, match="two runs"):
        compare_runs([sweep()[0], sweep()[0]])


def test_a_run_with_a_question_twice_is_refused():
    with pytest.raises(ValueError, match="more than once"):
        OptimizerRun("r", "none", "rag", 0, (QuestionOutcome("q", 0, 0), QuestionOutcome("q", 1, 1)), 0, 0, 0, 0)


# --------------------------------------------------------------------------- the report


def test_markdown_report_has_every_row_the_interval_and_the_legend():
    rows = compare_runs(sweep())
    text = markdown_report(rows, budgets=["3000"] * 4)
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(lines) == 1 + len(rows)  # header + rows
    assert "vs attribution pp [95% CI]" in lines[0] and "calls to 90% gain" in lines[0]
    uniform_mem0 = next(line for line in lines if line.startswith("| uniform | mem0 |"))
    assert "+33.3 [" in uniform_mem0 and "(n=3)" in uniform_mem0 and "-33.3 [" in uniform_mem0
    assert "| **attribution** | **pooled** |" in text
    assert "Budget: 3000 LM calls per run" in text
    assert "different budgets" in markdown_report(rows, budgets=["3000", "3000", "2000", "3000"])
    assert "no `loop.budget_calls`" in markdown_report(rows)


def test_the_json_twin_has_no_nan():
    rows = compare_runs([run("none", "rag", 0, [1], [1])])
    data = rows_to_json(rows, {"reference": "attribution"})
    assert data["rows"][0]["calls_to_90"] is None and data["reference"] == "attribution"


def test_the_comparison_plot_is_a_png(tmp_path: Path):
    path = plot_comparison(compare_runs(sweep()), tmp_path / "comparison.png")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5_000
    assert plot_comparison([], tmp_path / "empty.png").exists()
    with pytest.raises(ValueError, match=r"\.png"):
        plot_comparison([], tmp_path / "comparison.svg")


# --------------------------------------------------------------------------- reading a logged run back


def logged_run(with_budget_metric: bool):
    tracker = InMemoryTracker()
    with tracker.start_run("optimize") as run_id:
        tracker.set_tags({"memtrace.optimizer": "attribution", "memtrace.system": "rag"})
        tracker.log_params({"seed": "7", "loop.budget_calls": "None"})
        for step, dev in enumerate([0.5, 0.5, 0.7]):
            tracker.log_metrics({"dev_judge_accuracy": dev}, step=step)
            if with_budget_metric:
                tracker.log_metrics({"lm_calls.budget_spent": 100.0 * (step + 1) ** 2}, step=step)
        tracker.log_metrics({"dev_final_judge_accuracy": 0.7, "lm_calls_made": 900.0, "lm_tokens_made": 5e4,
                             "final_prompt_chars": 321.0, "elapsed_s": 2.5})
        tracker.log_text('[{"question_id": "q1", "start": 0, "final": 1, "counted": true},'
                         ' {"question_id": "q2", "start": 1, "final": 1, "counted": false}]', "test_questions.json")
    return tracker, run_id


def test_a_run_logged_with_the_grouped_names_reads_back_the_same():
    """The `/` names (`metric_names`) a run logs now read back as the flat names of older runs do."""
    tracker = InMemoryTracker()
    with tracker.start_run("optimize") as run_id:
        tracker.set_tags({"memtrace.optimizer": "attribution", "memtrace.system": "rag"})
        tracker.log_params({"seed": "7", "loop.budget_calls": "None"})
        for step, dev in enumerate([0.5, 0.5, 0.7]):
            tracker.log_metrics({"dev/judge_accuracy": dev, "lm_calls/budget_spent": 100.0 * (step + 1) ** 2},
                                step=step)
        tracker.log_metrics({"dev/final/judge_accuracy": 0.7, "lm_calls/made": 900.0, "lm_tokens/prompt": 4e4,
                             "lm_tokens/completion": 1e4, "prompt_chars/final": 321.0, "time/elapsed_s": 2.5})
        tracker.log_text('[{"question_id": "q1", "start": 0, "final": 1, "counted": true}]', "test_questions.json")
    read = optimizer_run(tracker, run_id)
    assert (read.lm_calls, read.tokens, read.prompt_chars, read.seconds) == (900, 5e4, 321, 2.5)
    assert [(p.calls, p.dev_accuracy) for p in read.progress] == [(100, 0.5), (400, 0.7), (900, 0.7)]
    assert not read.calls_estimated


def test_a_logged_run_is_read_back_with_the_budget_metric_when_there_is_one():
    tracker, run_id = logged_run(with_budget_metric=True)
    read = optimizer_run(tracker, run_id)
    assert (read.optimizer, read.system, read.seed, read.budget) == ("attribution", "rag", 7, "")
    assert read.questions == (QuestionOutcome("q1", 0.0, 1.0),)  # uncounted questions left out
    assert (read.lm_calls, read.tokens, read.prompt_chars, read.seconds) == (900, 5e4, 321, 2.5)
    assert [(p.calls, p.dev_accuracy) for p in read.progress] == [(100, 0.5), (400, 0.7), (900, 0.7)]
    assert not read.calls_estimated and calls_to_fraction(read.progress) == 400


def test_without_the_budget_metric_the_calls_are_an_estimate_and_say_so():
    tracker, run_id = logged_run(with_budget_metric=False)
    read = optimizer_run(tracker, run_id)
    assert read.calls_estimated
    assert [p.calls for p in read.progress] == [300, 600, 900]  # 900 calls spread over three iterations
    assert "~600" in markdown_report(compare_runs([read]))


def _drawn(axes) -> int:
    """What an axes shows besides its frame: bars, error bars / points (the zero line is not data)."""
    lines = [line for line in axes.get_lines() if len(line.get_xdata()) and list(line.get_ydata()) != [0.0, 0.0]]
    return len(axes.patches) + len(axes.containers) + len(lines)


@pytest.mark.parametrize("systems", [("rag",), ("rag", "mem0")], ids=["one system", "two systems"])
def test_no_panel_of_the_comparison_plot_is_empty(systems):
    runs = [run(optimizer, system, seed, [0, 0, 1, 1], final)
            for system in systems for seed in (0, 1)
            for optimizer, final in (("attribution", [1, 1, 1, 1]), ("none", [0, 0, 1, 1]))]
    figure = comparison_figure(compare_runs(runs, reference="attribution"))
    gains, costs = figure.axes[:2]
    assert _drawn(gains) > 0 and _drawn(costs) > 0, [a.get_title() for a in figure.axes]
    points = set(costs.get_legend_handles_labels()[1])
    assert points == {"attribution", "none"}
    assert costs.get_title().startswith("rag: gain" if len(systems) == 1 else "Pooled gain")


# --------------------------------------------------------------------------- what candidates cost


def test_candidate_costs_are_summed_over_runs_and_shown_per_candidate_and_per_accepted():
    seed0 = run("attribution", "mem0", 0, [0], [1], candidates=costs(4, 2, 1, 100, 300))
    seed1 = run("attribution", "mem0", 1, [0], [1], candidates=costs(2, 0, 1, 40, 160))
    (row,) = compare_runs([seed0, seed1])
    assert row.candidates == costs(6, 2, 2, 140, 460)
    assert (row.candidates.per_candidate, row.candidates.per_accepted) == (100.0, 300.0)
    line = next(x for x in markdown_report([row]).splitlines() if x.startswith("| attribution | mem0 |"))
    assert line.endswith("| 100 (23 + 77) | 300 | 2/6 |")  # screen 140/6, whole-dev 460/6
    (old,) = compare_runs([run("none", "rag", 0, [1], [1])])  # a run logged before screening existed
    old_line = next(x for x in markdown_report([old]).splitlines() if x.startswith("| none | rag |"))
    assert old_line.endswith("| — | — | — |")


def test_the_screen_audit_is_pooled_with_a_wilson_interval():
    assert audit_note([run("none", "rag", 0, [1], [1])]) is None  # no run audited
    audited = [run("attribution", "mem0", s, [0], [1], candidates=costs(50, 60, 1, 0, 0, 60, n))
               for s, n in ((0, 1), (1, 0))]
    note = audit_note(audited)
    low, high = wilson_interval(1, 120)
    assert note is not None and "1 of 120 screened-out candidates" in note
    assert f"[{100 * low:.1f}, {100 * high:.1f}]" in note and low < 1 / 120 < high < 0.05
    assert wilson_interval(0, 10)[0] == pytest.approx(0.0) and wilson_interval(10, 10)[1] == pytest.approx(1.0)
    assert all(math.isnan(x) for x in wilson_interval(0, 0))
