"""`memtrace run memory_system=mem0ai` as a user runs it (the CLI in a subprocess), offline on the
simulated world with the real mem0 library, on the tiny LoCoMo-layout fixture: it exits 0, every
question is judged, every turn is one traced add, no placeholder key reaches the run folder, and
the per-conversation mem0 folders are gone when the process ends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from memtrace_loop.memory_systems.mem0ai.memory import PLACEHOLDER_KEY
from memtrace_loop.pipeline.core.graph_io import graph_from_json
from memtrace_loop.pipeline.tracking.run_logging import ARTIFACTS_DIR

from tests.support.paths import FIXTURES
from tests.support.store import fresh_store

pytestmark = pytest.mark.slow  # a whole run in a subprocess (~10 s)

TINY = FIXTURES / "locomo_tiny.json"


def test_memtrace_run_on_the_real_library_completes_offline(tmp_path: Path) -> None:
    fresh_store(tmp_path / "m.db")
    mem0_dir = tmp_path / "mem0"
    env = {**os.environ, "MEM0_DIR": str(mem0_dir), "DSPY_CACHEDIR": str(tmp_path / "dspy"),
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/m.db"}
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "memtrace_loop.experiments.cli", "run", "memory_system=mem0ai", "lm=sim",
            "dataset=locomo", f"dataset.path={TINY}", "workers=2", f"hydra.run.dir={out}",
            f"cache_dir={tmp_path / 'cache'}", f"tracking.uri=sqlite:///{tmp_path}/m.db"]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]

    sample = json.loads(TINY.read_text())[0]
    cases = json.loads((out / ARTIFACTS_DIR / "cases.json").read_text())["cases"]
    assert len(cases) == len(sample["qa"]) and all(c["verdict"] in ("CORRECT", "WRONG") for c in cases)
    (graph_file,) = (out / ARTIFACTS_DIR / "graphs").glob("*.json")
    graph = graph_from_json(graph_file.read_text())
    graph.check()
    turns = sum(len(v) for k, v in sample["conversation"].items() if k.startswith("session") and isinstance(v, list))
    extractions = [op for op in graph.operations() if op.stage == "fact_extraction"]
    assert len(extractions) == turns and {op.name for op in extractions} == {"extract_facts"}
    assert any(op.stage == "store" and op.name == "memory_add" for op in graph.operations())

    written = [p for p in out.rglob("*") if p.is_file()]
    assert not any(PLACEHOLDER_KEY in p.read_text(errors="ignore") for p in written)
    assert PLACEHOLDER_KEY not in done.stdout + done.stderr
    assert not list((mem0_dir / "memtrace-mem0ai").iterdir())  # every state's folder removed at exit
