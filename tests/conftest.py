"""Test-wide environment: offline, quiet, and every cache and store in a temporary directory.

Fixtures: `mlflow_db` / `mlflow_uri`, a fresh MLflow store at `tmp_path/mlflow.db` that is a copy of one
store migrated once per process (tests/support/store.py; a test module that writes its stores there says
`pytestmark = pytest.mark.usefixtures("mlflow_db")`). DSPy's history of LM calls is off, as in every
app; a test that reads `lm.history` uses the `lm_history` fixture. Tests run in a temporary working
directory (`_in_own_cwd`): an app called as a library writes its `outputs/<app>/<time>-<id>` folder under
the directory it was launched in, never into the checkout. The `requires(missing)` mark
(tests/support/requires.py): a missing prerequisite outside the checkout skips locally and fails under
CI=true. Layers: unit (pure functions and records), stages (one system's stages, scripted or stand-in LM),
http (real local servers), apps (the Hydra apps, real stores), e2e (whole loops and runs, mostly slow),
interop (smartcomment)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

_TMP = tempfile.mkdtemp(prefix="memtrace-tests-")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
# `datasets` (the data layer) caches every file it reads: never in the user's cache, always in this run's
os.environ["HF_HOME"] = os.path.join(_TMP, "hf-home")
os.environ["HF_DATASETS_CACHE"] = os.path.join(_TMP, "hf-datasets")
os.environ.setdefault("DSPY_CACHEDIR", os.path.join(_TMP, "dspy-cache"))
os.environ.setdefault("MLFLOW_TRACKING_URI", "sqlite:///" + os.path.join(_TMP, "mlflow.db"))
# the real mem0 library (memory_system=mem0ai) reads both at import: no telemetry, nothing under ~/.mem0
os.environ.setdefault("MEM0_TELEMETRY", "False")
os.environ["MEM0_DIR"] = os.path.join(_TMP, "mem0")
os.environ.setdefault("MEMTRACE_MAX_TRACES", "0")  # question traces cost ~0.3 s each: only where tested

from pathlib import Path  # noqa: E402

import dspy  # noqa: E402
import pytest  # noqa: E402
from memtrace_loop.experiments.app_setup import no_lm_history  # noqa: E402

from tests.support.requires import CI  # noqa: E402
from tests.support.store import fresh_store  # noqa: E402

# as in every app: DSPy keeps no record of the calls, which would otherwise pile up per LM and per calling
# module in a worker process that runs hundreds of tests
no_lm_history()


@pytest.fixture(scope="session", autouse=True)
def _in_own_cwd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The session's working directory: a fresh temporary one (not a test's `tmp_path`, which a test may
    count files in), set before any module's fixtures run their apps."""
    with pytest.MonkeyPatch.context() as patch:
        cwd = tmp_path_factory.mktemp("cwd")
        patch.chdir(cwd)
        yield cwd


@pytest.fixture
def lm_history():
    """DSPy's history of LM calls kept during the test (`lm.history`; off for the rest of the session)."""
    with dspy.context(disable_history=False):
        yield


@pytest.fixture
def mlflow_db(tmp_path: Path) -> Path:
    """`tmp_path/mlflow.db`: a fresh, already migrated MLflow store (a copy of the process's template)."""
    path = tmp_path / "mlflow.db"
    fresh_store(path)
    return path


@pytest.fixture
def mlflow_uri(mlflow_db: Path) -> str:
    """The `sqlite:///` URI of `mlflow_db`."""
    return f"sqlite:///{mlflow_db}"


def pytest_runtest_setup(item: pytest.Item) -> None:
    """`@requires(missing)`: skip when `missing` names an absent prerequisite, fail instead under CI=true."""
    for mark in item.iter_markers("requires"):
        missing = mark.args[0] if mark.args else None
        if missing:
            if CI:
                pytest.fail(f"CI=true and a prerequisite is missing: {missing}", pytrace=False)
            pytest.skip(missing)
