"""The measured figures of the docs, each backed by the command that makes it (writes docs/results.md).

    python -m memtrace_loop.experiments.lab.docs_results demo          # re-run the demo, rewrite its figures
    python -m memtrace_loop.experiments.lab.docs_results optimizer-table   # re-run the one-seed table (16 runs)
    python -m memtrace_loop.experiments.lab.docs_results check         # which recorded figures are stale
    python -m memtrace_loop.experiments.lab.docs_results stamp <id>    # after re-running <id>'s command

Two kinds of figure:

- cheap ones (the demo's accuracies, accepted changes, LM calls made / cached / saved / budget) are
  regenerated: `demo` runs `memtrace optimize` (the command of `make demo`) with a fresh cache and MLflow
  store in a temporary folder and rewrites the generated blocks of docs/results.md and README.md;
  `tests/apps/test_docs.py` runs the same and compares, so a stale demo figure fails CI;
- expensive ones (the comparison sweep, the attribution and rescue benchmarks, the local-model, workers
  and screening benches, the one-seed optimizer table) are recorded in docs/results.md with their command,
  the commit that measured them and a digest of the source files they depend on (`FIGURES`); the test fails when
  that digest changed, so a figure whose code moved on is flagged, not trusted. After re-running the
  command (and pasting its table), `stamp <id>` records the new digest and the current commit.
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import functools
import hashlib
import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "docs" / "results.md"
README = REPO / "README.md"

# What each expensive figure's numbers depend on (globs relative to the repository root). Broad on
# purpose: a change in any of them may move the numbers, so the figure has to be re-measured or re-stamped.
_WORLD = ("pipeline/sim/**/*.py", "memory_systems/**/*.py", "conf/**/*.yaml")
_LOOP = ("pipeline/loop/**/*.py", "pipeline/analysis/**/*.py", "optimizers/**/*.py")
_COMPARE = (*_WORLD, *_LOOP, "pipeline/backends/**/*.py", "pipeline/data/**/*.py", "experiments/compare.py",
            "experiments/conf/**/*.yaml")
FIGURES: dict[str, tuple[str, ...]] = {
    "optimizer_table": (*_WORLD, *_LOOP, "pipeline/backends/**/*.py", "pipeline/data/**/*.py"),
    "compare": _COMPARE,
    "compare_train_parts": _COMPARE,  # the same sweep with loop.train_conversations=1
    "attribution_bench": (*_WORLD, "pipeline/analysis/**/*.py", "experiments/lab/benchmark/**/*.py",
                          "experiments/lab/bench/attribution_bench.py"),
    "rescue_bench": (*_WORLD, "pipeline/analysis/**/*.py", "experiments/lab/benchmark/**/*.py",
                     "experiments/lab/bench/attribution_bench.py", "experiments/lab/bench/rescue_bench.py"),
    "local_model_bench": ("pipeline/backends/**/*.py", "memory_systems/**/*.py", "conf/lm/*.yaml",
                          "experiments/lab/bench/local_model_bench.py"),
    "workers_bench": ("pipeline/backends/**/*.py", "pipeline/loop/**/*.py", "experiments/lab/bench/workers_bench.py"),
    "mem0ai_gain": (*_WORLD, *_LOOP, "pipeline/backends/**/*.py", "pipeline/data/**/*.py"),
    "mem0ai_bench": ("memory_systems/mem0ai/**/*.py", "pipeline/sim/**/*.py", "pipeline/core/**/*.py",
                     "experiments/lab/bench/mem0ai_bench.py"),
    "screen_bench": (*_WORLD, *_LOOP, "pipeline/backends/**/*.py", "pipeline/data/**/*.py",
                     "experiments/lab/bench/screen_bench.py"),
}
MARKER = re.compile(r"<!-- figure (?P<id>\w+) measured_at=(?P<commit>\w+) stamped_at=(?P<stamped>\w+) "
                    r"digest=(?P<digest>[0-9a-f]+) -->")


def sources(figure: str) -> list[Path]:
    """The files a figure depends on, sorted (caches left out)."""
    found = {p for pattern in FIGURES[figure] for p in REPO.glob(pattern)
             if p.is_file() and "__pycache__" not in p.parts}
    return sorted(found)


def code_of(path: Path) -> bytes:
    """What of a file can change a figure: a Python module's syntax tree without docstrings (comments,
    docstrings and layout do not count), any other file's bytes."""
    if path.suffix != ".py":
        return path.read_bytes()
    return _tree_of(path.read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=1024)
