"""Answering vs `workers` against a slow endpoint: `python -m memtrace_loop.experiments.lab.bench.workers_bench`
(from the repository root; `make bench`).

The openai backend talks HTTP to the test server (`tests/support/openai_server.py`, in a child process,
each distinct request answered from memory after a first unreported pass) waiting `--latency` seconds
per reply; Long-Context answers the same `--questions` with each worker count, DSPy's cache off. Per
count: calls, seconds, calls/s, speed-up over the first count and efficiency (goal `GOAL`). No test
times it.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_module
from memtrace_loop.experiments.config import RunConfig, validated_run
from memtrace_loop.experiments.factory import build_components, load_chosen_dataset, to_plain
from memtrace_loop.experiments.lab.bench.common import parser, rich_table, timed
from memtrace_loop.pipeline.backends.services import RunLedger, RunServices
from memtrace_loop.pipeline.loop.runner import run_dataset
from rich.console import Console
from rich.table import Table

WORKERS = (1, 4, 8, 16)
GOAL = 0.8  # speed-up >= 0.8 x workers
KEY_VARIABLE = "MEMTRACE_BENCH_KEY"


def _serve(latency_s: float, url_queue: Any, stop_event: Any) -> None:
    """The child process: the test server (a test double, under tests/: run the bench from the repository
    root) until `stop_event`, its URL sent back first. It answers each distinct conversation once and then
    from memory: the stand-in costs ~20 ms of CPU per request, which would cap a single-process server near
    50 requests/s and measure the test server instead of our side."""
    if (root := str(Path.cwd())) not in sys.path:
        sys.path.insert(0, root)
    try:
        from tests.support.openai_server import OpenAIStubServer
    except ImportError as exc:  # installed without the repository's tests
        raise SystemExit(f"workers_bench: run it from the repository root (needs tests/support): {exc}") from exc
    with OpenAIStubServer() as server:
        respond, answers = server.responder, {}

        def remembered(messages: list[dict[str, Any]]) -> str:
            key = json.dumps(messages, sort_keys=True)
            if key not in answers:  # a race answers twice, the same reply
                answers[key] = respond(messages)
            return answers[key]

        server.responder = remembered
        server.latency_s = latency_s
        url_queue.put(server.base_url)
        stop_event.wait()


def _config(base_url: str, conversations: int) -> RunConfig:
    """The `memtrace run` config (composed as the app composes it) for the openai backend at `base_url`."""
    overrides = ["lm=openai", f"lm.task.api_base={base_url}", f"lm.task.api_key_env={KEY_VARIABLE}",
                 "lm.task.model=stub-model", "lm.task.cache=false",
                 "lm.task.reuse_calls=false", "memory_system=long_context",
                 f"dataset.n_conversations={conversations}"]
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        return validated_run(to_plain(compose("run", overrides=overrides)))


def measure(base_url: str, questions: int, workers: Sequence[int]) -> list[tuple[int, int, float]]:
    """(workers, LM calls counted by the ledger, seconds) of `run_dataset` over the same questions, per count."""
    os.environ.setdefault(KEY_VARIABLE, "bench-key")  # the test server checks no key
    config = _config(base_url, conversations=max(1, questions // 20 + 1))
    dataset = load_chosen_dataset(config.dataset, Path.cwd())
    dataset = replace(dataset, questions=tuple(dataset.questions[:questions]))
    timings = []
    for count in (max(workers), *workers):  # the first pass warms the server's memory; not reported
        ledger = RunLedger()
        _lms, system, judge = build_components(config, Path.cwd(), RunServices(ledger=ledger))
        _, seconds = timed(lambda: run_dataset(system, judge, dataset, workers=count))  # noqa: B023
        timings.append((count, ledger.call_tally().made(), seconds))
    return timings[1:]


def table(timings: Sequence[tuple[int, int, float]], latency_s: float) -> Table:
    first_workers, first_calls, first_seconds = timings[0]
    baseline = first_seconds / max(1, first_calls)  # seconds per call at the first worker count
    rows = []
    for workers, calls, seconds in timings:
        per_call = seconds / max(1, calls)
        speedup = baseline / per_call if per_call else 0.0
        efficiency = speedup / (workers / first_workers)
        rows.append((workers, calls, f"{seconds:.2f}", f"{calls / seconds:.1f}", f"{speedup:.2f}x",
                     f"{efficiency:.2f}", "met" if efficiency >= GOAL else "MISSED"))
    return rich_table(f"Answering vs workers ({latency_s * 1000:.0f} ms per LM call, server process)",
                      ("workers", "LM calls", "seconds", "calls/s", "speed-up", "efficiency", "goal"), rows)


def main(argv: Sequence[str] | None = None) -> int:
    cli = parser(__doc__)
    cli.add_argument("--latency", type=float, default=0.2, help="seconds the server waits per request")
    cli.add_argument("--questions", type=int, default=64, help="questions answered (and judged) per worker count")
    cli.add_argument("--workers", type=int, nargs="+", default=list(WORKERS),
                     help="worker counts; the first is the baseline")
    args = cli.parse_args(argv)
    context = multiprocessing.get_context("spawn")
    urls, stop = context.Queue(), context.Event()
    child = context.Process(target=_serve, args=(args.latency, urls, stop), daemon=True)
    child.start()
    try:
        timings = measure(urls.get(timeout=120), args.questions, args.workers)
    finally:
        stop.set()
        child.join(timeout=10)
    Console(width=100).print(table(timings, args.latency))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
