"""The figures of docs/results.md that a command regenerates, and those commands.

    python -m memtrace_loop.experiments.lab.docs_results demo              # re-run the demo, rewrite its figures
    python -m memtrace_loop.experiments.lab.docs_results optimizer-table   # re-run the one-seed table (16 runs)
    python -m memtrace_loop.experiments.lab.docs_results mem0ai-gain       # the real mem0 library vs ours (12 runs)

`demo` runs `memtrace optimize` with fresh stores and rewrites the generated blocks of docs/results.md
and README.md (`tests/apps/test_readme.py` compares them); the others rewrite their table and its
`Measured on` line. It does not judge whether a recorded figure is still current.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from memtrace_loop.experiments.lab.bench.common import markdown_table

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "docs" / "results.md"
README = REPO / "README.md"
MEASURED = re.compile(r"(?m)^Measured on .* at commit \w+\.$")


def head_commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                          check=False)
    return done.stdout.strip() or "unknown"


@dataclass(frozen=True)
class DemoFigures:
    dev_start: float
    dev_final: float
    test_start: float
    test_final: float
    accepted: tuple[str, ...]  # what each accepted candidate changed, in order: stage names or a knob change
    made: int
    cached: int
    reused: int
    saved: int
    budget: int
    made_by_role: tuple[tuple[str, int], ...]
    stop_reason: str


@dataclass(frozen=True)
class OptimizeRun:
    stdout: str
    run_dir: Path
    metrics: dict[str, float]
    tags: dict[str, str]


def run_optimize(workdir: Path, *overrides: str) -> OptimizeRun:
    """`memtrace optimize <overrides>` in `workdir` with a fresh cache and MLflow store; its parent run read back."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env |= {"MLFLOW_TRACKING_URI": f"sqlite:///{workdir}/mlflow.db", "MEMTRACE_CACHE_DIR": str(workdir / "cache"),
            "DSPY_CACHEDIR": str(workdir / "dspy"), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "MLFLOW_DISABLE_TELEMETRY": "true", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    memtrace = Path(sys.executable).parent / "memtrace"
    done = subprocess.run([str(memtrace), "optimize", *overrides], cwd=workdir, env=env, capture_output=True,
                          text=True, timeout=3600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"memtrace optimize {' '.join(overrides)} failed ({done.returncode}): {done.stderr[-3000:]}")
    (run_dir,) = (workdir / "outputs" / "optimize").iterdir()
    exported = json.loads((run_dir / "best_prompts.json").read_text())
    with sqlite3.connect(workdir / "mlflow.db") as db:
        metrics = dict(db.execute("select key, value from latest_metrics where run_uuid = ?",
                                  (exported["source_run"],)).fetchall())
        tags = dict(db.execute("select key, value from tags where run_uuid = ?", (exported["source_run"],)).fetchall())
    return OptimizeRun(done.stdout, run_dir, metrics, tags)


def run_demo(workdir: Path) -> DemoFigures:
    """`memtrace optimize` as `make demo` runs it, in `workdir` with a fresh cache and MLflow store."""
    run = run_optimize(workdir)
    metrics, tags = run.metrics, run.tags
    checkpoint = json.loads((run.run_dir / "checkpoint.json").read_text())
    changes = re.search(r"Knobs changed by accepted candidates: (.+)", run.stdout)
    knob_text = {c.split()[0]: c.strip().replace("->", "→")
                 for c in (changes.group(1).split(",") if changes else []) if c.strip()}
    accepted: list[str] = []
    for entry in checkpoint["history"]:
        for candidate in entry.get("candidates", []):
            if candidate.get("accepted"):
                what = ", ".join(candidate.get("stages") or [])
                knobs = [knob_text.get(k, f"{k} → {v}") for k, v in (candidate.get("knobs") or {}).items()]
                accepted.append(f"{what} ({', '.join(knobs)})" if knobs else what)
    roles = ("task", "judge", "attributor", "rewriter")
    return DemoFigures(
        dev_start=round(100 * checkpoint["history"][0]["dev_accuracy"], 1),
        dev_final=round(100 * metrics["dev/final/judge_accuracy"], 1),
        test_start=round(100 * metrics["test/start/judge_accuracy"], 1),
        test_final=round(100 * metrics["test/final/judge_accuracy"], 1),
        accepted=tuple(accepted),
        made=int(metrics["lm_calls/made"]), cached=int(metrics["lm_calls/cached"]),
        reused=int(metrics.get("lm_calls/reused", 0)),
        saved=int(metrics["lm_calls/saved"]), budget=int(metrics["lm_calls/budget_spent"]),
        made_by_role=tuple((r, int(metrics[f"lm_calls/{r}/made"])) for r in roles),
        stop_reason=tags.get("memtrace.stop_reason", "?"),
    )


NUMBER_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}


def demo_sentence(f: DemoFigures) -> str:
    """The README's one sentence of demo figures (between its `figures:demo` markers)."""
    changes = "; ".join(f.accepted)
    return (f"test judge accuracy goes from {f.test_start}% to {f.test_final}% (dev {f.dev_start}% → "
            f"{f.dev_final}%) in {NUMBER_WORDS.get(len(f.accepted), len(f.accepted))} accepted changes "
            f"({changes}); a cold run makes {f.made:,} LM calls, answers {f.reused:,} repeats from the run's own "
            f"replies, takes {f.cached:,} from DSPy's response cache, saves {f.saved:,} by reusing built memories "
            f"and spends {f.budget:,} budget calls.")


