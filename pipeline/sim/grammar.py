"""The one template table shared by the generator and the stand-in LM, so they cannot drift.

Three kinds of templates, each a string with `{slot}`s that is both *filled* (by the generator, or
when the stand-in writes a memory) and *compiled* into a full-match regex (when the stand-in reads):

- `TURN_FORMS`: first-person sentences a speaker says, per fact kind ("I went hiking at {place}
  {when}!"); `read_sentence` turns one into `Fact`s, honouring the extraction rules;
- `FACT_FORMS`: the canonical memory sentences ("Alice went hiking at Mount Rainier on 6 May 2023.");
  `Fact.render` writes them and `parse_fact` reads them back;
- `QUESTION_FORMS`: the question shapes; `parse_question` reads them into a `Query`.

Slots over closed classes alternate over the word lists of `pipeline.sim.vocab`, so real-world text
rarely matches by accident (the stand-in then falls back). This module does no I/O and no randomness.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import date
from functools import cache
from types import MappingProxyType

from memtrace_loop.pipeline.sim import vocab
from memtrace_loop.pipeline.sim.dates import MONTHS, RELATIVE_PATTERN, human, parse_date, resolve_relative
from memtrace_loop.pipeline.sim.paraphrase import canonical


def _alt(words: tuple[str, ...] | list[str]) -> str:
    return "(?:" + "|".join(re.escape(w) for w in sorted(set(words), key=len, reverse=True)) + ")"


ACTIVITY_BY_PAST = {a.past: a for a in vocab.ACTIVITIES}
ACTIVITY_BY_BASE = {a.base: a for a in vocab.ACTIVITIES}
_PLACES = tuple(p for a in vocab.ACTIVITIES for p in a.places)
_NAME = r"[A-Z][a-z]+(?:-[A-Z][a-z]+)?"
SLOT_PATTERNS: dict[str, str] = {
    "when": RELATIVE_PATTERN,
    "When": RELATIVE_PATTERN,
    "past": _alt([a.past for a in vocab.ACTIVITIES]),
    "base": _alt([a.base for a in vocab.ACTIVITIES]),
    "prep": "(?:at|on|in)",
    "place": _alt(_PLACES),
    "rel": _alt(vocab.RELATIONS),
    "name": _NAME,
    "owner": _NAME,
    "subject": _NAME,
    "other": _NAME,
    "who": _NAME,  # widened to "Alice's sister Carol" in question regexes
    "city": _alt(vocab.CITIES),
    "company": _alt(vocab.COMPANIES),
    "home": _alt(vocab.HOMETOWNS),
    "job": _alt(vocab.JOBS),
    "hobby": _alt(vocab.HOBBIES),
    "animal": _alt(vocab.ANIMALS),
    "pet": _alt(vocab.PET_NAMES),
    "thing": _alt([p.thing for p in vocab.PREFS]),
    "verb": "(?:loves|dislikes)",
    "a": "(?:an|a)",
    "date": r"\d{1,2} (?:" + "|".join(MONTHS) + r") \d{4}",
    "occasion": r".+?",
}
_SLOT = re.compile(r"\{(\w+)\}")


def article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


def fill(template: str, **values: str) -> str:
    """Fill a template; `{a}` becomes the article of the slot right after it."""
    template = re.sub(r"\{a\} \{(\w+)\}", lambda m: article(values[m.group(1)]) + " {" + m.group(1) + "}", template)
    return template.format(**values)


@cache
def compile_template(template: str) -> re.Pattern[str]:
    """The full-match regex of a template; every slot becomes a named group."""
    parts: list[str] = []
    last = 0
    for match in _SLOT.finditer(template):
        parts.append(re.escape(template[last : match.start()]))
        parts.append(f"(?P<{match.group(1)}>{SLOT_PATTERNS[match.group(1)]})")
        last = match.end()
    parts.append(re.escape(template[last:]))
    return re.compile("".join(parts))


# ---------------------------------------------------------------------------------------------- facts

SINGLE_VALUED = frozenset({"lives_in", "works_at", "job", "hometown"})


@dataclass(frozen=True)
class Fact:
    """One canonical fact. `key` narrows the slot (event: activity base; relation: rel; pref:
    category); `extra` is the pet's animal or the preference verb; `owner`/`rel` mark a third
    party ("Carol (Alice's sister)")."""

    subject: str
    family: str
    value: str
    key: str = ""
    date: date | None = None
    extra: str = ""
    owner: str | None = None
    rel: str | None = None

    @property
    def slot(self) -> tuple[str, str, str]:
        return (self.subject, self.family, self.key)

    def render(self) -> str:
        subject = self.subject if not (self.owner and self.rel) else f"{self.subject} ({self.owner}'s {self.rel})"
        values = {"subject": subject, "value": self.value}
        form = self.family
        if self.family == "event":
            activity = ACTIVITY_BY_BASE[self.key]
            values.update(past=activity.past, prep=activity.prep, place=self.value)
            if self.date is not None:
                form, values["date"] = "event_dated", human(self.date)
        elif self.family == "relation":
            values.update(rel=self.key, name=self.value)
        elif self.family == "pet":
            values.update(animal=self.extra, pet=self.value)
        elif self.family == "pref":
            values.update(verb=self.extra, thing=self.value)
        template = FACT_FORMS[form]
        return fill(template, **{k: v for k, v in values.items() if "{" + k + "}" in template})

    def without_date(self) -> Fact:
        return replace(self, date=None)


_SUBJECT_FULL = rf"(?P<subject>{_NAME})(?: \((?P<owner>{_NAME})'s (?P<orel>{SLOT_PATTERNS['rel']})\))?"
FACT_FORMS: dict[str, str] = {
    "event_dated": "{subject} {past} {prep} {place} on {date}.",
    "event": "{subject} {past} {prep} {place}.",
    "relation": "{subject} has {a} {rel} named {name}.",
    "pet": "{subject} has a pet {animal} named {pet}.",
    "lives_in": "{subject} lives in {city}.",
    "works_at": "{subject} works at {company}.",
    "job": "{subject} works as {a} {job}.",
    "hometown": "{subject} grew up in {home}.",
    "hobby": "{subject} enjoys {hobby} as a hobby.",
    "pref": "{subject} {verb} {thing}.",
}
_VALUE_SLOT = {"lives_in": "city", "works_at": "company", "job": "job", "hometown": "home", "hobby": "hobby"}
for _family, _slot in _VALUE_SLOT.items():
    FACT_FORMS[_family] = FACT_FORMS[_family].replace("{" + _slot + "}", "{value}")


@cache
def _fact_regex(form: str) -> re.Pattern[str]:
    template = FACT_FORMS[form]
    family = "event" if form == "event_dated" else form
    if family in _VALUE_SLOT:
        template = template.replace("{value}", "{" + _VALUE_SLOT[family] + "}")
    pattern = compile_template(template).pattern.replace(f"(?P<subject>{SLOT_PATTERNS['subject']})", _SUBJECT_FULL, 1)
    return re.compile(pattern)


def _fact_from_match(form: str, g: dict[str, str | None]) -> Fact:
    family = "event" if form == "event_dated" else form
    subject, owner, rel = g["subject"] or "", g.get("owner"), g.get("orel")
    if family == "event":
        activity = ACTIVITY_BY_PAST[g["past"] or ""]
        when = parse_date(day) if (day := g.get("date")) else None
        return Fact(subject, "event", g["place"] or "", key=activity.base, date=when, owner=owner, rel=rel)
    if family == "relation":
        return Fact(subject, "relation", g["name"] or "", key=g["rel"] or "", owner=owner, rel=rel)
    if family == "pet":
        return Fact(subject, "pet", g["pet"] or "", extra=g["animal"] or "", owner=owner, rel=rel)
    if family == "pref":
        item = next(p for p in vocab.PREFS if p.thing == g["thing"])
        return Fact(subject, "pref", item.thing, key=item.category, extra=g["verb"] or "", owner=owner, rel=rel)
    return Fact(subject, family, g[_VALUE_SLOT[family]] or "", owner=owner, rel=rel)


def parse_fact(text: str) -> Fact | None:
    """Read a canonical memory sentence back into a `Fact` (None if it is not one)."""
    text = text.strip()
    for candidate in dict.fromkeys((text, canonical(text))):  # a paraphrase reads as what it paraphrases
        for form in FACT_FORMS:
            match = _fact_regex(form).fullmatch(candidate)
            if match:
                return _fact_from_match(form, match.groupdict())
    return None


# ---------------------------------------------------------------------------------------------- turns


@dataclass(frozen=True)
class TurnForm:
    kind: str
    text: str


TURN_FORMS: tuple[TurnForm, ...] = (
    TurnForm("event", "I {past} {prep} {place} {when}!"),
    TurnForm("event", "{When} I {past} {prep} {place}."),
    TurnForm("event", "I finally {past} {prep} {place} {when}, it was incredible."),
    TurnForm("relation", "I have {a} {rel} named {name}, we're really close."),
    TurnForm("relation", "My {rel}'s name is {name}, we talk every day."),
    TurnForm("tp_lives", "My {rel} {name} just moved to {city}."),
    TurnForm("tp_lives", "My {rel} {name} lives in {city} now."),
    TurnForm("tp_job", "My {rel} {name} works as {a} {job}."),
    TurnForm("tp_job", "My {rel} {name} just got a job as {a} {job}."),
    TurnForm("bare_lives", "{name} just moved to {city}, I'm going to miss them."),
    TurnForm("bare_lives", "{name} lives in {city} now, which is a bit far from me."),
    TurnForm("bare_job", "{name} started working as {a} {job}, so proud of them."),
    TurnForm("bare_job", "{name} works as {a} {job} these days."),
    TurnForm("works_at", "I've been working at {company} for a few years now."),
    TurnForm("works_at", "I work at {company}, it keeps me busy."),
    TurnForm("works_at_new", "Big news, I just started a new job at {company}!"),
    TurnForm("works_at_new", "I switched jobs, I work at {company} now."),
    TurnForm("lives_in", "I've lived in {city} for about five years."),
    TurnForm("lives_in", "I live in {city}, it's a great place."),
    TurnForm("lives_in_new", "I just moved to {city}!"),
    TurnForm("lives_in_new", "We finally moved, I live in {city} now."),
    TurnForm("hometown", "I grew up in {home}."),
    TurnForm("hometown", "I'm originally from {home}."),
    TurnForm("job", "I work as {a} {job}."),
    TurnForm("job", "I've been {a} {job} for a while now."),
    TurnForm("hobby", "I've gotten really into {hobby} lately."),
    TurnForm("hobby", "My favorite hobby is {hobby}."),
    TurnForm("hobby_new", "I just picked up {hobby} as a new hobby!"),
    TurnForm("hobby_new", "I started doing {hobby} too, it's so fun."),
    TurnForm("pet", "I have {a} {animal} named {pet}."),
    TurnForm("pet", "My {animal} {pet} is the best company."),
    TurnForm("pet_new", "We just adopted {a} {animal} named {pet}!"),
    TurnForm("likes", "I'm a huge fan of {thing}."),
    TurnForm("likes", "I really love {thing}."),
    TurnForm("dislikes", "I can't stand {thing}."),
    TurnForm("dislikes", "Honestly, I really dislike {thing}."),
)
FORMS_BY_KIND: Mapping[str, tuple[TurnForm, ...]] = MappingProxyType(
    {kind: tuple(f for f in TURN_FORMS if f.kind == kind) for kind in dict.fromkeys(f.kind for f in TURN_FORMS)}
)
SMALL_TALK_FORMS: tuple[str, ...] = tuple(dict.fromkeys(vocab.SMALL_TALK + vocab.REACTIONS + vocab.OPENERS))
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def split_sentences(text: str) -> list[str]:
    return [s for s in _SENTENCE_END.split(text.strip()) if s]


def is_small_talk(sentence: str) -> bool:
    return any(compile_template(form).fullmatch(sentence) for form in SMALL_TALK_FORMS)


def _facts_of(kind: str, g: dict[str, str], speaker: str, day: date | None, rules: frozenset[str]) -> list[Fact]:
    third_party = "third_party" in rules
    if kind == "event":
        activity = ACTIVITY_BY_PAST[g["past"]]
        when = g.get("when") or g.get("When") or ""
        resolved = resolve_relative(when, day) if day and "resolve_dates" in rules else None
        return [Fact(speaker, "event", g["place"], key=activity.base, date=resolved)]
    if kind in ("relation", "tp_lives", "tp_job"):
        facts = [Fact(speaker, "relation", g["name"], key=g["rel"])]
        if third_party and kind != "relation":
            family, value = ("lives_in", g["city"]) if kind == "tp_lives" else ("job", g["job"])
            facts.append(Fact(g["name"], family, value, owner=speaker, rel=g["rel"]))
        return facts
    if kind in ("bare_lives", "bare_job"):
        family, value = ("lives_in", g["city"]) if kind == "bare_lives" else ("job", g["job"])
        return [Fact(g["name"], family, value)] if third_party else []
    if kind in ("pet", "pet_new"):
        return [Fact(speaker, "pet", g["pet"], extra=g["animal"])]
    if kind in ("likes", "dislikes"):
        item = next(p for p in vocab.PREFS if p.thing == g["thing"])
        verb = "loves" if kind == "likes" else "dislikes"
        return [Fact(speaker, "pref", item.thing, key=item.category, extra=verb)]
    family = kind.removesuffix("_new")
    slot = {"works_at": "company", "lives_in": "city", "hometown": "home", "job": "job", "hobby": "hobby"}[family]
    return [Fact(speaker, family, g[slot])]


def read_sentence(sentence: str, speaker: str, day: date | None, rules: frozenset[str]) -> list[Fact] | None:
    """The facts one sentence states under the given extraction rules ([] for small talk or for a
    fact the rules make the reader skip); None when the sentence is not in the grammar."""
    for form in TURN_FORMS:
        match = compile_template(form.text).fullmatch(sentence)
        if match:
            return _facts_of(form.kind, match.groupdict(), speaker, day, rules)
    return [] if is_small_talk(sentence) else None


# ---------------------------------------------------------------------------------------------- questions


@dataclass(frozen=True)
class Query:
    """A parsed question: `subject` is a speaker, or a third party when `name` is given; `rel`
    without `name` asks for a hop through a relation ("Alice's sister")."""

    kind: str
    subject: str
    rel: str | None = None
    name: str | None = None
    key: str = ""
    text: str = ""


_WHO = rf"(?P<who>{_NAME})(?:'s (?P<who_rel>{SLOT_PATTERNS['rel']})(?: (?P<who_name>{_NAME}))?)?"
QUESTION_FORMS: dict[str, str] = {
    "when_event": "When did {who} {base}?",
    "where_event": "Where did {who} {base}?",
    "lives_in": "Where does {who} live?",
    "works_at": "Where does {who} work?",
    "job": "What kind of work does {who} do?",
    "hometown": "Where did {who} grow up?",
    "hobbies": "What hobbies does {who} have?",
    "pet_name": "What is the name of {owner}'s {animal}?",
    "pets": "What pets does {who} have?",
    "rel_name": "What is the name of {owner}'s {rel}?",
    "would_enjoy": "Would {who} enjoy {occasion}?",
}


@cache
def _question_regex(kind: str) -> re.Pattern[str]:
    pattern = compile_template(QUESTION_FORMS[kind]).pattern.replace(f"(?P<who>{_NAME})", _WHO, 1)
    return re.compile(pattern)


def who_text(subject: str, rel: str | None = None, name: str | None = None) -> str:
    """How a question names its subject: 'Alice', "Alice's sister", "Alice's sister Carol"."""
    text = subject if rel is None else f"{subject}'s {rel}"
    return text if name is None else f"{text} {name}"


def parse_question(question: str) -> Query | None:
    question = question.strip()
    for kind in QUESTION_FORMS:
        match = _question_regex(kind).fullmatch(question)
        if not match:
            continue
        g = match.groupdict()
        if kind in ("pet_name", "rel_name"):
            return Query(kind, g["owner"], key=g.get("animal") or g.get("rel") or "", text=question)
        key = g.get("base") or g.get("occasion") or ""
        return Query(kind, g["who"], rel=g.get("who_rel"), name=g.get("who_name"), key=key, text=question)
    return None
