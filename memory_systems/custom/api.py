"""The public API for putting your own memory system in the loop (docs/custom_system.md).

Import it as `import memtrace_loop.memory_systems.custom.api as memtrace`. It re-exports, and
defines nothing:

- the contract your `build()` returns an object for (`UserMemorySystem`, a `typing.Protocol`) and its
  records: `LLMStage` (a prompt the loop may rewrite), `Stage` (a step without an LLM and its knobs),
  `Answer`, `Turn`, and `LM` (what your code is handed: `lm.ask(stage, **inputs)`);
- the tracing marks: `op(name, stage=..., kind=...)` (a context manager) and `@traced(stage=...,
  kind=...)` (a decorator; `current_op()` is its handle), with `reads_*` / `writes_*` on the handle;
  `TracingError` for a mark that cannot be recorded.
"""

from __future__ import annotations

from memtrace_loop.memory_systems.custom.contract import LM, Answer, Knob, LLMStage, Stage, Turn, UserMemorySystem
from memtrace_loop.pipeline.core.user_trace import OpHandle, TracingError, current_op, op, traced

__all__ = [
    "LM", "Answer", "Knob", "LLMStage", "OpHandle", "Stage", "TracingError", "Turn", "UserMemorySystem",
    "current_op", "op", "traced",
]
