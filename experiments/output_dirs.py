"""Where an app writes: one folder per launch, never shared by two launches.

Hydra names an app's output folder from the config (`hydra.run.dir`, `hydra.sweep.dir`); the YAML
files put `${now:%Y-%m-%d_%H-%M-%S}-${memtrace.run_id:}` there, so two launches in the same second get
different folders and the names still sort by time. `register_resolvers()` (called when `memtrace_loop.conf`
is imported, which Hydra does before resolving anything) registers the `memtrace.run_id` resolver: six
hex characters drawn once per process and cached in the config (so a sweep's jobs running in other
processes, under the joblib or submitit launcher, agree with the launcher on the sweep folder).
`app_output_dir(app, base_dir)` is the folder of the running Hydra job, or, when an app is called as a
library (Hydra's compose API, tests), a fresh `outputs/<app>/<time>-<id>` of its own.
It creates folders and nothing else.
"""

from __future__ import annotations

import functools
import secrets
import time
import uuid
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

RUN_ID_RESOLVER = "memtrace.run_id"
TIME_FORMAT = "%Y-%m-%d_%H-%M-%S"


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