def _tree_of(source: str) -> bytes:
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree).encode()


def digest(figure: str) -> str:
    """sha256 over the relative path and code of every source file of the figure (first 16 hex digits)."""
    h = hashlib.sha256()
    for path in sources(figure):
        h.update(path.relative_to(REPO).as_posix().encode() + b"\0" + code_of(path) + b"\0")
    return h.hexdigest()[:16]


def recorded(markdown: str | None = None) -> dict[str, dict[str, str]]:
    """figure id -> its marker's fields, as docs/results.md records them."""
    text = RESULTS.read_text(encoding="utf-8") if markdown is None else markdown
    return {m.group("id"): m.groupdict() for m in MARKER.finditer(text)}


def stale() -> dict[str, str]:
    """figure id -> why it is stale (missing marker, or its sources' digest changed since it was stamped)."""
    marks = recorded()
    why = {}
    for figure in FIGURES:
        if figure not in marks:
            why[figure] = "no marker in docs/results.md"
        elif marks[figure]["digest"] != digest(figure):
            why[figure] = (f"its sources changed since {marks[figure]['stamped']} (digest {marks[figure]['digest']}, "
                           f"now {digest(figure)}): re-run its command, then `stamp {figure}`")
    return why


def head_commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                          check=False)
    return done.stdout.strip() or "unknown"


def stamp(figure: str, measured_at: str | None = None) -> None:
    """Record the figure's digest now (and the commit that measured it, default: the current one)."""
    text = RESULTS.read_text(encoding="utf-8")
    old = recorded(text).get(figure)
    commit = head_commit()
    line = (f"<!-- figure {figure} measured_at={measured_at or commit} stamped_at={commit} "
            f"digest={digest(figure)} -->")
    if old is None:
        raise SystemExit(f"docs/results.md has no marker for {figure!r}: add `<!-- figure {figure} ... -->`")
    text = MARKER.sub(lambda m: line if m.group("id") == figure else m.group(0), text)
    RESULTS.write_text(text, encoding="utf-8")


# --------------------------------------------------------------------------- the demo (regenerated)


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
    return "\n".join(["| figure | value |", "|---|---:|", *(f"| {k} | {v} |" for k, v in rows)])


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


def write_demo(f: DemoFigures) -> None:
    today = dt.date.today().isoformat()
    results = RESULTS.read_text(encoding="utf-8")
    results = replaced(results, "demo", demo_block(f))
    results = re.sub(r"(?m)^Demo figures generated on .*$",
                     f"Demo figures generated on {today} at commit {head_commit()}.", results)
    RESULTS.write_text(results, encoding="utf-8")
    README.write_text(replaced(README.read_text(encoding="utf-8"), "demo", demo_sentence(f)), encoding="utf-8")


# --------------------------------------------------------------------------- the one-seed optimizer table

TABLE_SYSTEMS = ("mem0", "long_context", "rag", "evermemos")
TABLE_OPTIMIZERS = ("attribution", "uniform", "uniform_reasons", "none")


def test_accuracies(metrics: dict[str, float]) -> tuple[float, float]:
    """Test judge accuracy % at the start and the end, rounded as printed (a gain is taken between these,
    so a cell's three numbers add up as read)."""
    return round(100 * metrics["test/start/judge_accuracy"], 1), round(100 * metrics["test/final/judge_accuracy"], 1)


