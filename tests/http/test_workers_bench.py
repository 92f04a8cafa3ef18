"""The workers benchmark (`make bench`) runs and prints its table; its numbers are never asserted
(no test times anything), only that every worker count answered the same calls through the server."""

from __future__ import annotations

import pytest
from memtrace_loop.experiments.lab.bench import workers_bench


@pytest.mark.slow  # a server process and three tiny runs (~10 s)
def test_the_workers_bench_prints_its_table(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("DSPY_CACHEDIR", str(tmp_path / "dspy"))
    assert workers_bench.main(["--questions", "4", "--workers", "1", "2", "--latency", "0"]) == 0
    out = capsys.readouterr().out
    assert "Answering vs workers (0 ms per LM call, server process)" in out
    rows = [line.split("│")[1:-1] for line in out.splitlines() if line.startswith("│")]
    assert [row[0].strip() for row in rows] == ["1", "2"]
    assert {row[1].strip() for row in rows} == {"8"}  # 4 questions: an answer and a judge call each
    assert rows[0][4].strip() == "1.00x"
