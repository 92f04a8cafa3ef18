"""Counting LM calls per role (made, cached, reused, failed, tokens), and reusing replies within a run.

`CallLedger.counted(lms)` returns copies of the LMs (sharing engine and client), each with its role's
`CallCounter` as an instance callback, so every call through `BaseLM.__call__` / `acall` is counted
wherever it comes from (runner, attributor, rewriter, dspy.GEPA). DSPy calls `settings.usage_tracker.
add_usage` exactly for calls NOT served by its response cache: the counter puts a probe in that slot for
one call, which records the usage and forwards it. A call is **made** when it reached the backend (usage
seen, or it raised: also `failed`), else **cached**; a retried call counts once; tokens are those of made
calls.

`ReplyStore` is the run's replies by request digest (`request_key`: model, endpoint, the whole lm15
`Request`, the caller's `rollout_id`), least recently used out first; the guarded engine answers a
request already answered in the run from it, making a missing reply once even when threads ask at the
same time (a failed call stores nothing). Such a call is **reused**: neither made nor cached, no tokens.
The counter opens a slot per call (`open_call`, a context variable), the engine marks it
(`mark_reused`), the counter closes it (`close_call`). A repeat that DSPy's cache served before the store
was asked counts as reused too (`_SeenRequests`), so the budget does not depend on whether the cache is
on. `tally()` is an immutable `CallTally`. It does not decide budgets or log.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar, Token
from dataclasses import asdict, dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any

import dspy
from dspy.clients.execution import request_to_dict  # lm15's serde, as DSPy's own cache key uses it
from dspy.lm15 import Request, Response
from dspy.utils.callback import BaseCallback
from memtrace_loop.pipeline.backends.lm import ROLES, LMSet, Shared
from memtrace_loop.pipeline.core.lru import Lru
from memtrace_loop.pipeline.core.single_flight import KeyedLocks

__all__ = [
    "BUDGET_ROLES", "CallCounter", "CallLedger", "CallSlot", "CallTally", "ReplyStore", "ReuseStats", "RoleCalls",
    "close_call", "mark_reused", "open_call", "request_key",
]

# The roles whose calls an optimization budget counts: the memory system (task), the optimizer's
# rewriter and the attributor. The judge is the measuring instrument (a rule-based metric would make
# no call at all), so its calls are reported but never counted against a budget.
BUDGET_ROLES: tuple[str, ...] = ("task", "rewriter", "attributor")


@dataclass(frozen=True)
class RoleCalls:
    """One role's calls: `made` reached the backend (`failed` of them raised), `cached` came from DSPy's
    response cache, `reused` from the run's store of replies; tokens are those of made calls."""

    made: int = 0
    cached: int = 0
    failed: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reused: int = 0

    def __add__(self, other: RoleCalls) -> RoleCalls:
        return RoleCalls(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    def __sub__(self, other: RoleCalls) -> RoleCalls:
        return RoleCalls(**{f.name: getattr(self, f.name) - getattr(other, f.name) for f in fields(self)})

    @property
    def reuse_share(self) -> float:
        """The share of calls reuse saved: reused / (made + reused); 0.0 when there were none."""
        asked = self.made + self.reused
        return self.reused / asked if asked else 0.0


@dataclass(frozen=True)
class CallTally:
    """Calls per role (a snapshot, or the difference of two). Roles not present count 0."""

    by_role: Mapping[str, RoleCalls] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_role", MappingProxyType(dict(self.by_role)))

    def role(self, role: str) -> RoleCalls:
        return self.by_role.get(role, RoleCalls())

    def total(self, roles: Iterable[str] | None = None) -> RoleCalls:
        """The sum over `roles` (all roles when None)."""
        out = RoleCalls()
        for role in self.by_role if roles is None else roles:
            out = out + self.role(role)
        return out

    def made(self, roles: Iterable[str] | None = None) -> int:
        return self.total(roles).made

    def cached(self, roles: Iterable[str] | None = None) -> int:
        return self.total(roles).cached

    def reused(self, roles: Iterable[str] | None = None) -> int:
        return self.total(roles).reused

    def __sub__(self, other: CallTally) -> CallTally:
        roles = dict.fromkeys([*self.by_role, *other.by_role])
        return CallTally({role: self.role(role) - other.role(role) for role in roles})

    def __add__(self, other: CallTally) -> CallTally:
        roles = dict.fromkeys([*self.by_role, *other.by_role])
        return CallTally({role: self.role(role) + other.role(role) for role in roles})

    @classmethod
    def from_dict(cls, data: Mapping[str, Mapping[str, int]]) -> CallTally:
        """The inverse of `to_dict` (a checkpoint's; one written before `reused` existed loads it as 0)."""
        return cls({role: RoleCalls(**{k: int(v) for k, v in counts.items()}) for role, counts in data.items()})

    def to_dict(self) -> dict[str, dict[str, int]]:
        return {role: asdict(calls) for role, calls in self.by_role.items()}


DEFAULT_MAX_ENTRIES = 16_384  # replies kept per run (a few KB each)


@dataclass(frozen=True)
class CallSlot:
    """One counted LM call in progress: the caller's `rollout_id` and whether the store served it."""

    rollout_id: str | None = None
    reused: bool = False


_CALL: ContextVar[CallSlot | None] = ContextVar("memtrace_lm_call", default=None)


def open_call(rollout_id: Any = None) -> Token[CallSlot | None]:
    """Open the slot of one LM call; give its token to `close_call`."""
    return _CALL.set(CallSlot(None if rollout_id is None else str(rollout_id)))


def current_call() -> CallSlot | None:
    """The slot of the LM call in progress in this context (None: not a counted call)."""
    return _CALL.get()


def mark_reused() -> None:
    """Note that the call in progress was served from the store (no-op outside a counted call)."""
    slot = _CALL.get()
    if slot is not None:
        _CALL.set(replace(slot, reused=True))


def close_call(token: Token[CallSlot | None]) -> bool:
    """Close the slot opened with `token`: whether the call was reused."""
    slot = _CALL.get()
    _CALL.reset(token)
    return slot is not None and slot.reused


def request_key(model: str, endpoint: str, request: Request, rollout_id: str | None = None) -> str:
    """The digest of everything that determines a reply: model, endpoint, request and rollout id."""
    record = {"model": model, "endpoint": endpoint, "request": request_to_dict(request), "rollout_id": rollout_id}
    text = json.dumps(record, sort_keys=True, ensure_ascii=False, default=repr)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class ReuseStats:
    """Requests served from the store (`hits`), replies stored (`stored`), replies kept now (`entries`)."""

    hits: int
    stored: int
    entries: int


class ReplyStore(Shared):
    """The run's replies by request key, at most `max_entries` (least recently used dropped first)."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        if max_entries < 1:
            raise ValueError(f"ReplyStore: max_entries must be at least 1, got {max_entries}")
        self._replies = Lru[Response](max_entries)
        self._lock = threading.Lock()
        self._flights = KeyedLocks()
        self._hits = 0
        self._stored = 0

    def snapshot(self) -> ReplyStore:
        """A new store holding the replies stored so far; its counts start at zero."""
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
        meanwhile waits and reuses its reply (or, when it failed, calls itself)."""
        with self._flights.hold(key, forget=True):
            found = self.get(key)
            if found is not None:
                return found, True
            reply = call()
            self.put(key, reply)
            return reply, False

    def stats(self) -> ReuseStats:
        with self._lock:
            return ReuseStats(self._hits, self._stored, len(self._replies))


class _UsageProbe:
    """Stands in `dspy.settings.usage_tracker` during one LM call: notes that DSPy billed it (it does so
    only for calls its cache did not serve) and forwards to the tracker it replaced."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.billed = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0

    def add_usage(self, lm: str, usage: Mapping[str, Any] | None) -> None:
        slot = current_call()
        if slot is not None and slot.reused:
            return  # a reply reused from the run's store: not billed, not made
        self.billed += 1
        usage = usage or {}
        self.prompt_tokens += int(usage.get("prompt_tokens") or 0)
        self.completion_tokens += int(usage.get("completion_tokens") or 0)
        if self.inner is not None:
            self.inner.add_usage(lm, usage)


class _SeenRequests:
    """The requests a run's reusing LMs were asked (digests of model and inputs), so a repeat DSPy's cache
    serves counts as reused, as with the cache off. Bounded like the `ReplyStore`: a request it forgot
    counts as cached, as the store, having dropped its reply, would make it again.

    >>> seen = _SeenRequests(max_entries=2)
    >>> [seen.seen_before(k) for k in ("a", "b", "a", "c", "a", "b")]  # "c" pushes out "b", asked least recently
    [False, False, True, False, True, False]
    """

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self._lock = threading.Lock()
        self._keys = Lru[bool](max_entries)

    def seen_before(self, key: str) -> bool:
        """Whether `key` was asked before (and note it as asked, most recently)."""
        with self._lock:
            known = key in self._keys
            self._keys.put(key, True)
            return known


def _reuses(instance: Any) -> bool:
    """Whether the LM's guarded engine answers repeats from the run's reply store."""
    settings = getattr(getattr(instance, "engine", None), "settings", None)
    return getattr(settings, "replies", None) is not None


def _request_digest(instance: Any, inputs: Mapping[str, Any]) -> str:
    kwargs = {k: v for k, v in dict(inputs.get("kwargs") or {}).items() if k != "callbacks"}
    record = {"model": getattr(instance, "model", ""), "prompt": inputs.get("prompt"),
              "messages": inputs.get("messages"), "kwargs": kwargs}
    text = json.dumps(record, sort_keys=True, ensure_ascii=False, default=repr)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class CallCounter(Shared, BaseCallback):
    """A DSPy callback counting one role's LM calls (an instance callback of its LM). Thread-safe; shared,
    never copied, by copies of the LM."""

    def __init__(self, role: str, seen: _SeenRequests | None = None) -> None:
        self.role = role
        self._lock = threading.Lock()
        # call id -> (probe, settings context, slot, request digest of a reusing LM or None)
        self._open: dict[str, tuple[_UsageProbe, Any, Any, str | None]] = {}
        self._counts = RoleCalls()
        self._seen = seen if seen is not None else _SeenRequests()

    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        probe = _UsageProbe(dspy.settings.get("usage_tracker"))
        context = dspy.settings.context(usage_tracker=probe)
        context.__enter__()  # left in on_lm_end: DSPy runs both in the same frame (same context)
        slot = open_call(dict(inputs.get("kwargs") or {}).get("rollout_id"))
        digest = _request_digest(instance, inputs) if _reuses(instance) else None
        with self._lock:
            self._open[call_id] = (probe, context, slot, digest)

    def on_lm_end(self, call_id: str, outputs: Any, exception: BaseException | None = None) -> None:
        with self._lock:
            opened = self._open.pop(call_id, None)
        if opened is None:
            return
        probe, context, slot, digest = opened
        reused = close_call(slot)
        context.__exit__(None, None, None)
        made = not reused and (probe.billed > 0 or exception is not None)
        if digest is not None and exception is None:
            repeat = self._seen.seen_before(digest)  # notes it too
            reused = reused or (repeat and not made)  # a repeat DSPy's cache served: reused, as with it off
        counted = RoleCalls(
            made=int(made), cached=int(not made and not reused), failed=int(exception is not None),
            prompt_tokens=probe.prompt_tokens, completion_tokens=probe.completion_tokens, reused=int(reused),
        )
        with self._lock:
            self._counts = self._counts + counted

    def snapshot(self) -> RoleCalls:
        with self._lock:
            return self._counts


class CallLedger:
    """One `CallCounter` per role; `counted` hands out LMs that count into them, `tally` reads them."""

    def __init__(self, roles: Iterable[str] = ROLES) -> None:
        seen = _SeenRequests()  # shared by the roles: an identical request of another role is a repeat too
        self._counter_by_role = {role: CallCounter(role, seen) for role in roles}

    def counter(self, role: str) -> CallCounter:
        if role not in self._counter_by_role:
            raise KeyError(f"no counter for role {role!r} (roles: {list(self._counter_by_role)})")
        return self._counter_by_role[role]

    def count(self, role: str, lm: dspy.BaseLM) -> dspy.BaseLM:
        """A copy of `lm` whose calls count as `role`'s (`lm` itself is left as it was)."""
        counted = lm.copy()
        counted.callbacks = [c for c in counted.callbacks if not isinstance(c, CallCounter)]
        counted.callbacks.append(self.counter(role))
        return counted

    def counted(self, lms: LMSet) -> LMSet:
        """The four roles' LMs, each a counting copy (also when one LM object serves several roles)."""
        return LMSet(**{role: self.count(role, lm) for role, lm in lms.by_role().items()})

    def tally(self) -> CallTally:
        return CallTally({role: counter.snapshot() for role, counter in self._counter_by_role.items()})
