"""Prompt diffs are logged under names the installed MLflow UI previews: its artifact viewer picks a
viewer by the name's last extension (split on `.` and `/`) and shows text only for the extensions of its
text set (read here from the UI bundle MLflow ships), so `.diff` alone shows "Select a file to preview"."""

from __future__ import annotations

import re
from pathlib import Path

import mlflow
import pytest
from memtrace_loop.pipeline.tracking.loop_observer import DIFF_SUFFIX

BUNDLE = Path(mlflow.__file__).parent / "server" / "js" / "build" / "static" / "js"
TEXT_SET = re.compile(r'new Set\(\[("txt",[^\]]*)\]\)')


def previewed_text_extensions() -> set[str]:
    """The text extensions of the installed UI's artifact viewer (the set that starts with "txt")."""
    for path in sorted(BUNDLE.glob("*.js")):
        found = TEXT_SET.search(path.read_text(encoding="utf-8", errors="replace"))
        if found and '"json"' in found.group(1):
            return set(re.findall(r'"([a-z0-9]+)"', found.group(1)))
    pytest.skip(f"no MLflow UI bundle with an artifact text-extension set under {BUNDLE}")


def extension(name: str) -> str:
    """The extension the UI takes: the last part of the name split on `.` and `/`, lower case."""
    return re.split(r"[./]", name)[-1].lower()


def test_the_diff_suffix_is_one_the_installed_ui_previews_and_plain_diff_is_not():
    text = previewed_text_extensions()
    assert {"txt", "json", "yaml"} <= text
    assert "diff" not in text and "patch" not in text  # why the suffix is not plain `.diff`
    for name in (f"candidates/0-accepted{DIFF_SUFFIX}", f"final_prompts{DIFF_SUFFIX}"):
        assert extension(name) in text
