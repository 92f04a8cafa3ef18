"""How the pipeline splits text into words: the one place for word tokenizers.

Each function is a distinct, named behaviour; they are kept apart because merging any two changes
results (rankings, embeddings, metrics):

- `alnum_words`: lowercase alphanumeric runs ("Alice's 2nd dog!" -> alice, s, 2nd, dog). The lexical
  tokenizer of BM25 (`bm25.BM25Index`), lineage attribution's content tokens, the EverMemOS rerank
  terms and the keyword matching of imported execution networks.
- `alnum_apostrophe_words`: the same, but an apostrophe inside a word is kept ("don't", "alice's");
  the words of the hashing embedder (`embeddings.HashingEmbedder`), whose vectors depend on it.
- `long_letter_words`: lowercase runs of three or more letters (digits split words, shorter runs are
  dropped); the words by which the optimizer's failure feedback picks diverse examples.
- `normalize_answer` / `answer_tokens`: SQuAD answer normalization (lower case, punctuation and the
  articles a/an/the removed, whitespace squashed) and its whitespace tokens, as defined by the SQuAD
  evaluation script; token F1 and BLEU-1 use them and must stay SQuAD-exact.

Stop words, stemming and date handling are not here: they belong to the one analysis that uses them
(attribution's `content_tokens`, EverMemOS's `terms`), on top of `alnum_words`.

What it does not do: count LM tokens (that is `tokens.py`), embed, rank or index anything.

The simulated world (`pipeline.sim`) keeps its own tokenizer on purpose: it stands in for the
external LM and judge, so what the simulated LM "understands" must not change when a pipeline
tokenizer is changed; otherwise a pipeline edit would silently change the world it is measured on.
"""

from __future__ import annotations

import re
import string

__all__ = ["alnum_apostrophe_words", "alnum_words", "answer_tokens", "long_letter_words", "normalize_answer"]

_WORD = re.compile(r"[a-z0-9]+")
_WORD_WITH_APOSTROPHES = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*")
_LETTER_WORD = re.compile(r"[a-z]{3,}")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def alnum_words(text: str) -> list[str]:
    """Lowercase alphanumeric runs, in order, repeats kept."""
    return _WORD.findall(text.lower())


def alnum_apostrophe_words(text: str) -> list[str]:
    """Lowercase alphanumeric runs joined across in-word apostrophes ("don't" stays one word)."""
    return _WORD_WITH_APOSTROPHES.findall(text.lower())


def long_letter_words(text: str) -> list[str]:
    """Lowercase runs of at least three letters, in order, repeats kept."""
    return _LETTER_WORD.findall(text.lower())


def normalize_answer(text: str) -> str:
    """SQuAD normalization: lower case, drop punctuation and articles (a, an, the), squash spaces."""
    text = str(text).lower().translate(_PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def answer_tokens(text: str) -> list[str]:
    """The whitespace tokens of the SQuAD-normalized text (what token F1 and BLEU-1 count)."""
    return normalize_answer(text).split()
