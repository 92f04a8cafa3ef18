"""report.html in a real headless browser (Debian's Chromium driven by Playwright, never a downloaded
browser): the report of a real sim run, opened from disk, lists the failed questions; clicking one
shows its path with the blamed operation highlighted; a node's value opens on click; injected markup
in an answer shows as text and runs nothing; no console error; no request leaves the page. A run in
LoCoMo's layout with a small top_k: each missed retrieval draws the memory unit its reason names, the
evidence's path to it and the search that missed it; a reason never denies a drawn evidence turn; the
diagnosis at the top is whole sentences. An optimization's page lists the failures its diagnosis
describes, draws unfilled score lines and names the split of its accuracy table.
Screenshots are saved under tmp_path (their paths are printed)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.requires import import_or_fail, missing_locomo, requires

CHROMIUM = os.environ.get("MEMTRACE_CHROMIUM", "/usr/bin/chromium")
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
]
INJECTED = "<img src=x onerror=\"window.__pwned = 1; alert(1)\"> <script>window.__pwned = 2</script>"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

pytestmark = [
    pytest.mark.slow,
    requires(f"no Chromium at {CHROMIUM} (Debian: apt-get install -y chromium chromium-driver)"
             if shutil.which(CHROMIUM) is None and not Path(CHROMIUM).is_file() else None),
]
sync_api = import_or_fail("playwright.sync_api", "Playwright for Python is not installed")


@pytest.fixture(scope="module")
def report_path(tmp_path_factory) -> tuple[Path, str]:
    """report.html of a real sim run (mem0, 2 conversations, lineage attributions), with one failed
    answer replaced by markup; returns the path and that question's id."""
    from memtrace_loop.experiments.factory import build_memory_system, load_dataset
    from memtrace_loop.pipeline.analysis.judge import make_judge
    from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
    from memtrace_loop.pipeline.loop.runner import run_dataset
    from memtrace_loop.pipeline.report.run_report import report_for_run

    from tests.support.sim import sim_lm

    dataset = load_dataset({"kind": "sim", "seed": 3, "n_conversations": 2})
    lm = sim_lm()
    system = build_memory_system({"name": "mem0"}, HashingEmbedder())
    system.set_lm(lm)
    result = run_dataset(system, make_judge(lm), dataset, workers=2)
    excluded = result.report.excluded_categories
    target = next(r for r in result.results if not r.correct and r.question.category not in excluded)
    results = tuple(dataclasses.replace(r, prediction=INJECTED) if r is target else r for r in result.results)
    result = dataclasses.replace(result, results=results)
    out = tmp_path_factory.mktemp("report")
    path = report_for_run(result, out, title="sim run <script>window.__pwned = 3</script>",
                          conversation_by_id={c.id: c for c in dataset.conversations})
    return path, target.question.id


def is_png(path: Path) -> bool:
    data = path.read_bytes()
    return data.startswith(PNG_MAGIC) and len(data) > 5_000


@contextmanager
def browser_page(tmp_path: Path) -> Iterator[tuple[Any, list[str]]]:
    """A page of Debian's Chromium (fresh profile) and the console and page errors it reports."""
    errors: list[str] = []
    with sync_api.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, args=FLAGS,
            viewport={"width": 1400, "height": 1000},
        )
        try:
            page = context.new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            yield page, errors
        finally:
            context.close()


