"""What makes an HTTP 200 chat reply usable, and what a run does about replies cut at `max_tokens`.

`check_reply(response)` is applied to every attempt's reply by the guarded engine
(`pipeline.backends.guarded_engine`) before DSPy sees it, so a reply it refuses is a failed ATTEMPT:
never returned, hence never written to DSPy's response cache, and classified by
`pipeline.backends.resilience.classify`:

- `MalformedReply` (retried, cause `malformed`): JSON without a choice, a choice without a message
  (a body that is not a JSON object is refused by `pipeline.backends.openai_engine` the same way);
- `EmptyReply` (retried, cause `empty_reply`): a message with no text, no data and no tool call
  (`content: null`, `""` or blank) that did not stop at the token limit;
- `EmptyAtMaxTokens` (NOT retried: the same `max_tokens` gives the same outcome): no text and
  `finish_reason: "length"`, what a reasoning model returns when it spends `max_tokens` thinking.

`MaxTokensGuard` counts the `EmptyAtMaxTokens` failures of one run (thread-safe, shared by every LM
of the run) and raises `MaxTokensTooSmall` (a `RunStopped`) at the `limit`-th one, naming the role,
`lm.<role>.max_tokens` and the override that raises it.

`usable_record(record)` is the same rule for a DSPy cache record (`pipeline.backends.lm.ReplyCache`
serves and stores only usable ones). It does not retry, log or know HTTP.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from dspy.lm15 import Response
from memtrace_loop.pipeline.backends.resilience import EmptyAtMaxTokens, EmptyReply, MalformedReply
from memtrace_loop.pipeline.core.stop import MaxTokensTooSmall

__all__ = ["MAX_TOKENS_STOPS_AFTER", "MaxTokensGuard", "check_reply", "usable_record"]

MAX_TOKENS_STOPS_AFTER = 3  # empty replies cut at max_tokens in one run before it stops


def _has_answer(response: Response) -> bool:
    for part in response.message.parts:
        kind = type(part).__name__
        if kind == "TextPart" and str(getattr(part, "text", "") or "").strip():
            return True
        if kind in ("DataPart", "ToolCallPart"):
            return True
    return False


def _shape_problem(data: Any) -> str:
    """What is missing in a raw chat.completion body ("" when it has a choice with a message)."""
    if not isinstance(data, Mapping):
        return ""  # no raw body (the simulated world's engine): judged by its parts only
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        return "the reply is JSON but carries no choice"
    first = choices[0]
    if not isinstance(first, Mapping) or not isinstance(first.get("message"), Mapping):
        return "the reply carries a choice without a message"
    return ""


def check_reply(response: Response, max_tokens: int | None = None) -> Response:
    """`response` if it carries an answer; else raise what is wrong with it (see the module docstring)."""
    problem = _shape_problem(response.provider_data)
    if problem:
        raise MalformedReply(problem, status=200)
    if _has_answer(response):
        return response
    if response.finish_reason == "length":
        limit = f"max_tokens={max_tokens}" if max_tokens is not None else "the server's max_tokens"
        raise EmptyAtMaxTokens(
            f"the reply is empty: it stopped at {limit} (finish_reason \"length\") before any answer",
            status=200, max_tokens=max_tokens,
        )
    raise EmptyReply(
        f"the reply carries no answer (empty content, finish_reason {response.finish_reason!r})",
        status=200,
    )


def _output_has_answer(output: Any) -> bool:
    if isinstance(output, str):
        return bool(output.strip())
    if isinstance(output, Mapping):
        return bool(str(output.get("text") or "").strip() or output.get("tool_calls"))
    return output is not None


def usable_record(record: Any) -> bool:
    """Whether a DSPy cache record (a native call result's dump) holds at least one answer; records of
    other shapes are not judged (True)."""
    if not isinstance(record, Mapping) or "outputs" not in record or "_dspy_format" not in record:
        return True
    outputs = record.get("outputs")
    return isinstance(outputs, list) and any(_output_has_answer(output) for output in outputs)


class MaxTokensGuard:
    """Counts empty replies cut at `max_tokens` in one run; the `limit`-th raises `MaxTokensTooSmall`."""

    def __init__(self, limit: int = MAX_TOKENS_STOPS_AFTER) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        self.limit = limit
        self._lock = threading.Lock()
        self._count_by_role: dict[str, int] = {}

    def __copy__(self) -> MaxTokensGuard:
        return self

    def __deepcopy__(self, memo: dict[int, object]) -> MaxTokensGuard:
        return self

    def record(self, role: str, max_tokens: int | None) -> None:
        """Count one; raise `MaxTokensTooSmall` once `role` reached the limit."""
        with self._lock:
            count = self._count_by_role.get(role, 0) + 1
            self._count_by_role[role] = count
        if count >= self.limit:
            raise MaxTokensTooSmall(role, max_tokens, count)

    def count(self, role: str) -> int:
        with self._lock:
            return self._count_by_role.get(role, 0)
