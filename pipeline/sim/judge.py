"""The simulated judge: a deterministic, generous CORRECT/WRONG decision.

`is_correct(question, gold, prediction)` is CORRECT when (nearly) all content tokens of the gold
answer occur in the prediction, after normalising case, punctuation, stop words, simple plurals and
dates (so "6 May 2023" equals "May 6th, 2023"). Abstention golds ("Not mentioned in the
conversation", LoCoMo category 5) are CORRECT only for abstaining predictions, and an abstaining
prediction is WRONG for any other gold. Yes/no golds need the same polarity. It reads no rules: the
judge stage has no tunable competence in the simulated world.
"""

from __future__ import annotations

import re

from memtrace_loop.pipeline.sim.dates import date_token, find_dates

ABSTENTION = re.compile(
    r"\b(?:not mentioned|never mentioned|no mention|not (?:stated|specified|discussed|said|known)|"
    r"no information|(?:is|are) unknown|cannot be (?:determined|answered)|can't be determined|"
    r"not answerable|does not say|doesn't say|not in the conversation)\b",
    re.IGNORECASE,
)
_STOPWORD_TEXT = """
a an the and or of to in on at by for with from as is are was were be been being it its this that these
those he she they them his her their him i me my we our you your did do does has have had about into than
then so very just also there here which who whom what when where why how will would can could should may
might s
"""
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())
_TOKEN = re.compile(r"[a-z0-9]+")


def is_abstention(text: str) -> bool:
    return bool(ABSTENTION.search(text))


def _stem(token: str) -> str:
    if len(token) > 4 and token.endswith("ies"):
        return token[:-3] + "y"
    if len(token) > 3 and token.endswith("s") and not token.endswith("ss"):
        return token[:-1]
    return token


def content_tokens(text: str) -> list[str]:
    """Lowercased, stemmed tokens without stop words; each written date becomes one token."""
    pieces: list[str] = []
    last = 0
    for start, end, day in find_dates(text):
        pieces.extend((text[last:start], f" {date_token(day)} "))
        last = end
    pieces.append(text[last:])
    tokens = _TOKEN.findall(" ".join(pieces).lower().replace("'s ", " "))
    return [_stem(t) for t in tokens if t not in _STOPWORDS]


def is_correct(question: str, gold: str, prediction: str) -> bool:
    gold, prediction = str(gold).strip(), str(prediction).strip()
    if is_abstention(gold):
        return is_abstention(prediction)
    if not prediction or is_abstention(prediction):
        return False
    predicted = content_tokens(prediction)
    wanted = content_tokens(gold)
    if not wanted:
        return gold.lower() == prediction.lower()
    if wanted in (["yes"], ["no"]):
        polar = [t for t in predicted if t in ("yes", "no")]
        return bool(polar) and polar[0] == wanted[0]
    present = set(predicted)
    missing = sum(1 for token in set(wanted) if token not in present)
    return missing <= len(set(wanted)) // 5
