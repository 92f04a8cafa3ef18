"""Test-wide environment: offline, quiet, and every cache and store in a temporary directory."""

from __future__ import annotations

import os
import tempfile

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
os.environ.setdefault("MEMTRACE_MAX_TRACES", "0")  # question traces cost ~0.3 s each: only where tested
