"""One app launch as one record: `AppSession`, what `run` and `optimize` start from.

`open_session(command, given, validate, ...)` masks the composed config's secrets (`secret_guard.protect`),
picks the run folder and the config to use (`folder_of`: a fresh folder, or a resumed run's folder and
saved config), validates it into the app's typed record, sets the MLflow client's timeouts and creates
the per-run services (stop token, ledger of calls, retries and failures, local servers: `RunServices`).
Below it the apps read `session.config` only; `session.source` (the config as given) is for what
serialises the whole config (MLflow params, config.json). It builds no LM and touches no store.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from memtrace_loop.experiments.config import OptimizeConfig, RunConfig, stand_in_notice
from memtrace_loop.experiments.console_layout import app_console
from memtrace_loop.experiments.factory import launch_dir
from memtrace_loop.experiments.output_dirs import app_output_dir
from memtrace_loop.experiments.secret_guard import protect
from memtrace_loop.pipeline.backends.lm import configure_cache
from memtrace_loop.pipeline.backends.local_server import LocalServers
from memtrace_loop.pipeline.backends.services import RunLedger, RunServices
from memtrace_loop.pipeline.core.command_line import command_line
from memtrace_loop.pipeline.core.run_folder import RunFolder
from memtrace_loop.pipeline.core.stop import StopToken
from memtrace_loop.pipeline.tracking.mlflow_tracker import MlflowTracker
from memtrace_loop.pipeline.tracking.redacting_tracker import RedactingTracker
from memtrace_loop.pipeline.tracking.run_logging import scrub
from memtrace_loop.pipeline.tracking.store_access import configure_tracking_client
from memtrace_loop.pipeline.tracking.traces import FailureTraces
from rich.console import Console

C = TypeVar("C", bound=RunConfig | OptimizeConfig)
# (the run folder, the composed config to validate): a fresh folder and the config given, by default
FolderOf = Callable[[Mapping[str, Any], Path], tuple[Path, Mapping[str, Any]]]


@dataclass(frozen=True)
class AppSession(Generic[C]):
    """One launch of an app: its validated config, its folder, console and per-run services."""

    command: str
    config: C
    source: Mapping[str, Any]  # the composed config, for whole-config serialisation only (see module doc)
    secrets: tuple[str, ...]
    base_dir: Path
    folder: RunFolder
    console: Console
    services: RunServices

    @property
    def ledger(self) -> RunLedger:
        return self.services.ledger

    @property
    def notice(self) -> str | None:
        """The stand-in LM on a real dataset: said at the start, the end, as a tag and in the report."""
        return stand_in_notice(self.config)

    @property
    def uri(self) -> str:
        """The tracking store's URI as shown (credentials masked)."""
        return scrub(self.config.tracking.uri, self.secrets)

    def tracker(self) -> RedactingTracker:
        """The run's tracker: the configured MLflow store, every value logged through it masked."""
        return RedactingTracker(MlflowTracker(self.config.tracking.uri), self.secrets)

    def configure_cache(self) -> None:
        """Point DSPy's response cache at the configured folder, before the first LM is built."""
        used = any(lm.cache for lm in self.config.lm.by_role().values())
        configure_cache(self.base_dir / self.config.cache_dir, used=used)

    def failure_traces(self) -> FailureTraces | None:
        """The train failures `optimize` logs per iteration as MLflow traces; None when off or capped at 0."""
        tracking = self.config.tracking
        cap = min(tracking.max_traces_per_iteration, tracking.max_traces)
        if not (tracking.traces and cap):
            return None
        return FailureTraces(cap, self.secrets, self.services.stop)

    def scrub(self, text: str) -> str:
        return scrub(text, self.secrets)

    def print_mlflow_run(self, run_id: str | None, open_hint: str) -> None:
        """The closing lines naming the MLflow run (and, for a local store, how to open it)."""
        self.console.print(
            f"MLflow run [bold]{run_id}[/] in {self.uri} (experiment {self.config.tracking.experiment!r})"
        )
        if self.uri.startswith("sqlite:///"):
            mlflow_ui = command_line("mlflow", "ui", "--backend-store-uri", self.uri)
            self.console.print(f"{open_hint}: {mlflow_ui}", soft_wrap=True, markup=False)


def fresh_folder(command: str) -> FolderOf:
    """The default `folder_of`: the launch's own output folder, the config as given."""
    return lambda given, base_dir: (app_output_dir(command, base_dir), given)


def open_session(
    command: str,
    given: Mapping[str, Any],
    validate: Callable[[Mapping[str, Any]], C],
    *,
    console: Console | None = None,
    stop: StopToken | None = None,
    servers: LocalServers | None = None,
    folder_of: FolderOf | None = None,
) -> AppSession[C]:
    """Secrets masked, folder picked, config validated, tracking client configured, services made."""
    secrets = protect(given)  # first: Hydra's saved files scrubbed, logs and console masked
    base_dir = launch_dir()
    folder, plain = (folder_of or fresh_folder(command))(given, base_dir)
    config = validate(plain)  # every key checked before anything is built (ConfigError naming the key)
    configure_tracking_client(config.tracking.timeout_s, config.tracking.max_retries)  # fail fast when MLflow is down
    if plain is not given:
        secrets = (*secrets, *protect(plain))  # a resumed run's saved config may name other key variables
    services = RunServices(stop, RunLedger.with_failure_limit(config.max_failed_share), servers)
    return AppSession(command, config, MappingProxyType(dict(plain)), secrets, base_dir, RunFolder(folder),
                      console or app_console(), services)
