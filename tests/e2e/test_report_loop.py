"""report.html of a real optimization (the closed loop on the simulated world): the scores per
iteration are drawn, every accepted rewrite is listed with its diff, the failures listed are those the
diagnosis describes (the train failures of the latest attributed iteration), each set labelled."""

from __future__ import annotations

import json
import re

import pytest
from memtrace_loop.pipeline.report.data import rewrites_of
from memtrace_loop.pipeline.report.run_report import report_for_loop

from tests.support.loops import sim_attribution_loop

pytestmark = pytest.mark.slow


def test_report_of_an_optimization_shows_scores_and_accepted_rewrites(tmp_path):
    result = sim_attribution_loop(8, max_iterations=3, patience=2, max_candidates=2)
    rewrites = rewrites_of(result)
    assert len(rewrites) == sum(1 for r in result.iterations if r.accepted)
    assert rewrites, "the sim loop accepts at least one rewrite"
    assert all(r.diff.startswith("---") and "\n+" in r.diff for r in rewrites)

    page = report_for_loop(result, tmp_path, meta={"optimizer": "attribution"}).read_text(encoding="utf-8")
    assert page.count('<polyline class="line dev"') == 1
    # the scores are those each iteration started from, as the log's "dev before" and the charts say
    assert "<th>train before</th><th>dev before</th>" in page and "each iteration started from" in page
    assert page.count('<circle class="dot dev"') == len(result.history)
    assert page.count('<details class="rewrite">') == len(rewrites)
    assert '<span class="add">+' in page and "<h2>Accepted rewrites</h2>" in page
    block = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.S)
    assert block is not None
    failures = json.loads(block.group(1))["failures"]
    excluded = result.test_final.report.excluded_categories
    latest = next(r for r in reversed(result.iterations) if r.attributions)
    assert len(failures) == len(latest.attributions) == sum(
        1 for r in latest.train.results if not r.correct and r.question.category not in excluded
    )
    assert f"Failed questions — train split, iteration {latest.iteration}" in page
    assert "<caption>test split, final prompts</caption>" in page
