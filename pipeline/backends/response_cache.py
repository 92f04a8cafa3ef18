"""DSPy's response cache (disk + memory) that serves and stores only usable replies: `ReplyCache`.

The guarded engine never returns an empty or malformed reply, so DSPy never writes one; but a cache
directory written by an older version (or another tool) may hold one: `content: null` stored by a run
against an endpoint that answered empty would be served again to every later run asking the same
question, a failed operation nobody retries. `ReplyCache` is `dspy.clients.cache.Cache` whose `get`
treats a record without any answer (`pipeline.backends.reply_check.usable_record`) as a miss (so the
call goes to the endpoint and the good reply replaces it) and whose `put` never writes one.
`pipeline.backends.lm.configure_cache` installs it. It does not decide what a usable reply is, log
replies or change cache keys.
"""

from __future__ import annotations

import logging
from typing import Any

from dspy.clients.cache import Cache
from memtrace_loop.pipeline.backends.reply_check import usable_record

logger = logging.getLogger(__name__)

__all__ = ["ReplyCache"]


class ReplyCache(Cache):
    """`dspy.clients.cache.Cache` that neither serves nor stores a record holding no answer."""

    def get(self, request: dict[str, Any], ignored_args_for_cache_key: list[str] | None = None) -> Any:
        record = super().get(request, ignored_args_for_cache_key)
        if record is not None and not usable_record(record):
            logger.debug("a cached reply without any answer is ignored; the call goes to the endpoint")
            return None
        return record

    def put(
        self,
        request: dict[str, Any],
        value: Any,
        ignored_args_for_cache_key: list[str] | None = None,
        enable_memory_cache: bool = True,
    ) -> None:
        if usable_record(value):
            super().put(request, value, ignored_args_for_cache_key, enable_memory_cache)
