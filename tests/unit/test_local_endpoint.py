"""Which api_base is this machine (`local_endpoint`): where a refused connection at preflight means
"no server runs there" and the check gives up at once (pipeline.backends.guarded_engine)."""

from __future__ import annotations

import pytest
from memtrace_loop.pipeline.backends.guarded_engine import local_endpoint
from memtrace_loop.pipeline.backends.openai_engine import endpoint_url


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:8080/v1", "http://127.0.0.2:8080/v1", "http://localhost:11434/v1", "http://LocalHost./v1",
     "http://api.localhost:9000/v1", "http://[::1]:8000/v1", "http://0.0.0.0:8000/v1", "http://[::]:8000",
     "https://user:pw@localhost:8443/v1?api-version=1"],
)
def test_loopback_and_unspecified_hosts_are_local(url: str) -> None:
    assert local_endpoint(url)
    assert local_endpoint(endpoint_url(url))  # as the engine names it (credentials and query cut)


@pytest.mark.parametrize(
    "url",
    ["https://api.openai.com/v1", "http://10.0.0.5:8000/v1", "http://192.168.1.2:8000/v1",
     "http://[2001:db8::1]:8000/v1", "http://localhost.example.com/v1", "http://mylocalhost:8000/v1", ""],
)
def test_other_hosts_are_not_local(url: str) -> None:
    assert not local_endpoint(url)


def test_an_ipv6_endpoint_keeps_its_brackets() -> None:
    assert endpoint_url("http://user:secret@[::1]:8000/v1?key=k") == "http://[::1]:8000/v1"
