"""A local endpoint that refuses the connection: the preflight gives up at once, a running call retries.

pipeline.backends.{guarded_engine, preflight}: at preflight (`check_endpoints`), a
connection refused by a loopback api_base means no server runs there, so the check fails at its FIRST
attempt with no retry warning, in one line naming the fix (start the server there, or check
`lm.<role>.api_base` of the actual role). In the middle of a run the same refusal is retried as any
connection error (a local server may be restarting). Attempts are counted where the transport opens
its sockets (`socket.create_connection`, one per attempt), never timed.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path
from typing import Any

import pytest
from memtrace_loop.pipeline.backends.embeddings import OpenAIEmbedder
from memtrace_loop.pipeline.backends.preflight import check_endpoints
from memtrace_loop.pipeline.backends.registry import build_lm_set
from memtrace_loop.pipeline.backends.services import RetryLedger, RunLedger, RunServices
from memtrace_loop.pipeline.core.stop import EndpointUnusable

from tests.support import forbid_network, isolate_llm_env
from tests.support.answering import ask

KEY_ENV = "MEMTRACE_TEST_REFUSED_KEY"


def closed_port(family: socket.AddressFamily = socket.AF_INET, host: str = "127.0.0.1") -> int:
    with socket.socket(family) as sock:  # bound, never listening, then closed: connecting is refused
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def connects(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[tuple[Any, ...]]:
    """Offline, with the key set: every connection the transport opens (one per attempt), in order."""
    isolate_llm_env(monkeypatch, tmp_path)
    forbid_network(monkeypatch)
    monkeypatch.setenv(KEY_ENV, "sk-refused-test")
    opened: list[tuple[Any, ...]] = []
    original, original_async = socket.create_connection, asyncio.open_connection

    def counted(address: Any, *args: Any, **kwargs: Any) -> socket.socket:
        opened.append(tuple(address))
        return original(address, *args, **kwargs)

    async def counted_async(host: Any = None, port: Any = None, **kwargs: Any) -> Any:
        opened.append((host, port))
        return await original_async(host, port, **kwargs)

    monkeypatch.setattr(socket, "create_connection", counted)  # the embedder's check
    monkeypatch.setattr(asyncio, "open_connection", counted_async)  # the LM's client
    return opened


def config_at(api_base: str, **overrides: Any) -> dict[str, Any]:
    return {"backend": "openai", "model": "stub-model", "api_base": api_base, "api_key_env": KEY_ENV,
            "timeout_s": 5, "num_retries": 5, "cache": False, **overrides}


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]


@pytest.mark.parametrize(
    ("host", "family", "bind"),
    [("127.0.0.1", socket.AF_INET, "127.0.0.1"), ("localhost", socket.AF_INET, "127.0.0.1"),
     ("[::1]", socket.AF_INET6, "::1")],
    ids=["ipv4", "localhost", "ipv6"],
)
def test_a_refused_local_endpoint_fails_the_check_at_the_first_attempt_with_the_fix_named(
    host: str, family: socket.AddressFamily, bind: str,
    connects: list[tuple[Any, ...]], caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    api_base = f"http://{host}:{closed_port(family, bind)}/v1"
    retries = RetryLedger()
    lms = build_lm_set(
        {"task": {"backend": "sim", "model": "stand-in"}, "judge": config_at(api_base),
         "attributor": {"backend": "sim", "model": "stand-in"}, "rewriter": {"backend": "sim", "model": "stand-in"}},
        services=RunServices(ledger=RunLedger(retries=retries)),
    )
    with pytest.raises(EndpointUnusable) as caught:
        check_endpoints(lms)
    line = str(caught.value)
    assert len(connects) == 1, connects  # one attempt of the six allowed
    assert warnings_of(caplog) == [] and retries.tally().total == 0
    assert "\n" not in line and line.startswith(f"lm.judge endpoint {api_base}: connection refused")
    assert "start the server there" in line and "check lm.judge.api_base" in line
    assert caught.value.role == "judge"


def test_a_refused_connection_in_the_middle_of_a_run_is_still_retried(
    connects: list[tuple[Any, ...]], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    retries = RetryLedger()
    api_base = f"http://127.0.0.1:{closed_port()}/v1"
    lms = build_lm_set(
        {"task": config_at(api_base, num_retries=2, retry_after_cap_s=0.01),
         **{role: {"backend": "sim", "model": "stand-in"} for role in ("judge", "attributor", "rewriter")}},
        services=RunServices(ledger=RunLedger(retries=retries)),
    )
    with pytest.raises(Exception, match=r"failed to connect") as caught:
        ask(lms.task)
    assert not isinstance(caught.value, EndpointUnusable)  # one failed call, not the end of the run
    assert len(connects) == 3  # the first attempt and both retries
    retry_warnings = [line for line in warnings_of(caplog) if "retrying in" in line]
    assert len(retry_warnings) == 2 and all("(connection:" in line for line in retry_warnings)
    assert retries.tally().role("task") == 2



def test_a_refused_local_embedder_fails_the_check_at_once_too(
    connects: list[tuple[Any, ...]], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    api_base = f"http://127.0.0.1:{closed_port()}/v1"
    embedder = OpenAIEmbedder("embed-model", api_base=api_base, api_key_env=KEY_ENV, max_retries=5)
    with pytest.raises(EndpointUnusable) as caught:
        check_endpoints({}, embedder=embedder)
    line = str(caught.value)
    assert len(connects) == 1, connects  # the client's five retries never start
    assert api_base in line and "connection refused at the first attempt" in line
    assert "start the server there" in line and "check embedder.api_base" in line
    assert "Retrying request" not in caplog.text  # the openai client's own retry log
