"""Where an app writes (one folder per launch, never shared by two) and what its MLflow run is called.

The YAML files name an app's output folder `${now:%Y-%m-%d_%H-%M-%S}-${memtrace.run_id:}`, so two
launches in the same second differ and the names still sort by time. `register_resolvers()` (called
when `memtrace_loop.conf` is imported) registers `memtrace.run_id`: six hex characters drawn once per
process and cached in the config (a sweep's jobs in other processes agree on the sweep folder).
`app_output_dir(app, base_dir)` is the running Hydra job's folder, or, for an app called as a library
(compose API, tests), a fresh `outputs/<app>/<time>-<id>`. `run_name` names a `-m` sweep job's MLflow
run by its task overrides (`optimize optimizer=gepa seed=1`), so a sweep's runs are told apart; a single
run keeps the app's default name, and `run_name=` always wins. It creates folders and nothing else.
"""

from __future__ import annotations

import functools
import secrets
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import OmegaConf

RUN_ID_RESOLVER = "memtrace.run_id"
TIME_FORMAT = "%Y-%m-%d_%H-%M-%S"
MAX_NAME_CHARS = 250  # MLflow keeps run names up to 250 characters
LEFT_OUT = ("run_name=", "resume=", "hydra.", "+hydra.")  # say nothing about what the job computes


@functools.cache
def process_run_id() -> str:
    """Six hex characters, the same for the whole process (so every `${memtrace.run_id:}` agrees)."""
    return secrets.token_hex(3)


def register_resolvers() -> None:
    if not OmegaConf.has_resolver(RUN_ID_RESOLVER):
        # cached per config (Hydra copies the cache into every job's config): a sweep's jobs run in other
        # processes (joblib, submitit) resolve `hydra.sweep.dir` to the folder the launcher created
        OmegaConf.register_new_resolver(RUN_ID_RESOLVER, process_run_id, use_cache=True)


def app_output_dir(app: str, base_dir: Path) -> Path:
    """The running Hydra job's output folder, else a fresh `<base_dir>/outputs/<app>/<time>-<id>`; created."""
    if HydraConfig.initialized():
        out = Path(HydraConfig.get().runtime.output_dir)
    else:
        out = base_dir / "outputs" / app / f"{time.strftime(TIME_FORMAT)}-{uuid.uuid4().hex[:6]}"
    out.mkdir(parents=True, exist_ok=True)
    return out


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
