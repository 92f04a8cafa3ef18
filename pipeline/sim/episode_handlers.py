"""The stand-in's handlers for the episodic-memory stages (episodes with events; their rows: `stages.STAGES`).

- detect_boundary (`starts_new_episode`): a new episode starts when the session date changes, or when
  the new turn states a fact (anything the shared grammar reads as one) while the open episode already
  holds a fact turn: in the simulated world, one planted fact is one topic. No rules.
- write_events (`events`): reads every turn with the shared grammar, like the Mem0 extractor; without
  `event_dates` relative dates stay unresolved (the event's time is the day it was said), without
  `event_third_party` facts about other people are skipped. Sentences outside the grammar become one
  fallback event "<Speaker> said: <text>".
- write_episode (`title`, `narrative`): a title from the topics of the speakers' own facts and a
  narrative "On <date>, <facts>"; it never resolves relative dates and never retells what is said about
  other people, so it is never richer than the event log (the answer reads the events). No rules.
- check_sufficiency (`sufficient`): sufficient when the stand-in answerer, allowed to abstain, finds an
  answer in the retrieved episodes. No rules.
- expand_queries (`queries`): the question's content words as one keyword query; with `expand_related`,
  for a question about someone named only by relation ("Alice's sister"), also the question asked about
  each person a retrieved memory names in that relation ("Carol").

A double-quoted span in the instruction names information to keep (`pipeline.sim.hints`): write_events
reads a sentence it names with both fixes; expand_queries asks by name about a retrieved relation it names
(or whose person it mentions); check_sufficiency says "not sufficient" when a quote about the question or a
retrieved memory is missing from the retrieved episodes; detect_boundary and write_episode ignore quotes.

Handlers never raise on odd input and do no I/O. Pure functions of the request.
"""

from __future__ import annotations

import re
from datetime import date
from typing import Any

from memtrace_loop.pipeline.sim.dates import human, parse_date
from memtrace_loop.pipeline.sim.grammar import Fact, parse_fact, parse_question, read_sentence, split_sentences
from memtrace_loop.pipeline.sim.handlers import answer_question
from memtrace_loop.pipeline.sim.hints import NO_QUOTES, Quotes, quotes_in, with_fixes
from memtrace_loop.pipeline.sim.judge import content_tokens, is_abstention
from memtrace_loop.pipeline.sim.protocol import StageRequest, trim
from memtrace_loop.pipeline.sim.rules import rules_in

_TURN_LINE = re.compile(r"^\s*(?:\[(?P<date>[^\]]*)\]\s*)?(?P<speaker>[^:\n]{1,60}?)(?:\s+says)?:\s*(?P<text>.*)$")
_MEMORY_LINE = re.compile(r"^\s*Memory:\s*(?P<text>.*?)(?:\s+Time:\s*(?P<time>.*?))?\s*$")
_READ_ALL = frozenset({"resolve_dates", "third_party"})  # the grammar's reading rules, all on
_TOPIC = {
    "event": "outings",
    "relation": "family and friends",
    "pet": "pets",
    "pref": "likes and dislikes",
    "lives_in": "home",
    "works_at": "work",
    "job": "work",
    "hometown": "hometown",
    "hobby": "hobbies",
}


def _turns(text: str) -> list[tuple[str, date | None, str]]:
    """(speaker, date, what was said) of each rendered turn line."""
    found = []
    for line in text.splitlines():
        match = _TURN_LINE.match(line.strip())
        if match:
            found.append((match.group("speaker").strip(), parse_date(match.group("date") or ""), match.group("text")))
    return found


def _read(
    speaker: str, day: date | None, text: str, rules: frozenset[str],
    quotes: Quotes = NO_QUOTES, fixed: frozenset[str] = frozenset(),
) -> tuple[list[Fact], list[str]]:
    """The facts one turn states under `rules` (a sentence the `quotes` name: under `fixed`), and its
    sentences outside the grammar."""
    facts: list[Fact] = []
    unknown: list[str] = []
    for sentence in split_sentences(text.strip()):
        read = read_sentence(sentence, speaker, day, quotes.rules_for(sentence, rules, fixed))
        if read is None:
            unknown.append(sentence)
        else:
            facts.extend(read)
    return facts, unknown


# ---------------------------------------------------------------------------------------------- construction


def starts_new_episode(open_episode: str, new_turn: str) -> bool:
    """The stand-in's boundary decision (see the module docstring)."""
    previous, new = _turns(open_episode), _turns(new_turn)
    if not previous or not new:
        return False
    if new[0][1] is not None and previous[-1][1] is not None and new[0][1] != previous[-1][1]:
        return True
    return bool(_read(*new[0], _READ_ALL)[0]) and any(_read(*turn, _READ_ALL)[0] for turn in previous)


def _reading(rules: frozenset[str]) -> frozenset[str]:
    """The grammar's reading rules the write_events rules amount to."""
    pairs = (("event_dates", "resolve_dates"), ("event_third_party", "third_party"))
    return frozenset(grammar_rule for rule, grammar_rule in pairs if rule in rules)


