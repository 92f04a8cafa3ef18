"""Watching an unmodified `mem0.Memory` work: the raw events of one `add()`, without editing mem0.

`AddRecorder.install` wraps instance attributes (embedder, vector store, history db); while `recording()`,
every call is an event, and a handler on the `mem0` logger adds its silent decisions (told apart by thread
ident: mem0's pool does not copy contexts). It writes no graph and builds no `Memory`.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

MEM0_LOGGER = "mem0"


@dataclass(frozen=True)
class LMCall:
    """One call of mem0's `llm.generate_response`: the stage it served, the exact messages, the reply
    mem0 got ("" when the call failed: `error`)."""

    stage: str
    messages: tuple[Mapping[str, str], ...]
    reply: str
    error: str | None = None


@dataclass(frozen=True)
class EmbedCall:
    text: str
    action: str | None


@dataclass(frozen=True)
class SearchCall:
    """A similarity search of the vector store: its query text, limit, and hits (mem0 id, score, text)."""

    query: str
    limit: int
    hits: tuple[tuple[str, float, str], ...]


@dataclass(frozen=True)
class StoreCall:
    """A write to the vector store: `op` insert / update / delete of the point `mem0_id` (`text`: the
    payload's `data`; `vector`: whether the embedding changed, i.e. the content did)."""

    op: str
    mem0_id: str
    text: str | None
    vector: bool = True


@dataclass(frozen=True)
class HistoryRow:
    """A row mem0 wrote to its history table (every ADD / UPDATE / DELETE with old and new text)."""

    mem0_id: str
    old: str | None
    new: str | None
    event: str


@dataclass(frozen=True)
class LogLine:
    """A warning or error mem0 logged during the add (its silent decisions)."""

    level: str
    message: str


Event = LMCall | EmbedCall | SearchCall | StoreCall | HistoryRow | LogLine


class _LogHandler(logging.Handler):
    """Forwards the `mem0` log records of the threads working for one recorder's add."""

    def __init__(self, recorder: AddRecorder) -> None:
        super().__init__(logging.WARNING)
        self._recorder = recorder

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread is not None and self._recorder.owns_thread(record.thread):
            self._recorder.note(LogLine(record.levelname, record.getMessage()))


class AddRecorder:
    """The event record of the `add()` under way on one `Memory` (None outside `recording()`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: list[Event] | None = None
        self._threads: set[int] = set()

    # ------------------------------------------------------------------ the record

    @contextmanager
    def recording(self) -> Iterator[list[Event]]:
        """Collect the events of one add into the yielded list (complete when the block ends)."""
        events: list[Event] = []
        handler = _LogHandler(self)
        with self._lock:
            self._events, self._threads = events, {threading.get_ident()}
        logger = logging.getLogger(MEM0_LOGGER)
        logger.addHandler(handler)
        try:
            yield events
        finally:
            logger.removeHandler(handler)
            with self._lock:
                self._events, self._threads = None, set()

    def note(self, event: Event) -> None:
        """Append an event to the current record (dropped outside `recording()`); the calling thread
        now works for this add."""
        with self._lock:
            if self._events is not None:
                self._threads.add(threading.get_ident())
                self._events.append(event)

    def enter(self) -> None:
        """The calling thread works for the add under way (its log records belong to it)."""
        with self._lock:
            if self._events is not None:
                self._threads.add(threading.get_ident())

    def owns_thread(self, ident: int) -> bool:
        with self._lock:
            return ident in self._threads

    # ------------------------------------------------------------------ the wrappers

    def install(self, memory: Any) -> None:
        """Wrap the instance methods of `memory`'s embedder, vector store and history db (again after
        `memory.reset()`, which replaces the store and the db)."""
        self._wrap(memory.embedding_model, "embed", self._on_embed)
        store = memory.vector_store
        self._wrap(store, "search", self._on_search)
        self._wrap(store, "insert", self._on_insert)
        self._wrap(store, "update", self._on_update)
        self._wrap(store, "delete", self._on_delete)
        self._wrap(store, "get", None)
        self._wrap(store, "list", None)
        self._wrap(memory.db, "add_history", self._on_history)
        if hasattr(memory.db, "batch_add_history"):
            self._wrap(memory.db, "batch_add_history", self._on_batch_history)

    def _wrap(self, owner: Any, name: str, observe: Callable[[Mapping[str, Any], Any], None] | None) -> None:
        original = getattr(owner, name)
        signature = inspect.signature(original)

        @functools.wraps(original)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            self.enter()
            result = original(*args, **kwargs)
            if observe is not None:
                bound = signature.bind(*args, **kwargs)
                bound.apply_defaults()
                observe(bound.arguments, result)
            return result

        setattr(owner, name, wrapped)

    def _on_embed(self, args: Mapping[str, Any], result: Any) -> None:
        self.note(EmbedCall(str(args.get("text", "")), args.get("memory_action")))

    def _on_search(self, args: Mapping[str, Any], result: Any) -> None:
        hits = tuple(
            (str(hit.id), float(hit.score or 0.0), str((hit.payload or {}).get("data", ""))) for hit in result or ()
        )
        self.note(SearchCall(str(args.get("query", "")), int(args.get("limit") or 0), hits))

    def _on_insert(self, args: Mapping[str, Any], result: Any) -> None:
        ids = list(args.get("ids") or [])
        payloads = list(args.get("payloads") or [{}] * len(ids))
        for mem0_id, payload in zip(ids, payloads, strict=False):
            self.note(StoreCall("insert", str(mem0_id), (payload or {}).get("data")))

    def _on_update(self, args: Mapping[str, Any], result: Any) -> None:
        payload = args.get("payload") or {}
        self.note(StoreCall("update", str(args.get("vector_id")), payload.get("data"), args.get("vector") is not None))

    def _on_delete(self, args: Mapping[str, Any], result: Any) -> None:
        self.note(StoreCall("delete", str(args.get("vector_id")), None))

    def _on_history(self, args: Mapping[str, Any], result: Any) -> None:
        self.note(HistoryRow(
            str(args.get("memory_id")), args.get("old_memory"), args.get("new_memory"), str(args.get("event"))
        ))

    def _on_batch_history(self, args: Mapping[str, Any], result: Any) -> None:
        for row in next(iter(args.values()), None) or ():
            if isinstance(row, Mapping):
                self.note(HistoryRow(
                    str(row.get("memory_id")), row.get("old_memory"), row.get("new_memory"), str(row.get("event"))
                ))
