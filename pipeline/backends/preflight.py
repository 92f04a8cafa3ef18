"""Checking every configured endpoint once before any work: `check_endpoints`.

A wrong key, an unknown model, a dead host or an endless rate limit would otherwise show as a run of
failed operations and a 0% score. Before the first real call, an entry point asks one tiny chat request
(`ping`, under the role's own `max_tokens` and `deadline_s`) per distinct endpoint of the LMs on the
`openai` backend, through the guarded engine's `probe` (not `dspy.LM`: no cache, no counting), and one
embedding when the embedder is an `OpenAIEmbedder`. An endpoint that cannot serve raises
`EndpointUnusable`; an empty reply cut at `max_tokens`, `MaxTokensTooSmall`. A refused local endpoint
fails at once naming the fix; a 400-class refusal of the check request only logs a warning. The
simulated world needs no check.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import dspy
from dspy.lm15 import Config, Message, Request
from memtrace_loop.pipeline.backends.embeddings import OpenAIEmbedder
from memtrace_loop.pipeline.backends.guarded_engine import GuardedEngine, local_endpoint
from memtrace_loop.pipeline.backends.lm import LMSet
from memtrace_loop.pipeline.backends.openai_engine import OpenAIEngine
from memtrace_loop.pipeline.core.stop import EndpointUnusable, StopToken

logger = logging.getLogger(__name__)

__all__ = ["CheckedEndpoint", "check_endpoints"]

PING = "ping"


@dataclass(frozen=True)
class CheckedEndpoint:
    """One endpoint that answered the check: the roles using it, its scrubbed URL and model."""

    roles: tuple[str, ...]
    endpoint: str
    model: str


def _refuses(endpoint: str, timeout_s: float) -> bool:
    """Whether a local `endpoint` refuses a TCP connection (nothing listens there); any other outcome
    is False (the check request itself says what is wrong)."""
    parts = urlsplit(endpoint)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "localhost", port), timeout=timeout_s):
            return False
    except ConnectionRefusedError:
        return True
    except OSError:
        return False


def _check_embedder(embedder: OpenAIEmbedder, stop: StopToken | None) -> CheckedEndpoint:
    import openai

    endpoint = embedder.endpoint
    if stop is not None:
        stop.check()
    attempts = embedder.max_retries + 1

    def unusable(cause: str) -> EndpointUnusable:
        return EndpointUnusable("embedder", endpoint, cause)

    if local_endpoint(endpoint) and _refuses(endpoint, embedder.timeout_s):
        raise unusable(f"connection refused at the first attempt: nothing listens at {urlsplit(endpoint).netloc}; "
                       "start the server there, or check embedder.api_base")

    try:  # 401/403/404 raise EndpointUnusable inside embed
        embedder.embed([PING])
    except openai.APITimeoutError:
        raise unusable(f"unreachable: timed out after {attempts} attempt(s)") from None
    except openai.APIConnectionError:
        raise unusable(f"unreachable: connection failed after {attempts} attempt(s)") from None
    except openai.RateLimitError:
        raise unusable(f"rate limited (HTTP 429) after {attempts} attempt(s)") from None
    except openai.APIStatusError as exc:
        if exc.status_code >= 500:
            raise unusable(f"unreachable: HTTP {exc.status_code} after {attempts} attempt(s)") from None
        logger.warning("embedder %s refused the check request (HTTP %d); going on", endpoint, exc.status_code)
    return CheckedEndpoint(("embedder",), endpoint, embedder.model)


def check_endpoints(
    lms: LMSet | Mapping[str, dspy.BaseLM],
    *,
    embedder: Any | None = None,
    stop: StopToken | None = None,
) -> tuple[CheckedEndpoint, ...]:
    """Ask each distinct configured endpoint one tiny request; raise `EndpointUnusable` for the first
    that cannot serve (role, scrubbed endpoint, cause). `stop` is checked before each embedder check
    (the LMs' guarded engines check their own token)."""
    lm_by_role = lms.by_role() if isinstance(lms, LMSet) else dict(lms)
    targets: dict[tuple[str, str, str, str, int | None], tuple[GuardedEngine, str, list[str]]] = {}
    for role, lm in lm_by_role.items():
        engine = getattr(lm, "engine", None)
        if not (isinstance(engine, GuardedEngine) and isinstance(engine.inner, OpenAIEngine)):
            continue
        config = engine.inner.config
        max_tokens = getattr(lm, "kwargs", {}).get("max_tokens")
        target = (engine.settings.endpoint, config.model, config.api_key_env or "", config.dialect, max_tokens)
        targets.setdefault(target, (engine, lm.model, []))[2].append(role)
    checked: list[CheckedEndpoint] = []
    for (endpoint, model, *_, max_tokens), (engine, lm_model, roles) in targets.items():
        engine.probe(Request(model=lm_model, messages=(Message.user(PING),), config=Config(max_tokens=max_tokens)))
        logger.info("lm endpoint %s (model %s) answered the check for %s", endpoint, model, ", ".join(roles))
        checked.append(CheckedEndpoint(tuple(roles), endpoint, model))
    if isinstance(embedder, OpenAIEmbedder):
        checked.append(_check_embedder(embedder, stop))
        logger.info("embedder endpoint %s (model %s) answered the check", checked[-1].endpoint, embedder.model)
    return tuple(checked)
