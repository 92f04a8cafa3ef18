"""The screening benchmark (experiments/lab/bench/screen_bench.py, `make bench`) at a tiny scale: its table's
numbers agree with each other (a screened-out candidate costs at most its full evaluation, a passing one
its screen plus the rest, a screen rebuilds at most every conversation) and it has one row per candidate
plus a mean row. No speed is asserted."""

from __future__ import annotations

import pytest
from memtrace_loop.experiments.lab.bench import screen_bench


def _number(cell: str) -> int:
    return int(cell.split()[0].replace(",", ""))


def _fraction(cell: str) -> tuple[int, int]:
    part, whole = cell.split("/")
    return int(part), int(whole)


@pytest.mark.slow  # two tiny conversations, a few evaluations (~5 s)
def test_the_screen_bench_table_adds_up(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    code = screen_bench.main(["--systems", "mem0", "--conversations", "2", "--sessions", "2",
                              "--turns-per-session", "6", "--workers", "2", "--markdown"])
    assert code == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("| mem0 |")]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    candidates, mean = cells[:-1], cells[-1]
    assert 2 <= len(candidates) <= 3  # at least two construction candidates came out, at most --candidates
    assert mean[1].startswith(f"mean of {len(candidates)} ")
    for row in candidates:
        full, screened, verdict = _number(row[2]), _number(row[3]), row[7]
        rebuilt, conversations = _fraction(row[6])
        questions, scored = _fraction(row[5])
        assert conversations == 2 and 0 <= rebuilt <= conversations
        assert 0 <= questions <= scored
        assert full > 0
        if verdict == "screened out":
            assert screened <= full
        elif verdict == "passed":  # "screen + rest", the rest: the whole set with the screen's memories kept
            screen, rest = (int(n.replace(",", "")) for n in row[3].split("(")[1].rstrip(")").split("+"))
            assert screened == screen + rest and 0 < rest < full
        else:
            assert verdict == "no screen" and screened == full and questions == scored
        assert row[9] == ("would pass" if float(row[8]) >= 100 * screen_bench.MIN_GAIN else "would fail")
        assert row[4] == f"{screened / full:.2f}"
    assert _number(mean[2]) == round(sum(_number(r[2]) for r in candidates) / len(candidates))
