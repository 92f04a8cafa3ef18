"""How an app stops: signals ask the work to stop, and every way out is one line and an exit code.

`stop_on_signals(token)`: the first Ctrl-C or SIGTERM is `token.request(...)` (no new LM call or item;
the work ends `Interrupted`, the MLflow run KILLED); a second gives up waiting (`KeyboardInterrupt`).
`run_app(command, body, secrets)` turns what ends an app body into one line on stderr (secrets masked,
notes such as "resume with ..." kept; the traceback in the log at DEBUG) and an exit code: 1 failed,
2 a usage error (config, data, checkpoint), 3 finished with failed LM calls, 130/143 interrupted (then
`os._exit`, not waiting for calls in flight: checkpoint and status are written before). In a pool
worker (a sweep job under joblib) it raises `JobExit(code)`: the other jobs go on, the launcher exits
with the code once the batch ended. `SweepStop` (the `-m` sweeps' callback) makes the launcher wait
for its jobs on Ctrl-C instead of aborting the pool, then exit 130; a second signal stops at once.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from memtrace_loop.experiments.console_layout import ECHO_ATTR
from memtrace_loop.experiments.secret_guard import known_secrets
from memtrace_loop.pipeline.backends.failure_guard import FinishedWithFailedCalls
from memtrace_loop.pipeline.core.config import ConfigError
from memtrace_loop.pipeline.core.prompt_files import PromptFileError
from memtrace_loop.pipeline.core.redaction import redact as scrub
from memtrace_loop.pipeline.core.run_folder import CheckpointError
from memtrace_loop.pipeline.core.stop import Interrupted, RunStopped, StopToken
from memtrace_loop.pipeline.data.locomo import DataError
from memtrace_loop.pipeline.tracking.run_record import NotLoggedError
from memtrace_loop.pipeline.tracking.store_access import TrackingUnavailable
from omegaconf import DictConfig

logger = logging.getLogger("memtrace")

EXIT_FAILED = 1
EXIT_USAGE = 2  # a bad config, data file or checkpoint: the user must change something
EXIT_FAILED_CALLS = 3  # the run went to its end, but some LM calls finally failed (allow_failed_calls=false)
EXIT_INTERRUPTED = 130  # 128 + SIGINT, the shell's convention
EXIT_TERMINATED = 143  # 128 + SIGTERM
STOP_MARKER = ".stopped"  # in a sweep's folder once Ctrl-C stopped it (SweepStop): jobs not yet started skip

T = TypeVar("T")

_SIGNAL_NAMES = {signal.SIGINT: "SIGINT (Ctrl-C)", signal.SIGTERM: "SIGTERM"}


@contextmanager
def stop_on_signals(token: StopToken) -> Iterator[None]:
    """While inside, SIGINT and SIGTERM request a stop through `token` (the second one raises
    `KeyboardInterrupt` at once). A no-op outside the main thread, where handlers cannot be set."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handle(signum: int, _frame: FrameType | None) -> None:
        name = _SIGNAL_NAMES.get(signal.Signals(signum), str(signum))
        if token.requested:
            raise KeyboardInterrupt(f"{name} again: stopping without waiting")
        token.request(f"interrupted by {name}")
        logger.warning("%s: stopping; no new LM call starts (send it again to stop at once)", name)

    previous = {sig: signal.signal(sig, handle) for sig in _SIGNAL_NAMES}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def exit_code(error: BaseException, token: StopToken | None = None) -> int:
    if isinstance(error, Interrupted | KeyboardInterrupt):
        return EXIT_TERMINATED if token is not None and "SIGTERM" in token.reason else EXIT_INTERRUPTED
    if isinstance(error, RunStopped):
        return EXIT_FAILED
    if isinstance(error, FinishedWithFailedCalls):
        return EXIT_FAILED_CALLS
    if _is_usage_error(error):
        return EXIT_USAGE
    return EXIT_FAILED


def _is_usage_error(error: BaseException) -> bool:
    return isinstance(error, CheckpointError | ConfigError | DataError | PromptFileError | FileNotFoundError)


def _speaks_for_itself(error: BaseException) -> bool:
    """Errors whose message is written for the user (no type name needed in front of it)."""
    return isinstance(error, RunStopped | NotLoggedError | TrackingUnavailable | FinishedWithFailedCalls) or (
        _is_usage_error(error)
    )


