"""Counting tokens: tiktoken where it loads offline, a documented approximation otherwise.

`TiktokenCounter` uses tiktoken's `cl100k_base`, its file cache pointed at litellm's bundled copy
while loading (no network). If that fails, `build_token_counter` falls back to `ApproximateCounter`:
ceil(characters / 4), the usual rule of thumb for English with GPT-style BPEs. Counters are pure and
thread-safe. This module does not decide what to count.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import os
import threading
from functools import cache
from pathlib import Path
from typing import Protocol

logger = logging.getLogger(__name__)

_ENV_LOCK = threading.Lock()


class TokenCounter(Protocol):
    name: str

    def count(self, text: str) -> int: ...


class ApproximateCounter:
    """ceil(len(text) / 4): no tokenizer needed."""

    name = "approx-chars/4"

    def count(self, text: str) -> int:
        return math.ceil(len(text) / 4)


def _bundled_tiktoken_cache() -> str | None:
    """litellm's folder of tiktoken files, found without importing litellm (its import may go online)."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "litellm_core_utils" / "tokenizers"
    return str(folder) if folder.is_dir() else None


@cache
def _encoding(name: str):
    import tiktoken

    with _ENV_LOCK:
        previous = os.environ.get("TIKTOKEN_CACHE_DIR")
        bundled = _bundled_tiktoken_cache()
        if previous is None and bundled is not None:
            os.environ["TIKTOKEN_CACHE_DIR"] = bundled
        try:
            return tiktoken.get_encoding(name)
        finally:
            if previous is None:
                os.environ.pop("TIKTOKEN_CACHE_DIR", None)


class TiktokenCounter:
    def __init__(self, encoding: str = "cl100k_base") -> None:
        self._encoding = _encoding(encoding)
        self.name = f"tiktoken-{encoding}"

    def count(self, text: str) -> int:
        return len(self._encoding.encode(text, disallowed_special=()))


def build_token_counter(kind: str = "tiktoken", encoding: str = "cl100k_base") -> TokenCounter:
    """`tiktoken` (falls back to the approximation, with a warning, if no encoding can be loaded) or `approx`."""
    if kind == "approx":
        return ApproximateCounter()
    if kind != "tiktoken":
        raise ValueError(f"token counter {kind!r}: expected 'tiktoken' or 'approx'")
    try:
        return TiktokenCounter(encoding)
    except Exception as exc:  # no network here: a missing encoding file must not stop a run
        logger.warning("tiktoken encoding %s unavailable (%s); counting tokens as characters/4", encoding, exc)
        return ApproximateCounter()
