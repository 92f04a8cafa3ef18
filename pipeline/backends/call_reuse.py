"""Reusing LM replies within one run: a request already answered in the run is not sent again.

`ReplyStore` is a run-scoped, thread-safe, bounded (least recently used out first) map from a
request's digest (`request_key`: the engine's model and endpoint, the whole lm15 `Request`
with system, messages, tools and config such as temperature, max_tokens and response_format, and
DSPy's `rollout_id` when the caller gave one) to the reply the run's guarded engine returned for it:
checked and secret-masked, so only usable replies are ever stored (a failed or empty call raises
before anything is stored). `get_or_call` makes a missing reply once even when several threads ask
for the same request at the same time (the others wait and reuse it; when the call fails, each of
them tries itself). The async face (`aget_or_call`) reuses a stored reply but does not make
concurrent identical requests wait for each other.

How a reused call is told from a made one, per call and thread-safe: `CallCounter` (the run's
per-role counter, `pipeline.backends.call_count`) opens a slot for the duration of one LM call
(`open_call`, a context variable, so per thread and task), the guarded engine marks it when it
served the call from the store (`mark_reused`), and the counter reads and closes it (`close_call`).
The mark is None outside a counted call (an LM built without a counter: nothing to tell).

This module does not decide which LMs reuse (`lm.<role>.reuse_calls`, `pipeline.backends.registry`),
does not count calls per role and does not log.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Awaitable, Callable
from contextvars import ContextVar, Token
from dataclasses import dataclass, replace
from typing import Any

from dspy.clients.execution import request_to_dict  # lm15's serde, as DSPy's own cache key uses it
from dspy.lm15 import Request, Response
from memtrace_loop.pipeline.core.lru import Lru
from memtrace_loop.pipeline.core.single_flight import KeyedLocks

__all__ = ["CallSlot", "ReplyStore", "ReuseStats", "close_call", "mark_reused", "open_call", "request_key"]

DEFAULT_MAX_ENTRIES = 16_384  # replies kept per run (a few KB each)


@dataclass(frozen=True)
class CallSlot:
    """One counted LM call in progress: the caller's `rollout_id` (part of the key) and whether the
    engine served it from the store."""

    rollout_id: str | None = None
    reused: bool = False


_CALL: ContextVar[CallSlot | None] = ContextVar("memtrace_lm_call", default=None)


def open_call(rollout_id: Any = None) -> Token[CallSlot | None]:
    """Open the slot of one LM call (the counter, when the call starts); give its token to `close_call`."""
    return _CALL.set(CallSlot(None if rollout_id is None else str(rollout_id)))


def current_call() -> CallSlot | None:
    """The slot of the LM call in progress in this context (None: not a counted call)."""
    return _CALL.get()


def mark_reused() -> None:
    """Note that the call in progress was served from the store (nothing to note outside a counted call)."""
    slot = _CALL.get()
    if slot is not None:
        _CALL.set(replace(slot, reused=True))


def close_call(token: Token[CallSlot | None]) -> bool:
    """Close the slot opened with `token`: whether the call was reused."""
    slot = _CALL.get()
    _CALL.reset(token)
    return slot is not None and slot.reused


def request_key(model: str, endpoint: str, request: Request, rollout_id: str | None = None) -> str:
    """The digest of everything that determines a reply: the engine's model, its endpoint, the whole
    request and the caller's rollout id."""
    record = {"model": model, "endpoint": endpoint, "request": request_to_dict(request), "rollout_id": rollout_id}
    text = json.dumps(record, sort_keys=True, ensure_ascii=False, default=repr)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class ReuseStats:
    """Requests served from the store (`hits`), replies stored (`stored`), replies kept now (`entries`)."""

    hits: int
    stored: int
    entries: int


class ReplyStore:
    """The run's replies by request key, at most `max_entries` (least recently used dropped first)."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        if max_entries < 1:
            raise ValueError(f"ReplyStore: max_entries must be at least 1, got {max_entries}")
        self._replies = Lru[Response](max_entries)
        self._lock = threading.Lock()
        self._flights = KeyedLocks()
        self._hits = 0
        self._stored = 0

    def __copy__(self) -> ReplyStore:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> ReplyStore:
        return self  # per run: a copied engine or LM reuses into the same store

    def snapshot(self) -> ReplyStore:
        """A new store holding the replies stored so far (for a benchmark that measures several
        alternatives each from the same start); its counts start at zero."""
        copied = ReplyStore(self._replies.max_entries)
        with self._lock:
            copied._replies = self._replies.copy()
        return copied

    def get(self, key: str) -> Response | None:
        """The stored reply for `key` (counted as a hit), or None."""
        with self._lock:
            found = self._replies.get(key)
            self._hits += found is not None
            return found

    def put(self, key: str, reply: Response) -> None:
        with self._lock:
            self._replies.put(key, reply)
            self._stored += 1

    def get_or_call(self, key: str, call: Callable[[], Response]) -> tuple[Response, bool]:
        """(the reply for `key`, reused?): `call()` runs at most once per key at a time; a thread asking
        while another makes the same call waits and reuses its reply (or, when it failed, calls itself)."""
        with self._flights.hold(key, forget=True):
            found = self.get(key)
            if found is not None:
                return found, True
            reply = call()
            self.put(key, reply)
            return reply, False

    async def aget_or_call(self, key: str, call: Callable[[], Awaitable[Response]]) -> tuple[Response, bool]:
        """`get_or_call` for the async face, without making concurrent identical calls wait."""
        found = self.get(key)
        if found is not None:
            return found, True
        reply = await call()
        self.put(key, reply)
        return reply, False

    def stats(self) -> ReuseStats:
        with self._lock:
            return ReuseStats(self._hits, self._stored, len(self._replies))