def optimizer_table() -> str:
    """Test judge accuracy start → final of every (system, optimizer) on the demo's settings: 16 runs."""
    rows = ["| system | " + " | ".join(TABLE_OPTIMIZERS) + " |", "|---|" + "---|" * len(TABLE_OPTIMIZERS)]
    for system in TABLE_SYSTEMS:
        cells = []
        for optimizer in TABLE_OPTIMIZERS:
            with tempfile.TemporaryDirectory() as tmp:
                m = run_optimize(Path(tmp), f"memory_system={system}", f"optimizer={optimizer}").metrics
            start, final = test_accuracies(m)
            gain = f"{final - start:+.1f}" if round(final - start, 1) else "0"
            cells.append(f"{start:.1f} → {final:.1f} ({'**' + gain + '**' if optimizer == 'attribution' else gain})")
        name = f"{system} (the demo)" if system == "mem0" else system
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


# --------------------------------------------------------------------------- the real mem0 library vs ours

GAIN_SYSTEMS = ("mem0ai", "mem0")
GAIN_SEEDS = (0, 1, 2)
GAIN_SETTINGS = (("default loop settings", ()), ("loop.budget_calls=3000", ("loop.budget_calls=3000",)))


def mem0ai_gain_table() -> str:
    """Test judge accuracy start → final of `optimize` on the real mem0 library (`mem0ai`, its default hooks)
    and on our Mem0-style system, per seed, with the default loop settings and at a 3,000-call budget."""
    rows = ["| system | setting | seed | test start → final (gain) | budget calls spent |", "|---|---|---:|---|---:|"]
    for system in GAIN_SYSTEMS:
        for label, overrides in GAIN_SETTINGS:
            for seed in GAIN_SEEDS:
                with tempfile.TemporaryDirectory() as tmp:
                    m = run_optimize(Path(tmp), f"memory_system={system}", f"seed={seed}", *overrides).metrics
                start, final = test_accuracies(m)
                rows.append(f"| {system} | {label} | {seed} | {start:.1f} → {final:.1f} ({final - start:+.1f}) | "
                            f"{int(m['lm_calls/budget_spent']):,} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memtrace_loop.experiments.lab.docs_results", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("demo", help="re-run the demo with fresh stores; rewrite its figures in results.md and README.md")
    sub.add_parser("optimizer-table", help="re-run the one-seed optimizer table (16 optimize runs) and stamp it")
    sub.add_parser("mem0ai-gain", help="optimize on the real mem0 library and on our Mem0-style system, 3 seeds, "
                   "default settings and budget 3000 (12 runs), and stamp the table")
    sub.add_parser("check", help="list the recorded figures whose sources changed since they were stamped")
    stamp_parser = sub.add_parser("stamp", help="record a figure's source digest now (after re-running it)")
    stamp_parser.add_argument("figure", choices=sorted(FIGURES))
    stamp_parser.add_argument("--measured-at", help="the commit that measured it (default: the current one)")
    args = parser.parse_args(argv)
    if args.what == "demo":
        with tempfile.TemporaryDirectory() as tmp:
            figures = run_demo(Path(tmp))
        write_demo(figures)
        sys.stdout.write(demo_block(figures) + "\n")
        return 0
    if args.what == "optimizer-table":
        table = optimizer_table()
        RESULTS.write_text(replaced(RESULTS.read_text(encoding="utf-8"), "optimizer_table", table), encoding="utf-8")
        stamp("optimizer_table")
        sys.stdout.write(table + "\n")
        return 0
    if args.what == "mem0ai-gain":
        table = mem0ai_gain_table()
        RESULTS.write_text(replaced(RESULTS.read_text(encoding="utf-8"), "mem0ai_gain", table), encoding="utf-8")
        stamp("mem0ai_gain")
        sys.stdout.write(table + "\n")
        return 0
    if args.what == "stamp":
        stamp(args.figure, args.measured_at)
        return 0
    why = stale()
    for figure, reason in why.items():
        sys.stdout.write(f"{figure}: {reason}\n")
    return 1 if why else 0


if __name__ == "__main__":
    sys.exit(main())
