"""The DSPy signatures of the EverMemOS-style stages and how events and episodes are rendered as text.

Each signature's docstring is the stage's default prompt. No logic beyond the rendering.
"""

from __future__ import annotations

from collections.abc import Iterable

import dspy
import pydantic


class EpisodeEvent(pydantic.BaseModel):
    """One entry of an episode's event log: an atomic fact and the date it refers to."""

    text: str = pydantic.Field(description="one self-contained sentence naming its subject")
    time: str = pydantic.Field(default="", description="the date the fact refers to, e.g. 8 May 2023")


class DetectBoundary(dspy.Signature):
    """You split a conversation into episodes. Given the turns of the episode that is still open and
    the next turn, decide whether the next turn starts a new episode: a new topic, or a new session
    after a gap in time. Turns about the same topic belong together."""

    open_episode: str = dspy.InputField(desc="the turns of the open episode, one per line as `[date] Speaker: text`")
    new_turn: str = dspy.InputField(desc="the next turn as `[date] Speaker: text`")
    starts_new_episode: bool = dspy.OutputField(desc="true if the next turn starts a new episode")


class WriteEvents(dspy.Signature):
    """Write the event log of one episode of a conversation between two people: one event per atomic
    fact, each a short self-contained sentence that names its subject, with the date it refers to.
    Skip greetings and small talk."""

    turns: str = dspy.InputField(desc="the episode's turns, one per line as `[date] Speaker: text`")
    events: list[EpisodeEvent] = dspy.OutputField(desc="the events; an empty list if nothing happened")


class WriteEpisode(dspy.Signature):
    """Summarize one episode of a conversation between two people: give it a short title and write a
    narrative in the third person of what the speakers said, stating the date of the episode."""

    turns: str = dspy.InputField(desc="the episode's turns, one per line as `[date] Speaker: text`")
    title: str = dspy.OutputField(desc="a short title")
    narrative: str = dspy.OutputField(desc="a few sentences in the third person")


class CheckSufficiency(dspy.Signature):
    """Decide whether the retrieved episodes hold enough information to answer the question."""

    question: str = dspy.InputField()
    retrieved_episodes: str = dspy.InputField(desc="the episodes found so far, with their events and dates")
    sufficient: bool = dspy.OutputField(desc="true if the question can be answered from these episodes")


class ExpandQueries(dspy.Signature):
    """The retrieved episodes were not enough to answer the question. Write a few short search
    queries that could find the missing information in the conversation's memory."""

    question: str = dspy.InputField()
    retrieved_episodes: str = dspy.InputField(desc="the episodes found so far, with their events and dates")
    queries: list[str] = dspy.OutputField(desc="up to three short search queries")


# ---------------------------------------------------------------------------------------------- text


def event_value(text: str, time: str) -> str:
    """An event variable's value: the fact and its date (both are what the event carries)."""
    return f"{text} Time: {time}" if time else text


def episode_value(title: str, narrative: str) -> str:
    """An episode variable's value: what `write_episode` produced (empty when it produced nothing)."""
    return "\n".join(part for part in (title.strip(), narrative.strip()) if part)


def episode_document(title: str, narrative: str, event_texts: Iterable[str]) -> str:
    """The text an episode is searched by: title, narrative and the text of its events."""
    return "\n".join(part for part in (title.strip(), narrative.strip(), *event_texts) if part)


def render_episode_block(title: str, date: str, narrative: str, events: Iterable[tuple[str, str]]) -> str:
    """One episode as the answer stage sees it."""
    lines = [f"Episode: {title.strip() or '(untitled)'} ({date})"]
    if narrative.strip():
        lines.append(f"Narrative: {' '.join(narrative.split())}")
    lines.extend(f"Memory: {' '.join(text.split())} Time: {time}" for text, time in events)
    return "\n".join(lines)
