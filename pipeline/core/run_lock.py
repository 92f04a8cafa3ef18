"""One process at a time per run folder: an OS lock that dies with the process holding it.

`hold_run_lock(folder, command)` takes an exclusive `fcntl.flock` on `<folder>/.memtrace.lock` for as
long as the `with` block runs (`memtrace optimize` from its start or `resume=`, `memtrace upload`
while it uploads), and writes the holder (pid, host, command) into the file. A second process, or a
second `hold_run_lock` in the same process, gets `RunLocked` at once: one line naming the folder and
the holder. The kernel drops the lock when the holder exits in any way (Ctrl-C, SIGKILL, a crash), so
a lock is never stale; the file itself stays, harmless (its content is informative only).

The MLflow run of a folder is locked through the folder: `resume=` and `upload` both start from the
folder, which names its run (the checkpoint's `mlflow_run_id`, the run record's id), so holding the
folder's lock is holding its run's. `lock_is_free(folder)` tells whether nobody holds it (what
`optimize` asks before marking a RUNNING run FAILED as stale); `pid_alive(pid)` whether a process of
this machine (other than this one) lives, for a run whose folder is gone or that holds no lock.

Decision: `RunLocked` is a `ConfigError` (exit code 2): the folder named by `resume=` / `run_dir=` cannot
be used now; the user waits for the holder or names another folder. A lock works between processes of
one machine (and on network file systems that support `flock`); it does not know other machines.
It decides nothing about what the holder does with the folder.
"""

from __future__ import annotations

import fcntl
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from memtrace_loop.pipeline.core.config import ConfigError

__all__ = ["LOCK_FILE", "RunLocked", "hold_run_lock", "lock_holder", "lock_is_free", "pid_alive"]

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
    """Hold the lock of `folder` (created if missing) inside the block; yields the lock file.
    `RunLocked` naming the folder and the holder when another process (or block) holds it."""
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
