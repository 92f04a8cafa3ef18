"""Text embedders used for memory retrieval.

`Embedder` is the protocol every retriever relies on: a fixed `dim` and `embed(texts)` returning a
float32 matrix with one L2-normalised row per text (a dot product is a cosine similarity).

- `HashingEmbedder`: deterministic, offline, no model: word unigrams, bigrams and character trigrams,
  hashed with blake2b (never Python's salted `hash`) into signed buckets. The default, and what the
  simulated world and the tests use; it captures lexical overlap, not meaning.
- `OpenAIEmbedder`: any OpenAI-compatible `/v1/embeddings` endpoint through the official `openai` client
  (which retries 429/5xx/timeouts with backoff); 401/403/404 raise `EndpointUnusable`, which ends the run.

`build_embedder` builds one from a plain (Hydra-resolved) mapping. It caches no embeddings and knows
nothing of memories or retrieval.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
import pydantic
from memtrace_loop.pipeline.backends.lm import read_key
from memtrace_loop.pipeline.backends.text import alnum_apostrophe_words
from memtrace_loop.pipeline.core.config import ConfigError, describe_error
from memtrace_loop.pipeline.core.redaction import scrub_url

logger = logging.getLogger(__name__)

__all__ = [
    "Embedder",
    "EmbedderConfig",
    "HashingEmbedder",
    "OpenAIEmbedder",
    "build_embedder",
]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit-length float32 vectors of a fixed dimension."""

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """A `(len(texts), dim)` float32 array whose non-zero rows have L2 norm 1."""
        ...


def _normalize_rows(matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0.0] = 1.0
    return (matrix / norms).astype(np.float32, copy=False)


_WORD_CACHE_LIMIT = 200_000
HASHING_DIM = 256  # the hashing embedder's dimension unless `embedder.dim` says otherwise
MIN_HASHING_DIM = 8
_BIGRAM_WEIGHT = 1.0
_TRIGRAM_WEIGHT = 0.35  # lets "dogs" and "dog" share signal


def _feature_slot(feature: str, dim: int) -> tuple[int, float]:
    """(bucket, sign) for one feature, from a stable 8-byte blake2b digest."""
    digest = int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "little")
    return digest % dim, (1.0 if (digest >> 63) & 1 else -1.0)


class HashingEmbedder:
    """Deterministic bag-of-features embedder (feature hashing with signed buckets).

    Features of a text: each lowercase word (weight 1), each pair of adjacent words and each character
    trigram of a word padded with `<`/`>`. Identical inputs give identical vectors in every process and
    on every machine. An empty text embeds to the zero vector.
    """

    def __init__(self, dim: int = HASHING_DIM) -> None:
        if dim < MIN_HASHING_DIM:
            raise ValueError(f"HashingEmbedder dim must be at least {MIN_HASHING_DIM}, got {dim}")
        self._dim = int(dim)
        self._word_cache: dict[str, tuple[tuple[int, ...], tuple[float, ...]]] = {}

    @property
    def dim(self) -> int:
        return self._dim

    def __repr__(self) -> str:
        return f"HashingEmbedder(dim={self._dim})"

    def _word_slots(self, word: str) -> tuple[tuple[int, ...], tuple[float, ...]]:
        """(buckets, signed weights) of a word's unigram and character trigrams; memoised per word."""
        cached = self._word_cache.get(word)
        if cached is None:
            col, sign = _feature_slot("w:" + word, self._dim)
            cols, vals = [col], [sign]
            padded = f"<{word}>"
            for i in range(len(padded) - 2):
                col, sign = _feature_slot("c:" + padded[i : i + 3], self._dim)
                cols.append(col)
                vals.append(sign * _TRIGRAM_WEIGHT)
            cached = (tuple(cols), tuple(vals))
            if len(self._word_cache) < _WORD_CACHE_LIMIT:
                self._word_cache[word] = cached
        return cached

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not a single string")
        counts: list[int] = []
        cols: list[int] = []
        vals: list[float] = []
        dim = self._dim
        for text in texts:
            words = alnum_apostrophe_words(text)
            before = len(cols)
            for word in words:
                word_cols, word_vals = self._word_slots(word)
                cols.extend(word_cols)
                vals.extend(word_vals)
            for first, second in pairwise(words):
                col, sign = _feature_slot(f"b:{first} {second}", dim)
                cols.append(col)
                vals.append(sign * _BIGRAM_WEIGHT)
            counts.append(len(cols) - before)
        if not cols:
            return np.zeros((len(texts), dim), dtype=np.float32)
        rows = np.repeat(np.arange(len(texts), dtype=np.int64), counts)
        flat = rows * dim + np.asarray(cols, dtype=np.int64)
        matrix = np.bincount(flat, weights=np.asarray(vals, dtype=np.float64), minlength=len(texts) * dim)
        return _normalize_rows(matrix.reshape(len(texts), dim))