def demo_block(f: DemoFigures) -> str:
    """The generated table of docs/results.md (between its `figures:demo` markers)."""
    rows = [("dev judge accuracy %, start → final", f"{f.dev_start} → {f.dev_final}"),
            ("test judge accuracy %, start → final", f"{f.test_start} → {f.test_final}"),
            ("accepted changes, in order", "; ".join(f.accepted)),
            ("LM calls made (every role, final test included)", f"{f.made:,}"),
            *((f"… of them by role `{role}`", f"{n:,}") for role, n in f.made_by_role),
            ("repeats answered from the run's own replies (reused, not made)", f"{f.reused:,}"),
            ("served by DSPy's response cache (left by earlier runs)", f"{f.cached:,}"),
            ("saved by reusing built memories", f"{f.saved:,}"),
            ("budget calls spent (task + rewriter + attributor, made + cached)", f"{f.budget:,}"),
            ("stop reason", f.stop_reason)]
    return markdown_table(("figure", "value"), rows, "lr")


def between(text: str, name: str) -> tuple[int, int]:
    """(start, end) of the text between `<!-- figures:NAME -->` and `<!-- /figures:NAME -->`."""
    start = text.index(f"<!-- figures:{name} -->") + len(f"<!-- figures:{name} -->")
    return start, text.index(f"<!-- /figures:{name} -->", start)


def generated(text: str, name: str) -> str:
    start, end = between(text, name)
    return text[start:end]


def replaced(text: str, name: str, body: str) -> str:
    start, end = between(text, name)
    return text[:start] + "\n" + body + "\n" + text[end:]


def write_table(name: str, table: str) -> None:
    """`table` into docs/results.md's `figures:NAME` block, and today's date and commit into the
    `Measured on ...` line of its section (the last one before the block)."""
    text = RESULTS.read_text(encoding="utf-8")
    start, _ = between(text, name)
    if lines := list(MEASURED.finditer(text, 0, start)):
        measured = f"Measured on {dt.date.today().isoformat()} at commit {head_commit()}."
        text = text[:lines[-1].start()] + measured + text[lines[-1].end():]
    RESULTS.write_text(replaced(text, name, table), encoding="utf-8")


TABLE_SYSTEMS = ("mem0", "long_context", "rag", "evermemos")
TABLE_OPTIMIZERS = ("attribution", "uniform", "uniform_reasons", "none")


def test_accuracies(metrics: dict[str, float]) -> tuple[float, float]:
    """Test judge accuracy % at the start and the end, rounded as printed (a gain is taken between these,
    so a cell's three numbers add up as read)."""
    return round(100 * metrics["test/start/judge_accuracy"], 1), round(100 * metrics["test/final/judge_accuracy"], 1)


def optimizer_table() -> str:
    """Test judge accuracy start → final of every (system, optimizer) on the demo's settings: 16 runs."""
    rows = []
    for system in TABLE_SYSTEMS:
        cells = []
        for optimizer in TABLE_OPTIMIZERS:
            with tempfile.TemporaryDirectory() as tmp:
                m = run_optimize(Path(tmp), f"memory_system={system}", f"optimizer={optimizer}").metrics
            start, final = test_accuracies(m)
            gain = f"{final - start:+.1f}" if round(final - start, 1) else "0"
            cells.append(f"{start:.1f} → {final:.1f} ({'**' + gain + '**' if optimizer == 'attribution' else gain})")
        rows.append([f"{system} (the demo)" if system == "mem0" else system, *cells])
    return markdown_table(("system", *TABLE_OPTIMIZERS), rows)


GAIN_SYSTEMS = ("mem0ai", "mem0")
GAIN_SEEDS = (0, 1, 2)
GAIN_SETTINGS = (("default loop settings", ()), ("loop.budget_calls=3000", ("loop.budget_calls=3000",)))


def mem0ai_gain_table() -> str:
    """Test judge accuracy start → final of `optimize` on the real mem0 library (`mem0ai`, its default hooks)
    and on our Mem0-style system, per seed, with the default loop settings and at a 3,000-call budget."""
    rows = []
    for system in GAIN_SYSTEMS:
        for label, overrides in GAIN_SETTINGS:
            for seed in GAIN_SEEDS:
                with tempfile.TemporaryDirectory() as tmp:
                    m = run_optimize(Path(tmp), f"memory_system={system}", f"seed={seed}", *overrides).metrics
                start, final = test_accuracies(m)
                rows.append((system, label, seed, f"{start:.1f} → {final:.1f} ({final - start:+.1f})",
                             f"{int(m['lm_calls/budget_spent']):,}"))
    return markdown_table(("system", "setting", "seed", "test start → final (gain)", "budget calls spent"), rows,
                          "llrlr")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memtrace_loop.experiments.lab.docs_results", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("demo", help="re-run the demo with fresh stores; rewrite its figures in results.md and README.md")
    sub.add_parser("optimizer-table", help="re-run the one-seed optimizer table (16 optimize runs) and write it")
    sub.add_parser("mem0ai-gain", help="optimize on the real mem0 library and on our Mem0-style system, 3 seeds, "
                   "default settings and budget 3000 (12 runs), and write the table")
    args = parser.parse_args(argv)
    if args.what == "demo":
        with tempfile.TemporaryDirectory() as tmp:
            figures = run_demo(Path(tmp))
        write_table("demo", demo_block(figures))
        readme = replaced(README.read_text(encoding="utf-8"), "demo", demo_sentence(figures))
        README.write_text(readme, encoding="utf-8")
        sys.stdout.write(demo_block(figures) + "\n")
        return 0
    name, table = ("optimizer_table", optimizer_table()) if args.what == "optimizer-table" else (
        "mem0ai_gain", mem0ai_gain_table())
    write_table(name, table)
    sys.stdout.write(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
