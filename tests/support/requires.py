"""Prerequisites outside the checkout (smartcomment, a browser, `../shared` data): skipped when missing on
a developer's machine, a FAILURE under `CI=true` (what `.ci/run` exports), where they must all be present.

    @requires(missing_locomo())            # a test or `pytestmark = requires(...)` on a module
    smartcomment = import_or_fail("smartcomment", "installed by `make`")   # module level
    require(missing_locomo())              # inside a test body
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest

from tests.support.paths import LOCOMO

CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def requires(missing: str | None) -> pytest.MarkDecorator:
    """A `requires` mark: `missing` is None when the prerequisite is there, else what is missing
    (tests/conftest.py skips, or fails under CI=true)."""
    return pytest.mark.requires(missing)


def require(missing: str | None) -> None:
    """Inside a test (or at module level): skip, or fail under CI=true, when `missing` is not None."""
    if missing:
        if CI:
            pytest.fail(f"CI=true and a prerequisite is missing: {missing}", pytrace=False)
        pytest.skip(missing, allow_module_level=True)


def import_or_fail(name: str, reason: str = "") -> ModuleType:
    """`pytest.importorskip` for third-party prerequisites, failing under CI=true. Never for our own
    modules: an import error of the project must fail everywhere."""
    try:
        return importlib.import_module(name)
    except ImportError as error:
        require(f"{name} cannot be imported ({error}){': ' + reason if reason else ''}")
        raise  # unreachable: require() skips or fails


def missing_locomo() -> str | None:
    """None when the licensed LoCoMo subset is in `../shared`, else what is missing."""
    return None if LOCOMO.exists() else f"the LoCoMo subset is not at {LOCOMO} (licensed data lives only in ../shared)"
