"""Paraphrasing construction stages, a simulated-world option (`lm.<role>.paraphrase=true`).

A real model rarely writes a memory in the words of the turn: it changes date formats ("7 June 2022"
-> "June 7th, 2022" or "2022-06-07"), uses synonyms ("lives in" -> "resides in") and reorders clauses
("... on 7 June 2022." -> "On 7 June 2022, ..."). With the option on, the stand-in's construction
stages (Mem0 `extract` / `decide`, EverMemOS `write_events` / `write_episode`) write their canonical
fact sentences paraphrased this way, deterministically (the variant is a hash of the sentence).

The world stays fair: every reader of the world (the answerer, the update decision, the sufficiency
check) understands a paraphrase as a real model would, because `canonical` maps every paraphrase back
to the sentence it came from (`canonical(paraphrase(s)) == s` for every canonical fact sentence) and
`pipeline.sim.grammar.parse_fact` reads through it. Nothing here rewards a format only one method
writes: the paraphrases are what attribution has to see through.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from memtrace_loop.pipeline.sim.dates import MONTHS

# canonical phrase -> paraphrase (each paraphrase is unique, so the map inverts)
SYNONYM_BY_PHRASE: Mapping[str, str] = MappingProxyType({
    " lives in ": " resides in ",
    " works at ": " is employed at ",
    " works as ": " is employed as ",
    " grew up in ": " was raised in ",
    " as a hobby.": " as a pastime.",
    " has a pet ": " owns a pet ",
})
PHRASE_BY_SYNONYM: Mapping[str, str] = MappingProxyType({v: k for k, v in SYNONYM_BY_PHRASE.items()})

_MONTH = "|".join(MONTHS)
_HUMAN = re.compile(rf"\b(\d{{1,2}}) ({_MONTH}) (\d{{4}})\b")
_ISO = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_US = re.compile(rf"\b({_MONTH}) (\d{{1,2}})(?:st|nd|rd|th), (\d{{4}})\b")
_TRAILING_DATE = re.compile(r"^(?P<body>.+) on (?P<date>\d{1,2} [A-Z][a-z]+ \d{4})\.$")
_LEADING_DATE = re.compile(r"^On (?P<date>\d{1,2} [A-Z][a-z]+ \d{4}), (?P<body>[A-Z].+)\.$")


def _ordinal(day: int) -> str:
    suffix = "th" if 10 <= day % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{day}{suffix}"


def _reformat_dates(text: str, variant: int) -> str:
    """Human dates ('7 June 2022') written as 'June 7th, 2022' (variant 1) or '2022-06-07' (variant 2)."""
    if variant == 0:
        return text

    def swap(match: re.Match[str]) -> str:
        day, month, year = int(match.group(1)), match.group(2), match.group(3)
        if variant == 1:
            return f"{month} {_ordinal(day)}, {year}"
        return f"{year}-{MONTHS.index(month) + 1:02d}-{day:02d}"

    return _HUMAN.sub(swap, text)


def paraphrase_sentence(sentence: str) -> str:
    """One canonical sentence in other words: synonyms, maybe its date first, maybe another date format."""
    key = zlib.crc32(sentence.encode())
    text = sentence
    for phrase, synonym in SYNONYM_BY_PHRASE.items():
        text = text.replace(phrase, synonym)
    trailing = _TRAILING_DATE.match(text)
    if trailing and key % 2:
        body = trailing.group("body")
        text = f"On {trailing.group('date')}, {body[0].upper()}{body[1:]}."
    return _reformat_dates(text, (key // 2) % 3)


def canonical(text: str) -> str:
    """The canonical form of a (possibly paraphrased) sentence: human dates, date last, canonical phrases."""
    text = _ISO.sub(lambda m: f"{int(m.group(3))} {MONTHS[int(m.group(2)) - 1]} {m.group(1)}", text.strip())
    text = _US.sub(lambda m: f"{int(m.group(2))} {m.group(1)} {m.group(3)}", text)
    leading = _LEADING_DATE.match(text)
    if leading:
        text = f"{leading.group('body')} on {leading.group('date')}."
    for synonym, phrase in PHRASE_BY_SYNONYM.items():
        text = text.replace(synonym, phrase)
    return text


def paraphrase_text(text: str, is_fact: Callable[[str], bool]) -> str:
    """Every canonical fact sentence of `text` paraphrased (other sentences only get synonyms)."""
    sentences = re.split(r"(?<=\.) (?=[A-Z])", text.strip())
    out = []
    for sentence in sentences:
        if is_fact(sentence):
            out.append(paraphrase_sentence(sentence))
        else:
            for phrase, synonym in SYNONYM_BY_PHRASE.items():
                sentence = sentence.replace(phrase, synonym)
            out.append(sentence)
    return " ".join(out)


def paraphrasing(handler: Callable[[Any], dict[str, Any]], is_fact: Callable[[str], bool]) -> Callable[..., Any]:
    """A construction handler whose written texts (facts, action texts, event texts, narratives) are
    paraphrased; everything else it returns is unchanged."""

    def wrapped(request: Any) -> dict[str, Any]:
        values = dict(handler(request))
        if "facts" in values:
            values["facts"] = [paraphrase_text(f, is_fact) for f in values["facts"]]
        for field in ("actions", "events"):
            if field in values:
                values[field] = [
                    {**item, "text": paraphrase_text(str(item.get("text") or ""), is_fact)}
                    if isinstance(item, dict) and item.get("text") else item
                    for item in values[field]
                ]
        if "narrative" in values:
            values["narrative"] = paraphrase_text(str(values["narrative"]), is_fact)
        return values

    return wrapped
