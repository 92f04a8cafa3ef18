"""The DSPy signatures of the Mem0-style stages and the shared answer stage, and their text rendering.

Each signature's docstring is the stage's default prompt; the predictor's attribute path is its name.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

import dspy
import pydantic


def human_date(iso_time: str) -> str:
    """'2023-05-08T13:56' -> '8 May 2023' (the input is returned unchanged if it is not ISO)."""
    try:
        moment = datetime.fromisoformat(iso_time)
    except ValueError:
        return iso_time
    return f"{moment.day} {moment:%B %Y}"


def render_turn(speaker: str, iso_time: str, text: str) -> str:
    """The text a construction stage sees for one turn: `[8 May 2023] Alice: text`."""
    return f"[{human_date(iso_time)}] {speaker}: {text}"


def render_memory_line(memory_id: str, text: str) -> str:
    return f"[{memory_id}] {text}"


def render_context_line(text: str, iso_time: str) -> str:
    """One retrieved memory as the answer stage sees it (the reference's 'Memory: ... Time: ...')."""
    return f"Memory: {text} Time: {human_date(iso_time)}"


class ExtractFacts(dspy.Signature):
    """Extract the facts worth remembering from one turn of a conversation between two people.
    Write each fact as a short, self-contained sentence that names the speaker as its subject.
    Skip greetings and small talk."""

    turn: str = dspy.InputField(desc="one turn as `[session date] Speaker: text`")
    facts: list[str] = dspy.OutputField(desc="atomic facts, one sentence each; an empty list if none")


class MemoryAction(pydantic.BaseModel):
    """One decision of the update stage about one fact or memory."""

    event: Literal["ADD", "UPDATE", "DELETE", "NONE"]
    id: str | None = pydantic.Field(default=None, description="existing memory id for UPDATE/DELETE/NONE")
    text: str = pydantic.Field(default="", description="the memory text to store for ADD/UPDATE")


class DecideUpdates(dspy.Signature):
    """You maintain a memory store about a conversation. Compare each new fact with the existing
    memories and decide what to do: ADD a fact that is new, mark it NONE if it is already known,
    UPDATE an existing memory when the new fact adds detail to it, or DELETE a memory that no longer
    holds. Return one action per decision; UPDATE, DELETE and NONE must give the memory id."""

    existing_memories: str = dspy.InputField(desc="similar existing memories, one per line as `[id] text`")
    new_facts: list[str] = dspy.InputField(desc="facts just extracted from the latest turn")
    actions: list[MemoryAction] = dspy.OutputField(desc="the actions to apply to the memory store")


class AnswerQuestion(dspy.Signature):
    """Answer the question about the conversation using only the memories given.
    Answer with a short phrase, not a full sentence."""

    context: str = dspy.InputField(desc="retrieved memories, one per line, each with its time")
    question: str = dspy.InputField()
    answer: str = dspy.OutputField(desc="a short answer")
