"""The DSPy signatures of the EverMemOS-style stages, its stored episodes and events and their text.

Each signature's docstring is the stage's default prompt; `StoredEpisode.document` / `block` render an
episode, `stored_episode(graph, var)` rebuilds one as construction wrote it. No logic beyond that.
"""

from __future__ import annotations

from dataclasses import dataclass

import dspy
import pydantic
from memtrace_loop.pipeline.core.conventions import name_of
from memtrace_loop.pipeline.core.graph import ExecutionGraph, Variable


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


@dataclass(frozen=True)
class StoredEvent:
    number: int
    text: str
    time: str  # a human date ("8 May 2023")
    var: str


@dataclass(frozen=True)
class StoredEpisode:
    """One stored episode: `document` is the text it is searched by (title, narrative, its events' text),
    `block` how the answer stage sees it."""

    number: int
    title: str
    narrative: str
    date: str  # the human date of the episode's first turn
    turn_ids: tuple[str, ...]
    events: tuple[StoredEvent, ...]
    var: str

    def document(self) -> str:
        parts = (self.title.strip(), self.narrative.strip(), *(e.text for e in self.events))
        return "\n".join(part for part in parts if part)

    def unit_vars(self) -> tuple[str, ...]:
        return (self.var, *(e.var for e in self.events))

    def block(self) -> str:
        lines = [f"Episode: {self.title.strip() or '(untitled)'} ({self.date})"]
        if self.narrative.strip():
            lines.append(f"Narrative: {' '.join(self.narrative.split())}")
        lines.extend(f"Memory: {' '.join(e.text.split())} Time: {e.time}" for e in self.events)
        return "\n".join(lines)


def _number(var_id: str) -> int:
    return int(name_of(var_id).split(":", 1)[1])


def stored_episode(graph: ExecutionGraph, var: Variable) -> StoredEpisode:
    """One episode as construction stored it, read back from its episode variable and its event variables."""
    events = []
    for event_var in var.meta.get("events", ()):
        event = graph.variable(event_var)
        time = str(event.meta.get("time", ""))
        text = event.value.removesuffix(f" Time: {time}") if time else event.value
        events.append(StoredEvent(_number(event_var), text, time, event_var))
    title = str(var.meta.get("title", var.value.split("\n", 1)[0]))
    narrative = var.value.removeprefix(title).strip() if title else var.value
    return StoredEpisode(
        _number(var.id), title, narrative, str(var.meta.get("date", "")),
        tuple(var.meta.get("turns", ())), tuple(events), var.id,
    )
