"""report.html of a real optimization (the closed loop on the simulated world): the scores per
iteration are drawn, every accepted rewrite is listed with its diff, the test failures are listed."""

from __future__ import annotations

import json
import re

import pytest
from memtrace_loop.memory_systems.mem0.system import Mem0Memory
from memtrace_loop.optimizers.registry import build_optimizer
from memtrace_loop.pipeline.backends.call_count import CallLedger
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.data.locomo import split_by_conversation
from memtrace_loop.pipeline.loop.optimization import LoopSettings, OptimizationLoop, Splits
from memtrace_loop.pipeline.loop.runner import make_judge
from memtrace_loop.pipeline.report import report_for_loop, rewrites_of

from tests.support.sim import counted_sim_lms, sim_dataset

pytestmark = pytest.mark.slow


def test_report_of_an_optimization_shows_scores_and_accepted_rewrites(tmp_path):
    calls = CallLedger()
    lms = counted_sim_lms(calls)
    system = Mem0Memory(HashingEmbedder())
    system.set_lm(lms.task)
    parts = split_by_conversation(sim_dataset(seed=0, n_conversations=8), (0.5, 0.25, 0.25), seed=0)
    settings = LoopSettings(max_iterations=3, patience=2, min_gain=0.02, max_candidates=2, workers=2)
    loop = OptimizationLoop(system, make_judge(lms.judge), build_optimizer("attribution", lms.rewriter, system=system),
                            Splits(parts.train, parts.dev, parts.test), settings, calls=calls)
    result = loop.run()
    rewrites = rewrites_of(result)
    assert len(rewrites) == sum(1 for r in result.iterations if r.accepted)
    assert rewrites, "the sim loop accepts at least one rewrite"
    assert all(r.diff.startswith("---") and "\n+" in r.diff for r in rewrites)

    page = report_for_loop(result, tmp_path, meta={"optimizer": "attribution"}).read_text(encoding="utf-8")
    assert page.count('<polyline class="line dev"') == 1
    assert page.count('<circle class="dot dev"') == len(result.history)
    assert page.count('<details class="rewrite">') == len(rewrites)
    assert '<span class="add">+' in page and "<h2>Accepted rewrites</h2>" in page
    block = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.S)
    assert block is not None
    failures = json.loads(block.group(1))["failures"]
    excluded = result.test_final.report.excluded_categories
    assert len(failures) == sum(
        1 for r in result.test_final.results if not r.correct and r.question.category not in excluded
    )
