"""The apps' console at a log's width: wide tables become records, words and commands are never cut,
tables that fit stay tables, Markdown tables are fitted too, and what is printed reaches the log files
(not the console twice)."""

from __future__ import annotations

import io
import logging

from memtrace_loop.experiments.console import setup_logging
from memtrace_loop.experiments.console_layout import (
    FitToWidth,
    markdown_blocks,
    pack,
    table_as_records,
    table_rows,
    wrap_words,
)
from rich.console import Console
from rich.markdown import Markdown
from rich.table import Table
from rich.text import Text

from tests.support import root_handlers

PATH = "/tmp/pytest-of-someone/pytest-123/test_a_long_name0/outputs/run/2026-11-23_11-00-07-207bbb/artifacts"


def printed(*renderables: object, width: int = 80) -> str:
    buffer = io.StringIO()
    console = Console(file=buffer, width=1000, color_system=None, force_terminal=False)
    console.push_render_hook(FitToWidth(width))
    for renderable in renderables:
        console.print(renderable)
    return buffer.getvalue()


def wide_table() -> Table:
    table = Table(title="blame per stage (lineage): 25 of 25 failures")
    for column in ("stage", "tunable", "count", "share %", "weight", "verified", "refuted", "error types"):
        table.add_column(column)
    table.add_row("extract", "prompt", "15", "60.0", "7.50", "0", "0", "Extraction 15")
    table.add_row("decide", "prompt", "10", "40.0", "5.00", "0", "0", "Update 4, Deletion 6")
    return table


def test_a_table_wider_than_the_log_becomes_records_with_every_value_whole():
    out = printed(wide_table())
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "…" not in out
    assert "stage extract" in out and "error types: Extraction 15" in out and "Update 4, Deletion 6" in out
    assert out.splitlines()[0] == "blame per stage (lineage): 25 of 25 failures"


def test_a_table_that_fits_stays_a_table():
    table = Table(title="small")
    table.add_column("role")
    table.add_column("made")
    table.add_row("task", "12")
    out = printed(table)
    assert "┃ role ┃ made ┃" in out and "│ task │ 12   │" in out


def test_a_wide_table_fits_as_a_table_in_a_wide_terminal():
    out = printed(wide_table(), width=200)
    assert "│ extract │" in out and "Extraction 15" in out


def test_text_wraps_at_spaces_and_never_splits_a_path_or_a_command():
    out = printed(f"Saved cases and graphs in {PATH}; attribute them with: memtrace attribute run_dir={PATH}")
    lines = out.splitlines()
    assert f"{PATH};" in lines
    assert f"memtrace attribute run_dir={PATH}" in lines
    assert all(len(line) <= 80 for line in lines if " " in line and not line.startswith("memtrace "))


def test_wrap_words_keeps_styles_and_short_lines():
    text = Text.from_markup("MLflow run [bold]abc[/] in sqlite:///mlflow.db (experiment 'memtrace') " * 2)
    wrapped = wrap_words(text, 40)
    assert all(len(line) <= 40 for line in wrapped.plain.splitlines())
    assert any(span.style == "bold" for span in wrapped.spans)
    assert " ".join(wrapped.plain.split()) == " ".join(text.plain.split())


def test_pack_splits_an_item_only_when_it_is_longer_than_a_line():
    lines = pack(["a: 1", "b: 2", "why: " + "word " * 30], 40)
    assert lines[0] == "    a: 1; b: 2;"
    assert all(len(line) <= 40 for line in lines)
    assert " ".join(" ".join(lines).split()).startswith("a: 1; b: 2; why: word word")


def test_records_leave_empty_cells_out():
    table = Table("role", "made", "cached")
    table.add_row("saved (reused memory)", "416", "")
    records = table_as_records(table, 20).plain
    assert records == "role saved (reused memory)\n    made: 416"
    assert table_rows(table) == (["role", "made", "cached"], [["saved (reused memory)", "416", ""]])


def test_markdown_tables_are_fitted_like_any_table():
    markdown = ("Intro line.\n\n| optimizer | system | gain pp [95% CI] | vs attribution pp [95% CI] | LM calls |"
                " tokens |\n|---|---|---:|---:|---:|---:|\n| **attribution** | **pooled** | **+21.3 [+18.4, +24.5]"
                " (n=588)** | — | **3,146** | **1,380,674** |\n\n- legend item\n")
    blocks = markdown_blocks(markdown)
    assert [type(b) for b in blocks] == [Markdown, Table, Markdown]
    out = printed(*blocks)
    assert "optimizer attribution" in out and "gain pp [95% CI]: +21.3 [+18.4, +24.5] (n=588)" in out
    assert "**" not in out and max(len(line) for line in out.splitlines()) <= 80


def test_what_is_printed_reaches_the_log_file_and_not_the_console_twice(tmp_path):
    log_file = tmp_path / "run.log"
    file_handler = logging.FileHandler(log_file)
    with root_handlers(file_handler) as root:
        setup_logging()
        rich_handler = next(h for h in root.handlers if type(h).__name__ == "RichHandler")
        shown = io.StringIO()
        rich_handler.console.file = shown
        out = printed(wide_table())
        file_handler.flush()
        log = log_file.read_text()
        assert "[memtrace.console][INFO] - blame per stage" in log and "error types: Extraction 15" in log
        assert "Extraction" in out and "blame per stage" not in shown.getvalue()
        logging.getLogger("memtrace.lifecycle_test").debug("only in the file")
        file_handler.flush()
        assert "only in the file" in log_file.read_text() and "only in the file" not in shown.getvalue()