def test_report_in_a_real_browser(report_path, tmp_path):
    path, injected_qid = report_path
    requests: list[str] = []
    dialogs: list[str] = []
    with browser_page(tmp_path) as (page, errors):
        page.on("request", lambda r: requests.append(r.url))
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(path.as_uri())
        page.wait_for_load_state("load")

        assert "Accuracy per category" in page.locator("#overview").inner_text()
        rows = page.locator("#failure-list tbody tr")
        assert rows.count() > 0
        assert "shown" in page.locator("#f-count").inner_text()
        page.screenshot(path=str(tmp_path / "overview.png"))

        # the failure with a blamed operation: its drawing highlights it
        blamed_row = page.locator("#failure-list tbody tr", has=page.locator("td:nth-child(4):not(:empty)")).first
        blamed_row.click()
        drawing = page.locator("#detail svg.graph")
        drawing.wait_for()
        highlighted = drawing.locator("g.node.blamed")
        assert highlighted.count() == 1
        assert drawing.locator("g.node").count() > 2 and drawing.locator("path.edge").count() > 1
        blamed_op = page.locator("#detail dl.kv").nth(1).inner_text()
        assert highlighted.get_attribute("data-id") in blamed_op
        assert highlighted.locator("title").text_content()  # the value on hover
        highlighted.click()
        assert highlighted.get_attribute("data-id") in page.locator("#node-panel").inner_text()
        page.locator("#detail").screenshot(path=str(tmp_path / "failure.png"))

        # filtering by a stage keeps only that stage's failures
        stages = page.locator("#f-stage option").all_inner_texts()[1:]
        assert stages
        page.select_option("#f-stage", stages[0])
        shown = page.locator("#failure-list tbody tr td:nth-child(4)").all_inner_texts()
        assert shown and set(shown) == {stages[0]}
        page.select_option("#f-stage", "")

        # injected markup in an answer and in the title is text, and nothing ran
        page.locator(f'#failure-list tbody tr[data-qid="{injected_qid}"]').click()
        assert INJECTED in page.locator("#detail").inner_text()
        assert "<script>window.__pwned = 3</script>" in page.title()
        assert page.locator("img").count() == 0
        assert page.evaluate("window.__pwned === undefined")
    assert not errors, errors
    assert not dialogs, dialogs
    assert requests == [path.as_uri()]  # only the document itself: nothing leaves the page
    assert is_png(tmp_path / "overview.png") and is_png(tmp_path / "failure.png")


def test_report_works_in_a_sandboxed_iframe_like_mlflows_artifact_view(report_path, tmp_path):
    """MLflow 3's artifact view shows an .html artifact as a blob: URL in `<iframe sandbox="allow-scripts">`
    (an opaque origin: no storage, no same-origin access); the page must work there too."""
    path, _ = report_path
    with browser_page(tmp_path) as (page, errors):
        page.goto("about:blank")
        page.evaluate(
            """html => {
                const frame = document.createElement('iframe');
                frame.setAttribute('sandbox', 'allow-scripts');
                frame.style.width = '1300px'; frame.style.height = '900px';
                frame.src = URL.createObjectURL(new Blob([html], {type: 'text/html'}));
                document.body.appendChild(frame);
            }""",
            path.read_text(encoding="utf-8"),
        )
        frame = page.frame_locator("iframe")
        rows = frame.locator("#failure-list tbody tr")
        rows.first.wait_for()
        assert rows.count() > 0
        rows.first.click()
        frame.locator("#detail svg.graph g.node").first.wait_for()
        assert frame.locator("#detail svg.graph g.node").count() > 2
    assert not errors, errors


# ---------------------------------------------------------------- the cause of a failure, drawn

UNTRACED = "No evidence turn could be traced"
PLANTED_QID = "planted"  # a question whose evidence turn shares no word with it (LoCoMo has such, e.g. conv-26:q1)
MAX_UNRELATED = 2  # report.subgraph.MAX_UNRELATED: the search's other hits drawn


def _plant_untraceable_question(samples: list[dict[str, Any]]) -> str:
    """Add to the first sample a dated question whose evidence turn shares no word with it; its dia_id."""
    sample = samples[0]
    first = sample["conversation"]["session_1"]
    turn = next(t for t in first if not re.search(r"paint|sunrise|lake|yesterday|ago|last", t["text"], re.I))
    sample["qa"].append({"question": f"When did {turn['speaker']} paint a sunrise over the lake?", "answer": "2019",
                         "evidence": [turn["dia_id"]], "category": 2})
    return turn["dia_id"]


@pytest.fixture(scope="module")
def locomo_layout_report(tmp_path_factory) -> tuple[Path, str]:
    """report.html of a mem0 run with top_k=2 (so searches miss) on sim conversations written in LoCoMo's
    JSON layout and read by the LoCoMo loader, with lineage attributions and the sim diagnosis on top;
    returns the page and the planted question's id."""
    from memtrace_loop.experiments.factory import build_memory_system, load_dataset
    from memtrace_loop.pipeline.analysis.attribution.lineage import attribute_failures
    from memtrace_loop.pipeline.analysis.diagnosis import diagnose
    from memtrace_loop.pipeline.analysis.judge import make_judge
    from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
    from memtrace_loop.pipeline.loop.runner import run_dataset
    from memtrace_loop.pipeline.report.run_report import report_for_run
    from memtrace_loop.pipeline.sim.world import generate_locomo

    from tests.support.sim import sim_lm

    out = tmp_path_factory.mktemp("locomo_layout")
    samples = generate_locomo(seed=3, n_conversations=2)
    _plant_untraceable_question(samples)
    (out / "locomo_layout.json").write_text(json.dumps(samples), encoding="utf-8")
    dataset = load_dataset({"kind": "locomo", "path": str(out / "locomo_layout.json")})
    lm = sim_lm()
    system = build_memory_system({"name": "mem0", "top_k": 2}, HashingEmbedder())
    system.set_lm(lm)
    result = run_dataset(system, make_judge(lm), dataset, workers=2)
    conversations = {c.id: c for c in dataset.conversations}
    found = attribute_failures(result.results, result.graph_by_conversation, conversations,
                               result.report.excluded_categories)
    planted = next(q.id for q in dataset.questions if q.text.endswith("paint a sunrise over the lake?"))
    path = report_for_run(result, out, title="LoCoMo-layout run", attributions=found, diagnosis=diagnose(found, lm),
                          conversation_by_id=conversations)
    return path, planted


