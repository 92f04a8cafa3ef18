"""The MLflow run name of an app's run: a job of a `-m` sweep is named by its task overrides
(`optimize optimizer=gepa seed=1 memory_system=rag`, paths and Hydra's own overrides left out), so
the runs of a sweep are told apart in the MLflow UI; a single run keeps the app's default name; an
explicit `run_name=` always wins.

It reads Hydra's job config (`HydraConfig`: the mode and `overrides.task`); it names nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

MAX_NAME_CHARS = 250  # MLflow keeps run names up to 250 characters
LEFT_OUT = ("run_name=", "resume=", "hydra.", "+hydra.")  # say nothing about what the job computes


def overrides_name(command: str, overrides: Sequence[str]) -> str:
    """`<command> <override> <override> ...` (in the order given), cut to `MAX_NAME_CHARS`; overrides
    of Hydra itself, `run_name`, `resume` and those whose value is a path (holds a `/`, e.g.
    `cache_dir=/tmp/x`) are left out."""
    kept = [o for o in overrides if not o.startswith(LEFT_OUT) and "/" not in o.partition("=")[2]]
    return " ".join([command, *kept])[:MAX_NAME_CHARS]


def sweep_overrides() -> tuple[str, ...] | None:
    """The task overrides of the current job when it is a job of a multirun sweep, else None (a
    single run, or no Hydra job: the compose API)."""
    if not HydraConfig.initialized():
        return None
    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode != RunMode.MULTIRUN:
        return None
    return tuple(str(o) for o in hydra_cfg.overrides.task)


def run_name(command: str, given: str | None, default: str) -> str:
    """`given` when set; else, in a sweep, the job's overrides (`overrides_name`); else `default`."""
    if given:
        return given
    overrides = sweep_overrides()
    return overrides_name(command, overrides) if overrides is not None else default
