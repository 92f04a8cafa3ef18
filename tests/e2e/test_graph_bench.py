"""Smoke run of the graph benchmark (experiments/lab/bench/graph_bench.py) on a small run: one row per
system with every column, the ExecNetwork export and import timed and the targets judged."""

from __future__ import annotations

import pytest
from memtrace_loop.experiments.lab.bench import graph_bench


@pytest.mark.slow  # a small sim run per system (~5 s)
def test_graph_bench_prints_a_row_per_system_with_the_exec_network_timings(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    code = graph_bench.main(["--systems", "mem0", "evermemos", "--conversations", "1", "--sessions", "4",
                             "--turns-per-session", "6", "--workers", "1"])
    assert code == 0
    out = capsys.readouterr().out
    assert "ExecNet out s" in out and "ExecNet in s" in out
    rows = [line for line in out.splitlines() if line.startswith("│ ")]
    assert [row.split("│")[1].strip() for row in rows] == ["mem0", "evermemos"]
    for row in rows:
        cells = [cell.strip() for cell in row.split("│")[1:-1]]
        export_s, import_s = float(cells[12]), float(cells[13])
        assert 0 <= export_s < 60 and 0 <= import_s < 60  # printed to 0.01 s (a sanity bound, no speed target)
        assert cells[-1] == "met" or cells[-1].startswith("missed: ")


@pytest.mark.slow  # seconds each (measured): out of `make test-fast`
def test_a_small_run_exports_what_it_records() -> None:
    row = graph_bench.bench_system("rag", 1, 2, 6, 1)
    assert row.operations > 0 and row.edges > 0 and row.export_s > 0 and row.import_s > 0
