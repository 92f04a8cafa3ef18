"""One process at a time per run folder: an OS lock that dies with the process holding it.

`hold_run_lock(folder, command)` takes an `fcntl.flock` on `<folder>/.memtrace.lock` (holder written into
it); a second holder gets `RunLocked` (a `ConfigError`, exit 2) naming folder and holder. Holding a
folder's lock is holding its MLflow run's. `lock_is_free` and `pid_alive` serve stale-run detection.
It works between processes of one machine only.
"""

from __future__ import annotations

import fcntl
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from memtrace_loop.pipeline.core.config import ConfigError

LOCK_FILE = ".memtrace.lock"


class RunLocked(ConfigError):
    """The run folder is locked by another live process; the message names the folder and the holder."""


def _holder_text(command: str) -> str:
    return f"pid {os.getpid()} on {socket.gethostname()} ({command})"


def lock_holder(folder: str | Path) -> str:
    """Who holds (or last held) the lock of `folder`, as written by the holder; "" when unknown."""
    try:
        return (Path(folder) / LOCK_FILE).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return ""


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


@contextmanager
def hold_run_lock(folder: str | Path, command: str) -> Iterator[Path]:
    """Hold the lock of `folder` (created if missing) inside the block; yields the lock file."""
    folder = Path(folder)
    path = folder / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by child processes (PEP 446)
    try:
        if not _try_lock(fd):
            holder = lock_holder(folder) or "another process"
            raise RunLocked(f"{folder} is in use by {holder}: one process at a time resumes or uploads a run; "
                            "wait for it to end (or stop it) and try again")
        os.ftruncate(fd, 0)
        os.pwrite(fd, (_holder_text(command) + "\n").encode(), 0)
        yield path
    finally:
        with suppress(OSError):
            os.close(fd)  # releases the lock


def lock_is_free(folder: str | Path) -> bool:
    """Whether no live process holds the lock of `folder` (True when it has no lock file or is gone)."""
    path = Path(folder) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return True
    try:
        free = _try_lock(fd)
        if free:
            fcntl.flock(fd, fcntl.LOCK_UN)
        return free
    finally:
        os.close(fd)


def pid_alive(pid: str | int) -> bool:
    """Whether a process with this id lives on this machine (this process itself: False)."""
    text = str(pid)
    if not text.isdigit() or int(text) == os.getpid():
        return False
    try:
        os.kill(int(text), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True
