"""How the pipeline splits text into words: the one place for word tokenizers.

Each is a distinct behaviour, kept apart because merging any two changes results:

- `alnum_words`: lowercase alphanumeric runs ("Alice's 2nd dog!" -> alice, s, 2nd, dog): BM25,
  attribution's content tokens, EverMemOS's rerank terms, the keywords of imported execution networks;
- `alnum_apostrophe_words`: the same, an in-word apostrophe kept ("don't"): the hashing embedder's words;
- `long_letter_words`: lowercase runs of three or more letters: the optimizer's feedback examples;
- `normalize_answer` / `answer_tokens`: SQuAD answer normalization and its tokens (token F1, BLEU-1).

Stop words, stemming and dates belong to the analyses that use them. It counts no LM tokens
(`tokens.py`). The simulated world keeps its own tokenizer on purpose: what the simulated LM
"understands" must not change when a pipeline tokenizer does.
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
