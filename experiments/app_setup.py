"""What every app launch sets up in its process, from `console.setup_logging` (the first call of every
app's `main`): the libraries' own progress bars off, and a sweep job's console log lines labelled.

- `quiet_progress_bars()`: `datasets` draws a bar per file it reads ("Generating train split") and
  MLflow one per artifact folder it downloads ("Downloading artifacts"); ours (`console.RichProgress`)
  already shows the work, and theirs interleave with it and with the logs. Both are turned off for the
  process: `datasets.disable_progress_bars()` (or, before `datasets` is imported, its
  `HF_DATASETS_DISABLE_PROGRESS_BARS`) and MLflow's `MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR` (a value the
  user set wins); neither library is imported for it.
- `no_lm_history()`: DSPy records every LM call, whole prompt and reply, in a global history, in the
  LM's own and in every calling module's (up to 10,000 entries each); no app reads them. Where a run
  calls many copies of its stages (replay verification, the rescue oracle) they cost gigabytes and most
  of the time, for the same numbers (measured: docs/results.md, "Rescue oracle"). Off for the process
  (`dspy.configure(disable_history=True)`).
- `job_label()`: in a Hydra multirun, the job's overrides as its folder's name has them (e.g.
  `memory_system=rag,optimizer=none,seed=0`) but never one that could carry a credential (a URL, a
  secret-named key, a key-looking value: the label is printed before the app knows its secrets), else
  its number; None outside a multirun. The parallel launcher
  (`conf/hydra/launcher/parallel.yaml`) runs jobs in processes that share the terminal, so
  each console log line starts with its job's label (`log_prefix`).

Entry points only: library code never calls this module.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Collection

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from memtrace_loop.pipeline.core.redaction import is_secret_name, key_like, redact

__all__ = [
    "ENV_DATASETS_PROGRESS", "ENV_MLFLOW_PROGRESS", "job_label", "log_prefix", "no_lm_history", "quiet_progress_bars",
]

ENV_MLFLOW_PROGRESS = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"
ENV_DATASETS_PROGRESS = "HF_DATASETS_DISABLE_PROGRESS_BARS"  # read once, when `datasets` is imported


def quiet_progress_bars() -> None:
    """No progress bar from `datasets` or from MLflow's artifact transfers in this process (importing
    neither: an app that reads no data file or downloads nothing does not pay for them)."""
    if "datasets" in sys.modules:
        sys.modules["datasets"].disable_progress_bars()
    else:
        os.environ.setdefault(ENV_DATASETS_PROGRESS, "1")
    os.environ.setdefault(ENV_MLFLOW_PROGRESS, "false")


def no_lm_history() -> None:
    """DSPy keeps no history of LM calls in this process (the module doc; `dspy.inspect_history` is then
    empty). Call it from the main thread, as any `dspy.configure`."""
    import dspy  # the LM stack, for the apps (and benches) that call LMs

    dspy.configure(disable_history=True)


def _shown(override: str, excluded: Collection[str]) -> bool:
    """Whether a job's override may name it on the console: not excluded from its folder's name, and
    nothing that could be a credential (a secret-looking key, a URL, a key-looking or masked value)."""
    key, _, value = override.lstrip("+~").partition("=")
    if key in excluded or is_secret_name(key) or "://" in value or key_like(value):
        return False
    return redact(value) == value


def job_label() -> str | None:
    """The running multirun job's label: its overrides as its folder's name has them (`key=value`
    sorted, `override_dirname`'s excluded keys left out) without any that could carry a credential,
    else `job <num>`; None when not in a multirun."""
    if not HydraConfig.initialized():
        return None
    hydra = HydraConfig.get()
    if hydra.mode != RunMode.MULTIRUN:
        return None
    excluded = set(hydra.job.config.override_dirname.exclude_keys)
    shown = sorted(o for o in hydra.overrides.task if _shown(o, excluded))
    return ",".join(shown) or f"job {hydra.job.num}"


def log_prefix() -> str:
    """`[<job label>] ` for a console log format in a multirun job ('%' escaped), else ''."""
    label = job_label()
    return f"[{label.replace('%', '%%')}] " if label else ""