class OpenAIEmbedder:
    """Embeddings from an OpenAI-compatible endpoint (`POST {api_base}/embeddings`).

    The key is read from the variable named `api_key_env` at construction; it is never stored on this
    object or logged. `dim` is learned from the first response unless given. Texts go in batches of
    `batch_size`; rows are re-normalised locally. The defaults are written here (`EmbedderConfig` reads them).
    """

    KEY_ENV = "OPENAI_API_KEY"
    TIMEOUT_S = 60.0
    MAX_RETRIES = 5
    BATCH_SIZE = 256

    def __init__(
        self,
        model: str,
        api_base: str | None = None,
        api_key_env: str | None = KEY_ENV,
        timeout_s: float = TIMEOUT_S,
        max_retries: int = MAX_RETRIES,
        batch_size: int = BATCH_SIZE,
        dim: int | None = None,
    ) -> None:
        import openai

        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.model = model
        self.api_base = api_base
        self.api_key_env = api_key_env
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.batch_size = int(batch_size)
        self._dim = dim
        api_key = read_key(api_key_env, "the embedding endpoint")  # never an ambient OPENAI_API_KEY
        self._client = openai.OpenAI(
            api_key=api_key, base_url=api_base, timeout=self.timeout_s, max_retries=self.max_retries
        )

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self.embed(["dimension probe"]).shape[1])
        return self._dim

    def __repr__(self) -> str:
        return (
            f"OpenAIEmbedder(model={self.model!r}, api_base={scrub_url(self.api_base or '')!r}, "
            f"api_key_env={self.api_key_env!r})"
        )

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not a single string")
        texts = list(texts)
        if not texts:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        chunks: list[np.ndarray] = []
        for start in range(0, len(texts), self.batch_size):
            batch = [text if text else " " for text in texts[start : start + self.batch_size]]
            response = self._create(batch)
            ordered = sorted(response.data, key=lambda item: item.index)
            if len(ordered) != len(batch):
                raise RuntimeError(
                    f"embedding endpoint returned {len(ordered)} vectors for {len(batch)} inputs "
                    f"(model {self.model})"
                )
            chunks.append(np.asarray([item.embedding for item in ordered], dtype=np.float32))
        matrix = _normalize_rows(np.concatenate(chunks, axis=0))
        if self._dim is None:
            self._dim = int(matrix.shape[1])
        elif matrix.shape[1] != self._dim:
            raise RuntimeError(
                f"embedding endpoint returned dimension {matrix.shape[1]}, expected {self._dim}"
            )
        return matrix

    @property
    def endpoint(self) -> str:
        """The endpoint, safe to log (no user info, no query)."""
        from memtrace_loop.pipeline.backends.openai_engine import DEFAULT_OPENAI_BASE, endpoint_url  # pulls in dspy

        return endpoint_url(self.api_base) or DEFAULT_OPENAI_BASE

    def _create(self, batch: list[str]) -> Any:
        """One embeddings request (the client retries 429/5xx/timeouts); 401/403/404 raise
        `EndpointUnusable`, naming the key VARIABLE."""
        import openai
        from memtrace_loop.pipeline.core.stop import EndpointUnusable

        try:
            return self._client.embeddings.create(model=self.model, input=batch)
        except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
            where = f"check the key in ${self.api_key_env}" if self.api_key_env else "the endpoint wants a key"
            cause = f"authentication failed (HTTP {exc.status_code}): {where}"
        except openai.NotFoundError:
            cause = (
                f"model {self.model!r} or path not found (HTTP 404) at POST {self.endpoint}/embeddings: "
                "check embedder.model and embedder.api_base"
            )
        raise EndpointUnusable("embedder", self.endpoint, cause) from None


class EmbedderConfig(pydantic.BaseModel):
    """How to build an embedder; `api_key_env` is the NAME of the variable holding the key."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True, allow_inf_nan=False)

    backend: Literal["hashing", "openai"] = "hashing"
    dim: int | None = pydantic.Field(default=None, gt=0)  # None: HASHING_DIM for hashing, learned for openai
    model: str | None = None
    api_base: str | None = pydantic.Field(default=None, min_length=1)
    api_key_env: str | None = OpenAIEmbedder.KEY_ENV
    timeout_s: float = pydantic.Field(default=OpenAIEmbedder.TIMEOUT_S, gt=0)
    max_retries: int = pydantic.Field(default=OpenAIEmbedder.MAX_RETRIES, ge=0)
    batch_size: int = pydantic.Field(default=OpenAIEmbedder.BATCH_SIZE, ge=1)

    @pydantic.model_validator(mode="after")
    def _check_backend_fields(self) -> EmbedderConfig:
        if self.backend == "openai" and not self.model:
            raise ValueError("embedder backend 'openai' needs a model name")
        if self.backend == "hashing" and self.dim is not None and self.dim < MIN_HASHING_DIM:
            raise ValueError(f"dim must be >= {MIN_HASHING_DIM} for the hashing embedder, got {self.dim}")
        return self

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]) -> EmbedderConfig:
        """Build from a plain mapping, rejecting unknown keys by name."""
        unknown = sorted(set(mapping) - set(cls.model_fields))
        if unknown:
            raise ConfigError(
                f"unknown embedder config keys {unknown} ({', '.join(f'embedder.{k}' for k in unknown)}); "
                f"allowed: {sorted(cls.model_fields)}"
            )
        try:
            return cls.model_validate(dict(mapping), strict=True)  # no str/float -> int, no int -> bool
        except pydantic.ValidationError as exc:
            fields = tuple(cls.model_fields)
            messages = (describe_error("embedder", e, fields, show_input=False) for e in exc.errors())
            raise ConfigError("; ".join(messages)) from None


def build_embedder(mapping: Mapping[str, Any] | EmbedderConfig | None = None) -> Embedder:
    """An embedder from a config mapping (`backend: hashing|openai`); None means the hashing default."""
    config = mapping if isinstance(mapping, EmbedderConfig) else EmbedderConfig.from_mapping(mapping or {})
    if config.backend == "hashing":
        return HashingEmbedder(dim=config.dim or HASHING_DIM)
    logger.info(
        "embedder: openai-compatible model=%s api_base=%s key_env=%s",
        config.model,
        scrub_url(config.api_base or ""),
        config.api_key_env,
    )
    return OpenAIEmbedder(
        model=config.model or "",
        api_base=config.api_base,
        api_key_env=config.api_key_env,
        timeout_s=config.timeout_s,
        max_retries=config.max_retries,
        batch_size=config.batch_size,
        dim=config.dim,
    )
