"""Loading an exported prompt file back into a memory system: `apply_prompts`.

`apply_prompts` returns a copy of a memory system using the exported instructions and knobs
(`pipeline.core.prompt_files.ExportedPrompts`). It refuses a file made for another system or naming
stages or knobs the system lacks (`PromptFileError`); stages and knobs the file omits keep their current
values. The given system object is never modified.

It does not read or write prompt files (`pipeline.core.prompt_files`) or talk to MLflow.
"""

from __future__ import annotations

from memtrace_loop.memory_systems.base import KnobError, MemorySystem, PromptSetError
from memtrace_loop.pipeline.core.prompt_files import ExportedPrompts, PromptFileError

__all__ = ["apply_prompts"]


def apply_prompts(system: MemorySystem, exported: ExportedPrompts) -> MemorySystem:
    """A copy of `system` whose stages use the exported instructions (omitted stages keep theirs) and
    whose knobs take the exported values (omitted knobs keep theirs).

    Raises `PromptFileError` when the export belongs to another memory system, names stages or knobs the
    system lacks, or gives a knob a value it rejects; `system` itself is never modified.
    """
    if exported.system != system.name:
        raise PromptFileError(
            f"{exported.description} is for memory system {exported.system!r}, this run uses {system.name!r}"
        )
    known = set(system.stage_names())
    unknown = sorted(set(exported.prompts.stages()) - known)
    if unknown:
        raise PromptFileError(
            f"{exported.description} names stages {unknown} that memory system {system.name!r} does not have "
            f"(its stages: {sorted(known)})"
        )
    try:
        return system.with_knobs(exported.knobs).with_prompts(exported.prompts)
    except (PromptSetError, KnobError) as error:
        raise PromptFileError(f"{exported.description}: {error}") from error
