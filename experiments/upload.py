"""`memtrace upload run_dir=<dir>`: log a run that `memtrace run` saved on disk to the tracking store.

For when MLflow was unreachable (or locked) at the end of a run: the store is probed first (a dead one
fails in seconds, the cause named), then `pipeline.tracking.run_record.upload_saved_run` logs the saved
record and artifacts as the run would have; idempotent, one upload of a folder at a time (exit 2).
"""

from __future__ import annotations

import logging

import hydra
from memtrace_loop.experiments.config import validated_upload
from memtrace_loop.experiments.console import setup_logging
from memtrace_loop.experiments.console_layout import app_console
from memtrace_loop.experiments.factory import launch_dir, resolve, to_plain
from memtrace_loop.experiments.lifecycle import run_app
from memtrace_loop.experiments.secret_guard import guarded
from memtrace_loop.pipeline.core.redaction import scrub_url
from memtrace_loop.pipeline.tracking.mlflow_tracker import MlflowTracker
from memtrace_loop.pipeline.tracking.run_record import Upload, record_dir, upload_saved_run
from memtrace_loop.pipeline.tracking.store_access import (
    configure_tracking_client,
    failure_cause,
    tracking_available,
)
from omegaconf import DictConfig
from rich.console import Console

logger = logging.getLogger("memtrace.upload")


class UploadError(RuntimeError):
    """The tracking store cannot take the upload (unreachable, locked); nothing or only part was logged."""


def upload(cfg: DictConfig, console: Console | None = None) -> Upload:
    console = console or app_console()
    config = validated_upload(to_plain(cfg))
    configure_tracking_client(config.tracking.timeout_s, config.tracking.max_retries)
    run_dir = record_dir(resolve(config.run_dir, launch_dir()))
    uri = scrub_url(config.tracking.uri)
    cause = tracking_available(config.tracking.uri, config.tracking.timeout_s)
    if cause is not None:
        raise UploadError(f"MLflow unreachable at {uri} ({cause}): nothing uploaded from {run_dir}")
    try:
        done = upload_saved_run(MlflowTracker(config.tracking.uri), run_dir, config.experiment)
    except (FileNotFoundError, ValueError):
        raise
    except Exception as exc:
        raise UploadError(f"upload of {run_dir} to {uri} failed ({failure_cause(exc)}); it is safe to run "
                          f"again") from exc
    if done.created:
        console.print(f"Uploaded {run_dir} as MLflow run [bold]{done.run_id}[/] in {uri} "
                      f"(experiment {done.experiment!r})")
    elif done.continued:
        console.print(f"Completed MLflow run [bold]{done.run_id}[/] in {uri} with {run_dir}")
    else:
        console.print(f"Already uploaded: {run_dir} is MLflow run [bold]{done.run_id}[/] in {uri}; nothing logged")
    return done


@guarded  # refuses secret and misspelt overrides before Hydra parses (and saves) them
@hydra.main(config_path="pkg://memtrace_loop.conf", config_name="upload", version_base="1.3")
def main(cfg: DictConfig) -> None:
    setup_logging()
    run_app("upload", lambda _stop: upload(cfg))
