"""report.html in a real headless browser (Debian's Chromium driven by Playwright, never a downloaded
browser): the report of a real sim run, opened from disk, lists the failed questions; clicking one
shows its path with the blamed operation highlighted; a node's value opens on click; injected markup
in an answer shows as text and runs nothing; no console error; no request leaves the page.
Screenshots of the overview and of one failure are saved under tmp_path."""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.requires import import_or_fail, requires

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
    from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
    from memtrace_loop.pipeline.loop.runner import make_judge, run_dataset
    from memtrace_loop.pipeline.report import report_for_run

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
