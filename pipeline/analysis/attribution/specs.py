"""The attributor registry's entries: each option's `AttributorSpec` (its settings record and builder).

`LINEAGE` and `LLM` (the lines of `attribution.registry`) name their settings record
(`attribution.settings`) and a builder that imports its attributor when called, so listing the
attributors and validating their settings (the config tree does, at every start) imports no DSPy.
It builds nothing at import and knows no attribution method beyond its name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memtrace_loop.pipeline.analysis.attribution.protocol import AttributorSpec
from memtrace_loop.pipeline.analysis.attribution.settings import LineageSettings, LLMSettings

if TYPE_CHECKING:
    from memtrace_loop.pipeline.analysis.attribution.protocol import Attributor
    from memtrace_loop.pipeline.backends.embeddings import Embedder
    from memtrace_loop.pipeline.backends.lm import LMSet

__all__ = ["LINEAGE", "LLM"]


def _lineage(settings: LineageSettings, lms: LMSet | None, embedder: Embedder | None) -> Attributor:
    from memtrace_loop.pipeline.analysis.attribution.lineage import build

    return build(settings, lms, embedder)


def _llm(settings: LLMSettings, lms: LMSet | None, embedder: Embedder | None) -> Attributor:
    from memtrace_loop.pipeline.analysis.attribution.llm import build  # DSPy: when the walk is built

    return build(settings, lms, embedder)


LINEAGE = AttributorSpec(LineageSettings, _lineage)
LLM = AttributorSpec(LLMSettings, _llm)