def _payload(page) -> dict[str, Any]:
    return page.evaluate("JSON.parse(document.getElementById('report-data').textContent)")


def _show(page, qid: str):
    page.locator(f'#failure-list tbody tr[data-qid="{qid}"]').click()
    drawing = page.locator("#detail svg.graph")
    drawing.wait_for()
    return drawing


def test_a_missed_retrieval_draws_the_unit_that_held_the_answer_and_the_search(locomo_layout_report, tmp_path):
    path, _ = locomo_layout_report
    with browser_page(tmp_path) as (page, errors):
        page.goto(path.as_uri())
        page.wait_for_load_state("load")
        diagnosis = page.locator("#diagnosis p").first.inner_text()
        assert diagnosis and not re.search(r" [a-z]{1,2} \.| \.(\s|$)", diagnosis), diagnosis  # whole sentences
        missed = [f for f in _payload(page)["failures"] if f["attr"] and f["attr"]["type"] == "RetrievalError"]
        assert missed, "top_k=2 makes the search miss"
        for i, failure in enumerate(missed[:4]):
            drawing = _show(page, failure["qid"])
            reason = failure["attr"]["reason"]
            assert reason in page.locator("#detail").inner_text()
            units = list(dict.fromkeys(re.findall(r"memory:[^\s\"]+@\d+", reason)))
            assert units, reason
            for unit in units:  # the memory unit the reason names, marked
                node = drawing.locator(f'g.node[data-id="{unit}"]')
                assert node.count() == 1, (failure["qid"], unit, reason)
                assert "role-named" in (node.get_attribute("class") or "")
            search = drawing.locator(f'g.node[data-id="{failure["attr"]["op"]}"]')  # the search that missed it
            assert search.count() == 1 and "retrieve" in (search.locator("title").text_content() or "")
            assert drawing.locator("g.node.role-evidence").count() >= 1
            others = drawing.locator("g.node.kind-memory:not(.role-named)").count()
            assert others <= MAX_UNRELATED + 2, others  # the search's other hits capped (plus the unit's versions)
            if i == 0:
                page.locator("#detail").screenshot(path=str(tmp_path / "retrieval_failure.png"))
    assert not errors, errors
    assert is_png(tmp_path / "retrieval_failure.png")
    print(f"screenshot: {tmp_path / 'retrieval_failure.png'}")


def test_a_reason_never_denies_a_drawn_evidence_turn(locomo_layout_report, tmp_path):
    path, planted = locomo_layout_report
    with browser_page(tmp_path) as (page, errors):
        page.goto(path.as_uri())
        page.wait_for_load_state("load")
        failures = {f["qid"]: f for f in _payload(page)["failures"]}
        assert planted in failures and failures[planted]["attr"], "the planted question fails and is attributed"
        drawing = _show(page, planted)
        assert drawing.locator("g.node.role-evidence").count() >= 1  # its evidence turn is drawn...
        reason = failures[planted]["attr"]["reason"]
        assert UNTRACED not in reason and UNTRACED not in page.locator("#detail").inner_text(), reason  # ...not denied
        assert "by default the answer step" in reason  # the attributor's low-confidence default, still
        page.locator("#detail").screenshot(path=str(tmp_path / "untraced_failure.png"))
        for qid, failure in failures.items():  # and no other failure's reason denies its drawn evidence
            drawn = failure["graph"] and any(n[3] == "evidence" for n in failure["graph"]["nodes"])
            assert not (drawn and failure["attr"] and UNTRACED in failure["attr"]["reason"]), qid
    assert not errors, errors
    print(f"screenshot: {tmp_path / 'untraced_failure.png'}")


