"""The DSPy signatures of `memory_system=mem0ai`'s two mem0 stages (`fact_extraction`, `update_memory`).

Their instructions are mem0's hook texts; they say what each stage reads and returns (mem0's JSON shapes),
but mem0 builds its own messages around them (`bridge`, `recall`). No logic here.
"""

from __future__ import annotations

from typing import Literal

import dspy
import pydantic


class Mem0Action(pydantic.BaseModel):
    """One entry of mem0's update reply `{"memory": [...]}`: `id` is "0", "1", ... (the memories shown)."""

    id: str = ""
    text: str = ""
    event: Literal["ADD", "UPDATE", "DELETE", "NONE"] = "NONE"
    old_memory: str | None = None


class FactExtraction(dspy.Signature):
    """mem0's fact extraction prompt (replaced at build by the installed library's default)."""

    conversation: str = dspy.InputField(desc="mem0's user message: `Input:\\nuser: <Speaker>: <text>`")
    session_date: str = dspy.InputField(desc="the turn's session date (YYYY-MM-DD), for the `Today's date` line")
    facts: list[str] = dspy.OutputField(desc='the facts, replied as the JSON object {"facts": [...]}')


class UpdateMemory(dspy.Signature):
    """mem0's update memory prompt (replaced at build by the installed library's default)."""

    existing_memories: str = dspy.InputField(desc="the similar memories mem0 found, with ids 0, 1, ...")
    new_facts: list[str] = dspy.InputField(desc="the facts just extracted")
    actions: list[Mem0Action] = dspy.OutputField(desc='replied as the JSON object {"memory": [...]}')
