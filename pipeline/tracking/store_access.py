"""Reaching the tracking store safely: one migration of a fresh SQLite store, patience with a locked one,
failing fast when a tracking server is down.

- `store_lock(uri)`: an exclusive `fcntl.flock` on `<db>.lock` beside a SQLite store (no-op otherwise),
  held around MLflow's first connection, which creates / migrates a fresh store unsafely in parallel.
- `retry_when_locked(call)`: the call again, with a doubling pause, while SQLite answers `database is
  locked`; anything else is raised at once.
- `configure_tracking_client(timeout_s, max_retries)`: MLflow's documented HTTP knobs in the environment
  (a dead server costs seconds, not four minutes); entry points call it, library code never does.
- `tracking_available(uri)`: None when the store answers, else the cause; `failure_cause(exc)`: one line
  naming an exception, URL credentials masked (`redaction.redact`).

It does not import MLflow and does not decide what is logged.
"""

from __future__ import annotations

import fcntl
import logging
import math
import os
import re
import sqlite3
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, MutableMapping
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from memtrace_loop.pipeline.core.redaction import redact

logger = logging.getLogger(__name__)

T = TypeVar("T")

LOCKED = "database is locked"
LOCK_SUFFIX = ".lock"
# MLflow's HTTP client knobs (mlflow/environment_variables.py of MLflow 3.17)
ENV_TIMEOUT = "MLFLOW_HTTP_REQUEST_TIMEOUT"
ENV_MAX_RETRIES = "MLFLOW_HTTP_REQUEST_MAX_RETRIES"
ENV_BACKOFF_FACTOR = "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"
_SQLITE = "sqlite:///"


def sqlite_path(uri: str) -> Path | None:
    """The database file of a `sqlite:///` tracking URI (None for any other store)."""
    if not uri.startswith(_SQLITE):
        return None
    path = uri.removeprefix(_SQLITE).split("?", 1)[0]
    return None if path in ("", ":memory:") else Path(path)


@contextmanager
def store_lock(uri: str) -> Iterator[None]:
    """Hold an exclusive lock on `<db>.lock` beside a SQLite store (waiting for another process that
    holds it); nothing for other stores. Creates the database's folder when missing."""
    path = sqlite_path(uri)
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    lock_path = path.with_name(path.name + LOCK_SUFFIX)
    with open(lock_path, "a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def is_locked_error(exc: BaseException) -> bool:
    """Whether `exc` (or an exception it was raised from) is SQLite's `database is locked`."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if LOCKED in str(current):
            return True
        current = current.__cause__ or current.__context__
    return False


def retry_when_locked(
    call: Callable[[], T], *, attempts: int = 4, backoff_s: float = 1.0, what: str = "tracking store write",
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """`call()`, tried up to `attempts` times while it fails with `database is locked`, pausing
    `backoff_s`, then twice that, ... between tries (each try also waits SQLite's own busy timeout).
    The last failure, and any other exception, is raised."""
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except Exception as exc:
            if attempt == attempts or not is_locked_error(exc):
                raise
            pause = backoff_s * 2 ** (attempt - 1)
            logger.warning("%s: the store is locked (try %d of %d); retrying in %.1f s", what, attempt, attempts,
                           pause)
            sleep(pause)
    raise AssertionError("unreachable")  # the loop returns or raises


def configure_tracking_client(
    timeout_s: float, max_retries: int, environ: MutableMapping[str, str] | None = None
) -> dict[str, str]:
    """Set MLflow's HTTP timeout (whole seconds, at least 1), retry count and backoff factor (1 s,
    doubling) in `environ` (the process environment by default; `TrackingConfig` checked the values);
    returns what was set. The config wins over values already in the environment."""
    knobs = {
        ENV_TIMEOUT: str(max(1, math.ceil(timeout_s))),
        ENV_MAX_RETRIES: str(int(max_retries)),
        ENV_BACKOFF_FACTOR: "1",
    }
    target = os.environ if environ is None else environ
    target.update(knobs)
    return knobs


def failure_cause(exc: BaseException, limit: int = 200) -> str:
    """`<ExceptionType>: <first line of its message>`, credentials in URLs masked, at most `limit` chars."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    text = redact(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _probe_http(uri: str, timeout_s: float) -> str | None:
    """None when the server answers `/health` with anything below 500 (an auth error is an answer:
    it surfaces on the first real request), else the cause."""
    url = re.sub(r"(?<=//)[^/@\s]+@", "", uri).rstrip("/") + "/health"  # never sends the credentials
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            status = int(response.status)
    except urllib.error.HTTPError as exc:
        status = int(exc.code)
    except (urllib.error.URLError, OSError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        return redact(str(reason))
    return None if status < 500 else f"HTTP {status} from /health"


def _unwritable(folder: Path) -> str | None:
    """None when `folder` (or its nearest existing parent, where it would be created) is writable."""
    existing = next(p for p in (folder, *folder.parents) if p.exists() or p == p.parent)
    return None if os.access(existing, os.W_OK) else f"{folder} is not writable"


def _probe_sqlite(path: Path, timeout_s: float) -> str | None:
    unwritable = _unwritable(path.parent)
    if unwritable is not None or not path.exists():
        return unwritable
    try:
        connection = sqlite3.connect(str(path), timeout=timeout_s)
        try:
            connection.execute("SELECT name FROM sqlite_master LIMIT 1").fetchall()
        finally:
            connection.close()
    except sqlite3.Error as exc:
        return f"{path}: {exc}"
    return None


class TrackingUnavailable(RuntimeError):
    """The store cannot be reached before work that must be logged starts (the message says where and why)."""


def tracking_available(uri: str, timeout_s: float = 5.0) -> str | None:
    """None when the tracking store at `uri` answers (an HTTP server's `/health`, a SQLite file that
    can be read or created), else the cause. Other stores (databricks, SQL servers) are not probed."""
    if uri.startswith(("http://", "https://")):
        return _probe_http(uri, timeout_s)
    path = sqlite_path(uri)
    if path is not None:
        return _probe_sqlite(path, timeout_s)
    if uri.startswith("file:") or "://" not in uri:
        return _unwritable(Path(uri.removeprefix("file://").removeprefix("file:")))
    return None
