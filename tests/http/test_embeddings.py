"""Embedders: the offline hashing default and the OpenAI-compatible client against the local server."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import openai
import pytest
from memtrace_loop.pipeline.backends.embeddings import (
    Embedder,
    EmbedderConfig,
    HashingEmbedder,
    OpenAIEmbedder,
    build_embedder,
)
from memtrace_loop.pipeline.backends.lm import MissingAPIKeyError

from tests.support import forbid_network, isolate_llm_env
from tests.support.openai_server import OpenAIStubServer, running_server
from tests.support.paths import REPO

KEY_ENV = "MEMTRACE_TEST_EMBED_KEY"
KEY = "sk-embed-test-0123456789"


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate_llm_env(monkeypatch, tmp_path)
    forbid_network(monkeypatch)
    monkeypatch.setenv(KEY_ENV, KEY)


@pytest.fixture
def server() -> Iterator[OpenAIStubServer]:
    yield from running_server(responder=lambda messages: "unused", embedder=HashingEmbedder(dim=64))


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b)


# ----------------------------------------------------------------------------------------- hashing
def test_hashing_shape_dtype_and_unit_rows() -> None:
    embedder = HashingEmbedder(dim=128)
    vectors = embedder.embed(["Alice adopted a puppy named Max.", "BOB!", "x y z"])
    assert isinstance(embedder, Embedder)
    assert vectors.shape == (3, 128) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)


def test_hashing_empty_inputs() -> None:
    embedder = HashingEmbedder()
    assert embedder.embed([]).shape == (0, 256)
    vectors = embedder.embed(["", "   ", "?!"])
    assert not vectors.any()  # no tokens -> zero vector, not NaN


def test_hashing_rejects_a_bare_string() -> None:
    with pytest.raises(TypeError):
        HashingEmbedder().embed("not a list")


def test_hashing_is_deterministic_within_a_process() -> None:
    texts = ["Caroline went to the LGBTQ support group on 7 May 2023.", "Melanie painted a sunrise."]
    np.testing.assert_array_equal(HashingEmbedder().embed(texts), HashingEmbedder().embed(texts))
    np.testing.assert_array_equal(HashingEmbedder().embed(texts[:1])[0], HashingEmbedder().embed(texts)[0])


def test_hashing_is_stable_across_processes_and_hash_seeds() -> None:
    code = (
        "from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder;"
        "v = HashingEmbedder(dim=64).embed(['Alice adopted a dog in Paris']);"
        "print(','.join(f'{x:.6f}' for x in v[0]))"
    )
    outputs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO)}
        result = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=60,
            check=True,
        )
        outputs.add(result.stdout.strip())
    assert len(outputs) == 1
    local = HashingEmbedder(dim=64).embed(["Alice adopted a dog in Paris"])[0]
    assert outputs.pop() == ",".join(f"{x:.6f}" for x in local)


def test_hashing_similar_texts_are_closer_than_unrelated() -> None:
    query, near, far = HashingEmbedder().embed(
        [
            "When did Alice adopt her dog?",
            "Alice adopted a dog named Max in May.",
            "Bob is training for a marathon in Berlin.",
        ]
    )
    assert cosine(query, near) > cosine(query, far) + 0.1
    # character trigrams give morphological variants some overlap
    plural, singular, other = HashingEmbedder().embed(["dogs", "dog", "marathon"])
    assert cosine(plural, singular) > cosine(plural, other)


def test_hashing_is_case_and_punctuation_insensitive() -> None:
    a, b = HashingEmbedder().embed(["Alice, adopted a DOG!", "alice adopted a dog"])
    assert cosine(a, b) == pytest.approx(1.0, abs=1e-6)


def test_hashing_embeds_10k_texts_in_one_batch() -> None:
    # how fast: experiments/lab/bench/speed_bench.py (no wall-clock assertion in tests)
    chooser = random.Random(0)
    vocabulary = [f"word{i}" for i in range(5000)] + ["the", "a", "to", "of", "and", "in", "on", "at"]
    texts = [" ".join(chooser.choices(vocabulary, k=14)) for _ in range(10_000)]
    vectors = HashingEmbedder().embed(texts)  # cold: no word is memoised yet
    assert vectors.shape == (10_000, 256) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(vectors[:3], HashingEmbedder().embed(texts[:3]))


def test_hashing_rejects_tiny_dim() -> None:
    with pytest.raises(ValueError, match="dim"):
        HashingEmbedder(dim=2)


# ------------------------------------------------------------------------------------------ openai
def test_openai_embedder_matches_the_server_and_batches(server: OpenAIStubServer) -> None:
    texts = [f"fact number {i} about Alice" for i in range(7)]
    embedder = OpenAIEmbedder("embed-stub", api_base=server.base_url, api_key_env=KEY_ENV, batch_size=3)
    vectors = embedder.embed(texts)
    assert vectors.dtype == np.float32 and vectors.shape == (7, 64)
    np.testing.assert_allclose(vectors, HashingEmbedder(dim=64).embed(texts), atol=1e-6)
    assert embedder.dim == 64
    calls = server.requests_to("/embeddings")
    assert [len(call.json["input"]) for call in calls] == [3, 3, 1]
    assert all(call.header("authorization") == f"Bearer {KEY}" for call in calls)
    assert all(call.json["model"] == "embed-stub" for call in calls)
    assert KEY not in repr(embedder)


def test_openai_embedder_retries_one_429(server: OpenAIStubServer) -> None:
    server.inject(status=429, times=1, retry_after=0)
    embedder = OpenAIEmbedder("embed-stub", api_base=server.base_url, api_key_env=KEY_ENV, max_retries=2)
    vectors = embedder.embed(["Alice adopted a dog"])
    assert vectors.shape == (1, 64)
    assert [call.status for call in server.requests_to("/embeddings")] == [429, 200]


def test_openai_embedder_gives_up_after_max_retries(server: OpenAIStubServer) -> None:
    server.inject(status=503, times=5, retry_after=0)
    embedder = OpenAIEmbedder("embed-stub", api_base=server.base_url, api_key_env=KEY_ENV, max_retries=1)
    with pytest.raises(openai.InternalServerError):
        embedder.embed(["x"])
    assert len(server.requests_to("/embeddings")) == 2


def test_openai_embedder_dim_probe_and_empty_input(server: OpenAIStubServer) -> None:
    embedder = OpenAIEmbedder("embed-stub", api_base=server.base_url, api_key_env=KEY_ENV)
    assert embedder.dim == 64  # learned with one probe request
    assert embedder.embed([]).shape == (0, 64)


def test_openai_embedder_missing_key_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMTRACE_TEST_ABSENT_EMBED_KEY", raising=False)
    with pytest.raises(MissingAPIKeyError, match="MEMTRACE_TEST_ABSENT_EMBED_KEY"):
        OpenAIEmbedder("m", api_base="http://127.0.0.1:9/v1", api_key_env="MEMTRACE_TEST_ABSENT_EMBED_KEY")


# ----------------------------------------------------------------------------------------- factory
def test_build_embedder_defaults_to_hashing() -> None:
    assert isinstance(build_embedder(None), HashingEmbedder)
    embedder = build_embedder({"backend": "hashing", "dim": 32})
    assert isinstance(embedder, HashingEmbedder) and embedder.dim == 32


def test_build_embedder_openai(server: OpenAIStubServer) -> None:
    embedder = build_embedder(
        {"backend": "openai", "model": "embed-stub", "api_base": server.base_url, "api_key_env": KEY_ENV}
    )
    assert isinstance(embedder, OpenAIEmbedder)
    assert embedder.embed(["hello"]).shape == (1, 64)


def test_embedder_config_rejects_unknown_keys_and_incomplete_openai() -> None:
    with pytest.raises(ValueError, match="unknown embedder config keys"):
        EmbedderConfig.from_mapping({"backend": "hashing", "dimension": 3})
    with pytest.raises(ValueError, match="model"):
        EmbedderConfig.from_mapping({"backend": "openai"})
    config = EmbedderConfig.from_mapping({"backend": "hashing"})
    with pytest.raises(Exception):  # noqa: B017 - frozen pydantic model
        config.dim = 3  # type: ignore[misc]
