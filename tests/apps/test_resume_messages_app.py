"""Resuming with the printed command says only what is true: `memtrace optimize resume=<folder>`, pasted
from the interrupted run's last line, names as ignored only the overrides the user typed that differ
from the saved config (not the ~11 keys of a non-default memory system the user never typed), and the
resumed summary shows the dev start score from the checkpoint (not `-`).

The interrupted run is made in-process (a real SIGINT once iteration 1 is logged, as a user's Ctrl-C);
the resume runs the printed command through `bash -c`, as the user pastes it, as a Hydra app launch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from memtrace_loop.experiments.lifecycle import stop_on_signals
from memtrace_loop.experiments.optimize import optimize
from memtrace_loop.pipeline.core.stop import Interrupted, StopToken
from memtrace_loop.pipeline.tracking import loop_observer as loop_tracking

pytestmark = pytest.mark.usefixtures("mlflow_db")

TYPED_AT_START = ["memory_system=rag", "dataset.n_conversations=4", "loop.max_iterations=2", "workers=2"]


def interrupted_rag_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A rag optimization interrupted by SIGINT after iteration 1: the resume command it printed."""
    original = loop_tracking.TrackingLoopObserver.on_iteration

    def interrupt_after_first(self, record):
        original(self, record)
        if record.iteration == 1:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(loop_tracking.TrackingLoopObserver, "on_iteration", interrupt_after_first)
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        cfg = compose("optimize", overrides=[f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
                                             f"cache_dir={tmp_path}/cache", *TYPED_AT_START])
    stop = StopToken()
    with pytest.raises(Interrupted) as interrupted, stop_on_signals(stop):
        optimize(cfg, stop=stop)
    monkeypatch.setattr(loop_tracking.TrackingLoopObserver, "on_iteration", original)
    note = interrupted.value.__notes__[0]
    return note.split("resume with: ", 1)[1].strip()


@pytest.mark.slow  # an optimization and its resume (~20 s)
def test_the_printed_resume_names_only_typed_overrides_and_shows_the_dev_start(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    printed = interrupted_rag_run(tmp_path, monkeypatch)
    run_dir = next((tmp_path / "outputs" / "optimize").iterdir())
    first = json.loads((run_dir / "checkpoint.json").read_text())["history"][0]
    assert first["iteration"] == 0

    # as printed (memory_system=rag and the small dataset are NOT typed again: the saved config has them),
    # plus one override that differs from the saved config, one that does not (seed), and workers
    typed = f"{printed} loop.min_gain=0.5 seed=0 workers=1"
    done = subprocess.run(["bash", "-c", typed], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr[-3000:]
    output = done.stdout + done.stderr
    ignoring = [line for line in output.splitlines() if "ignoring" in line]
    assert len(ignoring) == 1 and "resume: ignoring loop.min_gain (" in ignoring[0], ignoring

    overall = next(line for line in done.stdout.splitlines() if line.strip().startswith(("┃ overall", "│ overall")))
    low, high = first["dev_ci"]
    dev_start = f"{100 * first['dev_accuracy']:.1f} [{100 * low:.1f}, {100 * high:.1f}]"
    assert overall.split("│")[2].strip() == dev_start, overall  # the first score column: dev start
    assert "dev start from the checkpoint" in done.stdout

