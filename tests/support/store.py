"""One migrated MLflow store per test process, copied wherever a test needs a fresh one.

Creating an SQLite store runs MLflow's alembic migrations (7-8 s); copying a migrated file costs
milliseconds and gives the same empty store (the "Default" experiment, schema at head). The template
is built lazily, once per process (so once per xdist worker), in a private temporary directory.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
import threading
from pathlib import Path

_LOCK = threading.Lock()
_TEMPLATE: Path | None = None


def template() -> Path:
    """The migrated, empty store file of this process (built on first use)."""
    global _TEMPLATE
    with _LOCK:
        if _TEMPLATE is None:
            from mlflow.tracking import MlflowClient

            path = Path(tempfile.mkdtemp(prefix="memtrace-store-template-")) / "mlflow.db"
            MlflowClient(tracking_uri=f"sqlite:///{path}").get_experiment("0")  # migrates, creates "Default"
            _dispose_engines()
            _TEMPLATE = path
        return _TEMPLATE


def fresh_store(path: Path | str) -> str:
    """Copy the migrated template to `path` (parents made) and return its `sqlite:///` URI.

    The Default experiment's artifact location is pointed at `<path's folder>/mlruns/0`, where a
    store created there would have put it relative to a test's own directory (never the checkout's).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template(), path)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE experiments SET artifact_location = ? WHERE experiment_id = 0",
                   (str(path.parent / "mlruns" / "0"),))
    db.close()
    return f"sqlite:///{path}"


def _dispose_engines() -> None:
    """Close MLflow's cached SQLAlchemy engines so the template file is not held open."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    for engine in list(getattr(SqlAlchemyStore, "_engine_map", {}).values()):
        engine.dispose()
