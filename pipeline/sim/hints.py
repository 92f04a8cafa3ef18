"""Quoted information in a stage's instruction: what the stand-in LM is asked to keep or use.

A real model whose instruction says `... keep this information: "Carol moved to Denver yesterday"` treats
the quoted words as information to carry through. The stand-in does the same, generically: it reacts to
ANY quoted span of its instruction, whatever the words around it, so no method is rewarded for one
wording (a hint of replay, a rewriter's example, a user's note all count alike).

What counts as a quote (`quotes_in`):

- the text between a pair of double quotes, straight (`"..."`) or curly (`“...”`), paired left to right;
  single quotes never count (the rule sentences use them for examples such as 'last Saturday');
- only a span with at least `MIN_SPAN_WORDS` (2) content words (`judge.content_tokens`, after the
  rendering labels `Memory:`, `Time:`, `Timestamp:`, `Date:`, `Episode:`, `Narrative:` are dropped):
  a one-word quote ("ADD", "facts", a bare "Boston") names too little to act on;
- not a JSON string: a span followed by `:` (a key) or inside an open `[` or `{` (brackets counted outside
  quoted spans) is part of an example of an output shape (mem0's default prompts are full of them), not
  information. A stray unclosed `[` or `{` before a quote therefore hides it.

When a quote names an item (`Quote.names`): the item's content words and the quote's share at least
one word and at least half of the smaller of the two word sets (rounded up): "Alice lives in Boston" is
named by "I just moved to Boston" (1 of 2) and by "[8 May 2023] Alice: I moved to Boston" (2 of 3), not
by "Carol lives in Denver" (1 of 3: "lives" alone is no information) nor by a long quote that shares only
a speaker's name.

What a quote can do: the items of a stage's output that a quote names (a sentence of a turn, a new fact
or the memory its decision touches, a context line, a retrieved relation) are produced as the stage
produces them when its instruction states EVERY fix rule of that stage (`RuleEffect.FIX`; never a
misfire or noise rule, and misfires the instruction itself states still apply); the other items are
produced exactly as before. A request without a counted quote is answered byte for byte as before.
A stage without fix rules (detect_boundary, write_episode) is not changed by a quote. The one exception
is check_sufficiency (no rules): told to use information it cannot find, it answers "not sufficient"
when a quote that names the question or a retrieved memory is missing from the retrieved episodes
(`Quotes.lacking`), which lets a steering repair run the second retrieval round.

What a quote cannot do: it never adds information the stage's inputs lack (extract writes no fact that
is not in the turn; the answer stage answers only from context lines, never from the quote's text;
expand_queries asks by name only about a person a retrieved memory names); it never raises a stage
above its fix rules; the stand-in never reads ground truth (it sees only the instruction and inputs).
Pure functions and frozen records.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

from memtrace_loop.pipeline.sim.judge import content_tokens
from memtrace_loop.pipeline.sim.rules import rules_for_stage

__all__ = ["MIN_SPAN_WORDS", "NO_QUOTES", "Quote", "Quotes", "fix_ids", "quotes_in", "with_fixes", "words"]

MIN_SPAN_WORDS = 2
_QUOTED = re.compile(r'"(?P<straight>[^"]*)"|\u201c(?P<curly>[^\u201d]*)\u201d')
_LABELS = re.compile(r"\b(?:Memory|Time|Timestamp|Date|Episode|Narrative):", re.IGNORECASE)
_OPEN, _CLOSE = frozenset("[{"), frozenset("]}")


def words(text: str) -> frozenset[str]:
    """The content words of `text` (rendering labels such as `Memory:` and `Time:` left out)."""
    return frozenset(content_tokens(_LABELS.sub(" ", text)))


@dataclass(frozen=True)
class Quote:
    """One counted quoted span and its content words."""

    text: str
    words: frozenset[str]

    def names(self, item: frozenset[str]) -> bool:
        """True when an item with content words `item` is named by this quote (module docstring)."""
        shared = len(item & self.words)
        return shared >= 1 and 2 * shared >= min(len(item), len(self.words))

    def found_in(self, text_words: frozenset[str]) -> bool:
        """True when (nearly) all its words occur in a text: at most one in five missing."""
        return len(self.words - text_words) <= len(self.words) // 5


@dataclass(frozen=True)
class Quotes:
    """The counted quotes of one instruction (empty: the stage behaves exactly as without quotes)."""

    quotes: tuple[Quote, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.quotes)

    def name(self, text: str) -> bool:
        """True when some quote names `text`."""
        if not self.quotes:
            return False
        item = words(text)
        return any(quote.names(item) for quote in self.quotes)

    def mention(self, word: str) -> bool:
        """True when some quote contains the content word(s) of `word` (e.g. a person's name)."""
        wanted = words(word)
        return bool(wanted) and any(wanted <= quote.words for quote in self.quotes)

    def lacking(self, about: Iterable[str], text: str) -> bool:
        """True when a quote that names one of the texts `about` is missing from `text` (`found_in`)."""
        items = [words(item) for item in about]
        present = words(text)
        return any(any(q.names(item) for item in items) and not q.found_in(present) for q in self.quotes)

    def rules_for(self, text: str, rules: frozenset[str], fixed: frozenset[str]) -> frozenset[str]:
        """`fixed` (the stated rules plus every fix of the stage) for a named item, else `rules`."""
        return fixed if self.name(text) else rules


NO_QUOTES = Quotes()


def _depth(text: str, depth: int = 0) -> int:
    """How many `[` / `{` are open after `text` when `depth` were open before it (never below zero)."""
    for char in text:
        if char in _OPEN:
            depth += 1
        elif char in _CLOSE:
            depth = max(0, depth - 1)
    return depth


def _is_key(text: str, end: int) -> bool:
    rest = text[end:].lstrip()
    return rest.startswith(":")


def quotes_in(instruction: str) -> Quotes:
    """The counted quotes of `instruction` (see the module docstring)."""
    found: list[Quote] = []
    depth, last = 0, 0
    for match in _QUOTED.finditer(instruction):
        depth = _depth(instruction[last:match.start()], depth)
        last = match.end()
        if depth or _is_key(instruction, match.end()):
            continue
        span = match.group("straight") if match.group("straight") is not None else match.group("curly")
        span_words = words(span)
        if len(span_words) >= MIN_SPAN_WORDS:
            found.append(Quote(span.strip(), span_words))
    return Quotes(tuple(found))


@cache
def fix_ids(stage: str) -> frozenset[str]:
    """The ids of the fix rules of a stage of the rule catalog (misfires and noise left out)."""
    return frozenset(rule.id for rule in rules_for_stage(stage))


def with_fixes(rules: Iterable[str], stage: str) -> frozenset[str]:
    """`rules` plus every fix of `stage`: how a stage treats an item a quote names."""
    return frozenset(rules) | fix_ids(stage)
