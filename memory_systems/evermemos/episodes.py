"""The EverMemOS-style system's stored episodes and events, and how they are read back from a graph.

`StoredEpisode.document` / `block`; `stored_episode(graph, var)` rebuilds one as construction wrote it.
"""

from __future__ import annotations

from dataclasses import dataclass

from memtrace_loop.memory_systems.evermemos.signatures import episode_document, render_episode_block
from memtrace_loop.pipeline.core.conventions import name_of
from memtrace_loop.pipeline.core.graph import ExecutionGraph, Variable


@dataclass(frozen=True)
class StoredEvent:
    number: int
    text: str
    time: str  # a human date ("8 May 2023")
    var: str


@dataclass(frozen=True)
class StoredEpisode:
    number: int
    title: str
    narrative: str
    date: str  # the human date of the episode's first turn
    turn_ids: tuple[str, ...]
    events: tuple[StoredEvent, ...]
    var: str

    def document(self) -> str:
        return episode_document(self.title, self.narrative, (e.text for e in self.events))

    def unit_vars(self) -> tuple[str, ...]:
        return (self.var, *(e.var for e in self.events))

    def block(self) -> str:
        return render_episode_block(self.title, self.date, self.narrative, ((e.text, e.time) for e in self.events))




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
