"""Okapi BM25 over a fixed list of short documents, in pure Python.

Used for pseudo-evidence (which turns best match question + gold answer) and by retrieval stages that
fuse lexical and dense search. Tokenization: lowercase alphanumeric words. Ties rank the earlier
document first, so results are deterministic. It does not embed, fuse or persist anything.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

_WORD = re.compile(r"[a-z0-9]+")


def tokenize(text: str) -> list[str]:
    return _WORD.findall(text.lower())


class BM25Index:
    def __init__(self, documents: Sequence[str], k1: float = 1.5, b: float = 0.75) -> None:
        self._k1 = k1
        self._b = b
        self._term_counts = [Counter(tokenize(doc)) for doc in documents]
        self._lengths = [sum(counts.values()) for counts in self._term_counts]
        self._average_length = (sum(self._lengths) / len(self._lengths)) if self._lengths else 0.0
        document_frequency: Counter[str] = Counter()
        for counts in self._term_counts:
            document_frequency.update(counts.keys())
        n = len(documents)
        self._idf = {t: math.log(1 + (n - df + 0.5) / (df + 0.5)) for t, df in document_frequency.items()}

    def __len__(self) -> int:
        return len(self._term_counts)

    def scores(self, query: str) -> list[float]:
        terms = [t for t in dict.fromkeys(tokenize(query)) if t in self._idf]
        k1, b, avg = self._k1, self._b, self._average_length or 1.0
        out = []
        for counts, length in zip(self._term_counts, self._lengths, strict=True):
            score = 0.0
            for term in terms:
                tf = counts.get(term, 0)
                if tf:
                    score += self._idf[term] * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / avg))
            out.append(score)
        return out

    def top(self, query: str, k: int) -> list[tuple[int, float]]:
        """The `k` best (document index, score) pairs, best first, earlier document first on ties."""
        ranked = sorted(enumerate(self.scores(query)), key=lambda item: (-item[1], item[0]))
        return ranked[: max(k, 0)]