@requires(missing_locomo())
def test_on_real_locomo_every_missed_retrieval_draws_its_unit_and_search(tmp_path):
    """The licensed LoCoMo subset (one conversation, read from ../shared, never copied), mem0 on the
    stand-in LM: most failures are missed retrievals; each one's drawing holds the unit its reason
    names and the search, and no reason denies a drawn evidence turn."""
    from memtrace_loop.experiments.factory import build_memory_system
    from memtrace_loop.pipeline.analysis.judge import make_judge
    from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
    from memtrace_loop.pipeline.data.locomo import load_locomo
    from memtrace_loop.pipeline.loop.runner import run_dataset
    from memtrace_loop.pipeline.report.run_report import report_for_run

    from tests.support.paths import LOCOMO
    from tests.support.sim import sim_lm

    full = load_locomo(LOCOMO)
    dataset = full.subset((full.conversations[-1].id,))
    lm = sim_lm()
    system = build_memory_system({"name": "mem0"}, HashingEmbedder())
    system.set_lm(lm)
    result = run_dataset(system, make_judge(lm), dataset, workers=2)
    path = report_for_run(result, tmp_path / "report", title="LoCoMo run",
                          conversation_by_id={c.id: c for c in dataset.conversations})
    with browser_page(tmp_path) as (page, errors):
        page.goto(path.as_uri())
        page.wait_for_load_state("load")
        failures = _payload(page)["failures"]
        missed = [f for f in failures if f["attr"] and f["attr"]["type"] == "RetrievalError"]
        assert len(missed) > len(failures) / 3, (len(missed), len(failures))
        for failure in missed:
            ids = {n[0] for n in failure["graph"]["nodes"]}
            units = set(re.findall(r"memory:[^\s\"]+@\d+", failure["attr"]["reason"]))
            assert units and units <= ids and failure["attr"]["op"] in ids, failure["qid"]
        for failure in failures:
            drawn = failure["graph"] and any(n[3] == "evidence" for n in failure["graph"]["nodes"])
            assert not (drawn and failure["attr"] and UNTRACED in failure["attr"]["reason"]), failure["qid"]
        drawing = _show(page, missed[0]["qid"])
        assert drawing.locator("g.node.role-named").count() >= 1
        page.locator("#detail").screenshot(path=str(tmp_path / "locomo_retrieval_failure.png"))
    assert not errors, errors
    print(f"screenshot: {tmp_path / 'locomo_retrieval_failure.png'}")


# ---------------------------------------------------------------- an optimization's page agrees with itself


@pytest.fixture(scope="module")
def loop_report(tmp_path_factory) -> tuple[Path, int, int]:
    """report.html of a one-iteration attribution loop on the sim world, with the train diagnosis the
    optimize app puts on top; returns the page, the diagnosed iteration and its failure count."""
    from memtrace_loop.experiments.failure_analysis import loop_diagnosis
    from memtrace_loop.pipeline.report.run_report import report_for_loop

    from tests.support.loops import sim_attribution_loop
    from tests.support.sim import sim_lm

    result = sim_attribution_loop(4, max_iterations=1, patience=1, max_candidates=1)
    diagnosed, diagnosis = loop_diagnosis(result, sim_lm())
    assert diagnosed is not None and diagnosis.failures > 0
    path = report_for_loop(result, tmp_path_factory.mktemp("loop_report"), title="optimization",
                           diagnosis=diagnosis, diagnosis_scope=f"Train failures of iteration {diagnosed}: ")
    return path, diagnosed, diagnosis.failures


def test_an_optimization_page_agrees_with_itself(loop_report, tmp_path):
    path, diagnosed, n_diagnosed = loop_report
    with browser_page(tmp_path) as (page, errors):
        page.goto(path.as_uri())
        page.wait_for_load_state("load")
        assert page.locator("#diagnosis p").first.inner_text().startswith(f"Train failures of iteration {diagnosed}")
        heading = page.locator("#failures h2").inner_text()
        assert f"train split, iteration {diagnosed}" in heading
        assert int(page.locator("#n-failures").inner_text()) == n_diagnosed  # the failures the diagnosis describes
        assert page.locator("#failure-list tbody tr").count() == n_diagnosed
        fills = page.eval_on_selector_all("svg.chart .line", "els => els.map(e => getComputedStyle(e).fill)")
        assert len(fills) == 2 and set(fills) == {"none"}, fills  # lines, not filled polygons
        assert "test split" in page.locator("#accuracy caption").inner_text()
        page.screenshot(path=str(tmp_path / "optimization.png"), full_page=True)
    assert not errors, errors
    assert is_png(tmp_path / "optimization.png")
    print(f"screenshot: {tmp_path / 'optimization.png'}")
