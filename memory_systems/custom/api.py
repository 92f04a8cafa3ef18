"""The public API for putting your own memory system in the loop (docs/custom_system.md).

`import memtrace_loop.memory_systems.custom.api as memtrace`: the contract and its records, and the tracing
marks (`op`, `traced`, `current_op`, `TracingError`). Re-exports only.
"""

from __future__ import annotations

from memtrace_loop.memory_systems.custom.contract import LM, Answer, Knob, LLMStage, Stage, Turn, UserMemorySystem
from memtrace_loop.pipeline.core.user_trace import OpHandle, TracingError, current_op, op, traced

__all__ = [
    "LM", "Answer", "Knob", "LLMStage", "OpHandle", "Stage", "TracingError", "Turn", "UserMemorySystem",
    "current_op", "op", "traced",
]
