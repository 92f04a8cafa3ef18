"""What every app launch sets up in its process, from `console.setup_logging`:

- `quiet_progress_bars()`: no bar from `datasets` ("Generating train split") or MLflow's artifact
  transfers; ours (`console.RichProgress`) show the work (a value the user set wins; neither imported).
- `no_lm_history()`: DSPy keeps no global history of LM calls (`dspy.configure(disable_history=True)`):
  nobody reads it, and where a run calls many copies of its stages (replay, the rescue oracle) it costs
  gigabytes and most of the time (docs/results.md, "Rescue oracle").
- `job_label()`: a multirun job's overrides as its folder's name has them, never one that could carry
  a credential, else its number (None outside a multirun); the parallel launcher's jobs share the
  terminal, so each console log line starts with it (`log_prefix`).

Entry points only: library code never calls this module.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Collection

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from memtrace_loop.pipeline.core.redaction import is_secret_name, key_like, redact

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