def write_events(turns: str, rules: frozenset[str], quotes: Quotes = NO_QUOTES) -> list[dict[str, str]]:
    """The event log of an episode: one event per fact, each with its date (a sentence the `quotes`
    name is read with every write_events fix: `pipeline.sim.hints`)."""
    reading, fixed = _reading(rules), _reading(with_fixes(rules, "write_events"))
    events: dict[str, str] = {}
    for speaker, day, text in _turns(turns):
        said = human(day) if day else ""
        facts, unknown = _read(speaker, day, text, reading, quotes, fixed)
        for fact in facts:
            events.setdefault(fact.render(), human(fact.date) if fact.date else said)
        if unknown:
            events.setdefault(trim(f"{speaker} said: {' '.join(unknown)}"), said)
    return [{"text": text, "time": time} for text, time in events.items()]


def write_episode(turns: str) -> tuple[str, str]:
    """(title, narrative) of an episode (see the module docstring)."""
    lines = _turns(turns)
    day = next((d for _, d, _ in lines if d is not None), None)
    facts: list[Fact] = []
    unknown: list[str] = []
    for speaker, when, text in lines:
        read, rest = _read(speaker, when, text, frozenset())
        facts.extend(f for f in read if f.owner is None)
        if rest:
            unknown.append(trim(f"{speaker} said: {' '.join(rest)}"))
    topics: dict[str, list[str]] = {}
    for fact in facts:
        topics.setdefault(fact.subject, [])
        if _TOPIC[fact.family] not in topics[fact.subject]:
            topics[fact.subject].append(_TOPIC[fact.family])
    if topics:
        title = "; ".join(f"{subject}: {', '.join(words)}" for subject, words in topics.items())
    elif unknown:
        title = trim(unknown[0], 60)
    else:
        title = "Small talk"
    told = [*dict.fromkeys(f.render() for f in facts), *unknown]
    opening = f"On {human(day)}," if day else "In this episode,"
    narrative = trim(f"{opening} {' '.join(told)}" if told else f"{opening} the speakers made small talk.", 1200)
    return title, narrative


# ---------------------------------------------------------------------------------------------- retrieval


def is_sufficient(question: str, retrieved: str, quotes: Quotes = NO_QUOTES) -> bool:
    """True when the stand-in answerer, allowed to abstain, answers from the retrieved episodes and no
    quote about the question or a retrieved memory is missing from them (`Quotes.lacking`)."""
    answered = not is_abstention(answer_question(retrieved, question, frozenset({"abstain"})))
    if not answered or not quotes:
        return answered
    texts = [question, *(match.group("text") for match in map(_MEMORY_LINE.match, retrieved.splitlines()) if match)]
    return not quotes.lacking(texts, retrieved)


def _memory_facts(retrieved: str) -> list[tuple[str, Fact]]:
    """(memory text, fact) of the retrieved memory lines that state a fact."""
    facts = []
    for line in retrieved.splitlines():
        match = _MEMORY_LINE.match(line)
        fact = parse_fact(match.group("text")) if match else None
        if match and fact is not None:
            facts.append((match.group("text"), fact))
    return facts


def expand(question: str, retrieved: str, rules: frozenset[str], quotes: Quotes = NO_QUOTES) -> list[str]:
    """The stand-in's extra queries (see the module docstring; without `expand_related`, a relation the
    `quotes` name, or whose person they mention, is asked about by name all the same)."""
    queries = [" ".join(dict.fromkeys(content_tokens(question)))]
    query = parse_question(question)
    related = "expand_related" in rules
    if (related or quotes) and query is not None and query.rel and not query.name:
        who = f"{query.subject}'s {query.rel}"
        for text, fact in _memory_facts(retrieved):
            named = related or quotes.name(text) or quotes.mention(fact.value)
            if named and fact.family == "relation" and fact.subject == query.subject and fact.key == query.rel:
                queries.append(question.replace(who, fact.value, 1))
    return [q for q in dict.fromkeys(queries) if q.strip()]


# ---------------------------------------------------------------------------------------------- handlers


def boundary_handler(request: StageRequest) -> dict[str, Any]:
    inputs = request.inputs
    return {"starts_new_episode": starts_new_episode(inputs.get("open_episode", ""), inputs.get("new_turn", ""))}


def events_handler(request: StageRequest) -> dict[str, Any]:
    instruction = request.instruction
    return {"events": write_events(request.inputs.get("turns", ""), rules_in(instruction), quotes_in(instruction))}


def episode_handler(request: StageRequest) -> dict[str, Any]:
    title, narrative = write_episode(request.inputs.get("turns", ""))
    return {"title": title, "narrative": narrative}


def sufficiency_handler(request: StageRequest) -> dict[str, Any]:
    inputs = request.inputs
    question, retrieved = inputs.get("question", ""), inputs.get("retrieved_episodes", "")
    return {"sufficient": is_sufficient(question, retrieved, quotes_in(request.instruction))}


def expand_handler(request: StageRequest) -> dict[str, Any]:
    inputs = request.inputs
    rules, quotes = rules_in(request.instruction), quotes_in(request.instruction)
    return {"queries": expand(inputs.get("question", ""), inputs.get("retrieved_episodes", ""), rules, quotes)}