def one_line(error: BaseException, secrets: tuple[str, ...] = ()) -> str:
    """The error as one line: its message (type name for bare errors) and its notes, secrets masked."""
    if isinstance(error, KeyboardInterrupt):
        message = str(error) or "interrupted"
    elif _speaks_for_itself(error):
        message = str(error)
    else:
        message = f"{type(error).__name__}: {error}"
    notes = [str(note) for note in getattr(error, "__notes__", ())]
    text = "; ".join(part.strip() for part in [message, *notes] if part.strip())
    return " ".join(scrub(text, secrets).split())


def run_app(
    command: str, body: Callable[[StopToken], T], secrets: Callable[[], tuple[str, ...]] = tuple
) -> T:
    """`body(token)` under `stop_on_signals`; on any error, one line on stderr and `sys.exit` (or,
    after an interruption, `os._exit`) with the matching code. `secrets()` gives the values to mask."""
    token = StopToken()
    try:
        if in_pool_worker() and sweep_stopped():  # a job the pool started after Ctrl-C: it does not run
            raise Interrupted("not started: the sweep was interrupted")
        with stop_on_signals(token):
            result = body(token)
            token.check()  # a signal that arrived while the last (cached) work finished still stops
            return result
    except (RunStopped, KeyboardInterrupt, Exception) as error:
        code = exit_code(error, token)
        line = one_line(error, _safe(secrets))
        sys.stderr.write(f"memtrace {command}: {line}\n")
        # the same line in the job log (not again on the console), the traceback below it at DEBUG
        logger.error("memtrace %s: %s", command, line, extra={ECHO_ATTR: True})
        logger.debug("memtrace %s failed", command, exc_info=True)
        if in_pool_worker():
            raise JobExit(code) from None
        if code in (EXIT_INTERRUPTED, EXIT_TERMINATED):
            _exit_now(code)
        sys.exit(code)


class JobExit(Exception):
    """A sweep job's exit code on its way back from a pool worker: Hydra records the job as failed (the
    pool is not aborted), and it is unpickled in the launcher as `SystemExit(code)`, raised once the
    batch has ended, before the comparison callback."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code

    def __reduce__(self) -> tuple[type[SystemExit], tuple[int]]:
        return SystemExit, (self.code,)


def in_pool_worker() -> bool:
    """Whether this process is a pool worker (a sweep's job under joblib): its exit travels back as an exception."""
    return multiprocessing.current_process().name != "MainProcess"


def _stop_marker(sweep_dir: str, cwd: str) -> Path:
    folder = Path(sweep_dir)
    return (folder if folder.is_absolute() else Path(cwd) / folder) / STOP_MARKER


def sweep_stopped() -> bool:
    """Whether this Hydra job belongs to a sweep that `SweepStop` marked as interrupted."""
    if not HydraConfig.initialized():
        return False
    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode != RunMode.MULTIRUN:
        return False
    return _stop_marker(str(hydra_cfg.sweep.dir), str(hydra_cfg.runtime.cwd)).exists()


class SweepStop(Callback):
    """A Hydra callback: with the jobs in other processes (joblib), the launcher's first SIGINT/SIGTERM is
    waited out and `<sweep dir>/.stopped` written, so jobs started afterwards stop at once."""

    def __init__(self) -> None:
        self._previous: dict[int, Any] = {}

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        launcher = str(config.hydra.launcher.get("_target_", ""))
        if "joblib" not in launcher or threading.current_thread() is not threading.main_thread():
            return
        signalled: list[str] = []
        marker = _stop_marker(str(config.hydra.sweep.dir), os.getcwd())

        def handle(signum: int, _frame: FrameType | None) -> None:
            name = _SIGNAL_NAMES.get(signal.Signals(signum), str(signum))
            if signalled:
                raise KeyboardInterrupt(f"{name} again: stopping the sweep without waiting")
            signalled.append(name)
            with suppress(OSError):
                marker.parent.mkdir(parents=True, exist_ok=True)
                marker.write_text(f"{name}\n", encoding="utf-8")
            logger.warning("%s: stopping the sweep; each running job ends its MLflow run and keeps its checkpoint "
                           "(send it again to stop at once)", name)

        self._previous = {sig: signal.signal(sig, handle) for sig in _SIGNAL_NAMES}

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}


def _safe(secrets: Callable[[], tuple[str, ...]]) -> tuple[str, ...]:
    try:
        return (*known_secrets(), *secrets())
    except Exception:  # the error being reported may be the very one that broke reading the config
        return ()


def _exit_now(code: int) -> None:
    """Exit without joining worker threads still waiting on an LM (their calls are abandoned)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with suppress(Exception):
            stream.flush()
    os._exit(code)
