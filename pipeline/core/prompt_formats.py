"""A memory system's own prompt file formats beside ours: the `PromptFormat` seam, written and read.

A format writes an exported set as its own files and reads its documents (recognized by a top-level
`format` key) back into the stages they hold. `read_prompt_file` is what `prompts=<file>` loads: our layout
or a declared format's document (an unknown `format` is a `PromptFileError`). It names no system and
applies no prompt set.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from memtrace_loop.pipeline.core.prompt_files import (
    ExportedPrompts,
    PromptFileError,
    load_document,
    prompts_from_document,
)
from memtrace_loop.pipeline.core.records import PromptSet

FORMAT_KEY = "format"  # the top-level key naming a document's format (absent from our own layout)


@runtime_checkable
class PromptFormat(Protocol):
    """One system-specific prompt file format (the module docstring)."""

    @property
    def format_id(self) -> str: ...  # the value of the `format` key of its documents

    def write(self, exported: ExportedPrompts) -> Mapping[str, str]:
        """File name -> text of the files holding `exported` in this format ({} when it holds none of it)."""

    def read(self, document: Mapping[str, Any], source: str) -> PromptSet:
        """The stages a parsed document holds; a `PromptFileError` naming `source` and the key it refuses."""


def write_prompt_formats(exported: ExportedPrompts, formats: Sequence[PromptFormat], folder: Path) -> list[Path]:
    """The files of every format in `formats` for `exported`, written into `folder` (created), in order."""
    written: list[Path] = []
    for prompt_format in formats:
        for name, text in prompt_format.write(exported).items():
            path = folder / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(text.encode("utf-8"))
            written.append(path)
    return written


def read_prompt_file(path: str | Path, system: str, formats: Sequence[PromptFormat]) -> ExportedPrompts:
    """What `prompts=<path>` loads for memory system `system` (the module docstring)."""
    path = Path(path)
    document = load_document(path)
    if not isinstance(document, Mapping) or FORMAT_KEY not in document:
        return prompts_from_document(document, path)
    kind = document[FORMAT_KEY]
    chosen = [f for f in formats if f.format_id == kind]
    if not chosen:
        known = ", ".join(repr(f.format_id) for f in formats) or "none besides memtrace's own"
        raise PromptFileError(
            f"prompt file {path}: key {FORMAT_KEY!r}: {kind!r} is not a prompt format of memory system "
            f"{system!r} (its formats: {known})"
        )
    prompts = chosen[0].read(document, str(path))
    return dataclasses.replace(ExportedPrompts.create(system, prompts), origin=str(path))
