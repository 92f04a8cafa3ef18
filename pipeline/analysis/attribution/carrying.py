"""What it means for a text to carry a piece of information, and the few text cues attribution reads.

A text carries a target when it holds `coverage_needed(target)` of its `content_tokens` (months unified, ISO
dates spelled out, ordinals and plurals stripped). Pure text functions: no graphs, no LMs.

>>> sorted(content_tokens("Alice adopted two dogs on 2022-06-07"))
['2022', '7', 'adopted', 'alice', 'dog', 'june', 'two']
>>> content_tokens("June 7th, 2022") <= content_tokens("7 June 2022")
True
>>> coverage_needed(frozenset("abc")), coverage_needed(frozenset("abcdefgh"))
(3, 5)
>>> turn_text("[2 July 2022] Marco: Kofi started working as a teacher.")
'Kofi started working as a teacher.'
>>> people_in("My cousin Kofi lives in Tucson. Imani works there.")
['Kofi', 'Imani']
"""

from __future__ import annotations

import math
import re

from memtrace_loop.pipeline.backends.text import alnum_words

_STOPWORDS = frozenset(
    """a an the and or but of to in on at for with from by about as is are was were be been being am do does did
    doing have has had having i me my mine we our you your he him his she her it its they them their what which
    who whom whose when where why how that this these those there here not no yes so than then too very can
    could would should will just also any some all each both more most other into over under again once
    s t kind like likely one name named up down out off""".split()
)
_MONTH_NAMES = "january february march april may june july august september october november december".split()
_MONTHS = {**{m[:3]: m for m in _MONTH_NAMES}, **{m: m for m in _MONTH_NAMES}, "sept": "september"}
_RELATIVE = re.compile(
    r"\b(yesterday|today|tonight|last (?:week|weekend|month|year|night|monday|tuesday|wednesday|thursday|friday|"
    r"saturday|sunday)|(?:a|one|two|three|four|five|six|\d+) (?:days?|weeks?|months?|years?) ago|this (?:morning|week"
    r"|weekend|month))\b",
    re.IGNORECASE,
)
_DATE_LIKE = re.compile(r"\b(19|20)\d\d\b|\b(" + "|".join(_MONTHS) + r")\b", re.IGNORECASE)
_ABSTENTION = re.compile(
    r"\b(not mentioned|never mentioned|did not mention|no mention|no information|not enough information|"
    r"information provided is not enough|not answerable|unanswerable|cannot be answered)\b",
    re.IGNORECASE,
)
_RELATION_WORDS = (
    "sister|brother|cousin|friend|aunt|uncle|roommate|neighbou?r|coworker|colleague|boss|mom|dad|mother|father|"
    "wife|husband|partner|son|daughter|niece|nephew|grandma|grandpa"
)
# a person mentioned in a turn: "my cousin Kofi", "Kofi's", or a sentence that starts "Kofi works ..."
_PERSON = re.compile(
    rf"\b(?:{_RELATION_WORDS})\s+([A-Z][a-z]+)\b|\b([A-Z][a-z]+)'s\b|(?:^|[.!?]\s+)([A-Z][a-z]+)\s+(?:just\s+|now\s+|"
    r"recently\s+)?(?:is|was|works|worked|lives|lived|moved|started|got|has|had|loves|likes)\b"
)
_TURN_PREFIX = re.compile(r"^\[[^\]]*\]\s*[^:]{1,60}:\s*")


def turn_text(value: str) -> str:
    """What was said in a turn variable, without its `[date] Speaker:` prefix."""
    return _TURN_PREFIX.sub("", value, count=1)


_ISO_DATE = re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b")


def _spelled_dates(text: str) -> str:
    """ISO dates ("2022-06-07") written out ("7 june 2022"), so they compare with other date formats."""
    def spell(match: re.Match[str]) -> str:
        month = int(match.group(2))
        if not 1 <= month <= 12:
            return match.group(0)
        return f"{int(match.group(3))} {_MONTH_NAMES[month - 1]} {match.group(1)}"

    return _ISO_DATE.sub(spell, text)


def content_tokens(text: str) -> frozenset[str]:
    """Lowercase content words: no stopwords, months unified, ISO dates spelled out, ordinals and plurals
    stripped (so "7 June 2022", "June 7th, 2022" and "2022-06-07" share their tokens)."""
    tokens = set()
    for raw in alnum_words(_spelled_dates(text)):
        token = re.sub(r"^(\d+)(st|nd|rd|th)$", r"\1", raw)
        token = _MONTHS.get(token, token)
        if len(token) > 3 and token.endswith("s") and not token.endswith("ss"):
            token = token[:-1]
        if token not in _STOPWORDS and (len(token) > 1 or token.isdigit()):
            tokens.add(token)
    return frozenset(tokens)


def coverage_needed(target: frozenset[str]) -> int:
    """How many target tokens a text must hold to carry the target: all of a short one, 60% of a long one."""
    return len(target) if len(target) <= 3 else math.ceil(0.6 * len(target))


def is_date_like(text: str) -> bool:
    """Whether `text` names a year or a month (an answer to "when")."""
    return _DATE_LIKE.search(text) is not None


def relative_date(text: str) -> str | None:
    """The first relative date `text` gives ("last week", "two days ago"), or None."""
    found = _RELATIVE.search(text)
    return found.group(0) if found else None


def is_abstention(text: str) -> bool:
    """Whether `text` says the conversation does not hold the answer ("not mentioned", ...)."""
    return _ABSTENTION.search(text) is not None


def people_in(text: str) -> list[str]:
    """The people a turn's text names, in order ("my cousin Kofi", "Kofi's", "Kofi works ..."), months left out."""
    people = [next(g for g in groups if g) for groups in _PERSON.findall(text)]
    return [name for name in people if name.lower() not in _MONTHS]
