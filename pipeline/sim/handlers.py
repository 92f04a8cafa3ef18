"""The stage handlers of the stand-in LM: extract, decide, answer and judge.

Each handler takes a parsed `StageRequest` and returns the output values. Its competence depends on
the rules its instruction states (`pipeline.sim.rules.rules_in`):

- extract (`facts`): reads the turn with the shared grammar; without `resolve_dates` it drops date
  expressions, without `third_party` it skips facts whose subject is not the speaker; sentences
  outside the grammar become one fallback fact "<Speaker> said: <text>".
- decide (`actions`): same value -> NONE (UPDATE if the new fact adds a date or an owner); a
  single-valued slot with a new value -> UPDATE with `newest_wins`, else NONE (the new value is lost);
  a multi-valued slot with another value -> ADD with `keep_compatible`, else DELETE the old memory
  and ADD the new one.
- answer (`answer`): parses the question and the context; "when" questions get the memory's date only
  with `use_dates`; when no memory is about the asked subject it says "Not mentioned in the
  conversation" only with `abstain` (and not `best_guess`, which overrides it), otherwise it answers
  from the best-overlapping memory. With the misfire `one_answer` a list question (hobbies, pets) gets
  only the newest item.
- judge (`label`): `pipeline.sim.judge.is_correct`, no rules.

A double-quoted span in the instruction names information to keep (`pipeline.sim.hints`): a sentence,
new fact, touched memory or context line it names is handled with every fix of the stage; the rest as above.

Which output fields dispatch to which handler is declared once, in the stage table (`pipeline.sim.stages`).

Handlers never raise on odd input: unknown text falls back to word overlap. They do no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date
from typing import Any

from memtrace_loop.pipeline.sim import vocab
from memtrace_loop.pipeline.sim.dates import human, parse_date
from memtrace_loop.pipeline.sim.grammar import (
    SINGLE_VALUED,
    Fact,
    Query,
    article,
    parse_fact,
    parse_question,
    read_sentence,
    split_sentences,
)
from memtrace_loop.pipeline.sim.hints import NO_QUOTES, Quotes, quotes_in, with_fixes
from memtrace_loop.pipeline.sim.judge import content_tokens, is_correct
from memtrace_loop.pipeline.sim.protocol import StageRequest, decode_list, trim
from memtrace_loop.pipeline.sim.rules import rules_in

NOT_MENTIONED = "Not mentioned in the conversation."
_TURN_LINE = re.compile(
    r"^\s*(?:\[(?P<date>[^\]]*)\]\s*)?(?P<speaker>[^:\n]{1,60}?)(?:\s+says)?:\s*(?P<text>.*)$", re.S
)
_MEMORY_LINE = re.compile(r"^\s*\[(?P<id>[^\]]+)\]\s*(?P<text>.*?)\s*$")
_CONTEXT_TIME = re.compile(r"^(?P<text>.*)\s(?:Time|Timestamp|Date):\s*(?P<time>.*?)\s*$", re.S)
_QUESTION_FAMILY = {
    "when_event": "event",
    "where_event": "event",
    "lives_in": "lives_in",
    "works_at": "works_at",
    "job": "job",
    "hometown": "hometown",
    "hobbies": "hobby",
    "pets": "pet",
    "pet_name": "pet",
    "rel_name": "relation",
    "would_enjoy": "pref",
}


# ---------------------------------------------------------------------------------------------- extract


def extract_facts(turn: str, rules: frozenset[str], quotes: Quotes = NO_QUOTES) -> list[str]:
    """The fact sentences the stand-in extracts from one rendered turn (a sentence the `quotes` name is
    read with every extract fix: `pipeline.sim.hints`)."""
    match = _TURN_LINE.match(turn.strip())
    if not match:
        return [trim(turn)] if turn.strip() else []
    speaker, text = match.group("speaker").strip(), match.group("text").strip()
    day = parse_date(match.group("date") or "")
    facts: list[str] = []
    unknown: list[str] = []
    fixed = with_fixes(rules, "extract")
    for sentence in split_sentences(text):
        read = read_sentence(sentence, speaker, day, quotes.rules_for(sentence, rules, fixed))
        if read is None:
            unknown.append(sentence)
        else:
            facts.extend(f.render() for f in read)
    if unknown:
        facts.append(trim(f"{speaker} said: {' '.join(unknown)}"))
    return list(dict.fromkeys(facts))


def extract_handler(request: StageRequest) -> dict[str, Any]:
    instruction = request.instruction
    return {"facts": extract_facts(request.inputs.get("turn", ""), rules_in(instruction), quotes_in(instruction))}


# ---------------------------------------------------------------------------------------------- decide


def _adds_detail(new: Fact, old: Fact) -> bool:
    return (new.date is not None and old.date is None) or (new.owner is not None and old.owner is None)


Memory = tuple[str, str, Fact | None]  # (id, text, the fact it states)


def _memories(existing: str) -> list[Memory]:
    memories: list[Memory] = []
    for line in existing.splitlines():
        match = _MEMORY_LINE.match(line)
        if match:
            memories.append((match.group("id"), match.group("text"), parse_fact(match.group("text"))))
    return memories


def _decide(text: str, memories: list[Memory], rules: frozenset[str]) -> list[dict[str, Any]]:
    """The actions for one new fact."""
    fact = parse_fact(text)
    if fact is None:
        same = next((m for m in memories if m[1].strip().lower() == text.lower()), None)
        return [{"event": "NONE", "id": same[0], "text": ""} if same else {"event": "ADD", "text": text}]
    slot_matches = [m for m in memories if m[2] is not None and m[2].slot == fact.slot]
    same_value = next((m for m in slot_matches if m[2] is not None and m[2].value == fact.value), None)
    if same_value is not None:
        old = same_value[2]
        detail = old is not None and _adds_detail(fact, old)
        return [{"event": "UPDATE" if detail else "NONE", "id": same_value[0], "text": text if detail else ""}]
    if not slot_matches:
        return [{"event": "ADD", "text": text}]
    if fact.family in SINGLE_VALUED:  # single-valued: a contradiction
        if "newest_wins" in rules:
            return [{"event": "UPDATE", "id": slot_matches[0][0], "text": text}]
        return [{"event": "NONE", "id": slot_matches[0][0], "text": ""}]
    # multi-valued: the new fact can also be true
    delete = [] if "keep_compatible" in rules else [{"event": "DELETE", "id": slot_matches[0][0], "text": ""}]
    return [*delete, {"event": "ADD", "text": text}]


def _named(quotes: Quotes, text: str, actions: list[dict[str, Any]], memories: list[Memory]) -> bool:
    """True when the quotes name the new fact or a memory its actions touch."""
    touched = {str(a["id"]) for a in actions if a.get("id") is not None}
    return quotes.name(text) or any(quotes.name(m[1]) for m in memories if m[0] in touched)


def decide_actions(
    existing: str, new_facts: list[str], rules: frozenset[str], quotes: Quotes = NO_QUOTES
) -> list[dict[str, Any]]:
    """The memory actions for the new facts against the listed existing memories (a fact that the
    `quotes` name, or whose decision touches a memory they name, is decided with every decide fix)."""
    memories = _memories(existing)
    fixed = with_fixes(rules, "decide")
    actions: list[dict[str, Any]] = []
    for text in (str(f).strip() for f in new_facts):
        if not text:
            continue
        chosen = _decide(text, memories, rules)
        if quotes and _named(quotes, text, chosen, memories):
            chosen = _decide(text, memories, fixed)
        actions.extend(chosen)
    return actions


def decide_handler(request: StageRequest) -> dict[str, Any]:
    rules = rules_in(request.instruction)
    new_facts = decode_list(request.inputs.get("new_facts", ""))
    existing = request.inputs.get("existing_memories", "")
    return {"actions": decide_actions(existing, new_facts, rules, quotes_in(request.instruction))}


# ---------------------------------------------------------------------------------------------- answer


@dataclass(frozen=True)
class ContextItem:
    text: str
    day: date | None
    facts: tuple[Fact, ...]
    rank: int


def parse_context(context: str, rules: frozenset[str]) -> list[ContextItem]:
    """Context lines as items; canonical memories are parsed, raw turns are read with the grammar
    (third parties always; relative dates resolved only with `use_dates`)."""
    reader_rules = frozenset({"third_party"} | ({"resolve_dates"} if "use_dates" in rules else set()))
    items: list[ContextItem] = []
    for line in context.splitlines():
        line = line.strip()
        if not line:
            continue
        line = line.removeprefix("Memory:").strip()
        text, day = line, None
        timed = _CONTEXT_TIME.match(line)
        if timed and parse_date(timed.group("time")):
            text, day = timed.group("text").strip(), parse_date(timed.group("time"))
        fact = parse_fact(text)
        facts: list[Fact] = [fact] if fact else []
        turn = None if fact else _TURN_LINE.match(text)
        if turn:
            day = day or parse_date(turn.group("date") or "")
            speaker = turn.group("speaker").strip().removeprefix("Speaker ").strip()
            for sentence in split_sentences(turn.group("text")):
                facts.extend(read_sentence(sentence, speaker, day, reader_rules) or [])
        items.append(ContextItem(text, day, tuple(facts), len(items)))
    return items


def _matches(query: Query, fact: Fact, items: list[ContextItem], any_subject: bool) -> bool:
    if fact.family != _QUESTION_FAMILY[query.kind]:
        return False
    if query.kind in ("when_event", "where_event", "rel_name") and fact.key != query.key:
        return False
    if query.kind == "pet_name" and fact.extra != query.key:
        return False
    if query.kind == "would_enjoy":
        item = next((p for p in vocab.PREFS if p.thing == fact.value), None)
        if item is None or item.keyword.lower() not in query.text.lower():
            return False
    if any_subject:
        return True
    if query.name:
        return fact.subject == query.name
    if query.rel and query.kind != "rel_name":
        if fact.owner == query.subject and fact.rel == query.rel:
            return True
        names = {
            f.value
            for i in items
            for f in i.facts
            if f.family == "relation" and f.subject == query.subject and f.key == query.rel
        }
        return fact.subject in names
    return fact.subject == query.subject


def _lookup(query: Query, items: list[ContextItem], any_subject: bool = False) -> list[tuple[Fact, ContextItem]]:
    found = [(f, i) for i in items for f in i.facts if _matches(query, f, items, any_subject)]
    return sorted(found, key=lambda pair: (pair[1].day or date.min, -pair[1].rank))


def _compose(query: Query, found: list[tuple[Fact, ContextItem]], rules: frozenset[str]) -> str:
    fact, item = found[-1]  # the newest
    if query.kind == "when_event":
        if "use_dates" not in rules:
            return fact.without_date().render()
        dated = [f for f, i in found if f.date is not None and i.day == item.day]  # an explicit date beats the
        when = (dated[-1].date if dated else None) or fact.date or item.day  # day a same-day memory was said
        return human(when) if when else fact.render()
    if query.kind in ("hobbies", "pets") and "one_answer" in rules:  # the misfire: one item of a list
        found = found[-1:]
    if query.kind == "hobbies":
        return " and ".join(dict.fromkeys(f.value for f, _ in found))
    if query.kind == "pets":
        return " and ".join(dict.fromkeys(f"{article(f.extra)} {f.extra} named {f.value}" for f, _ in found))
    if query.kind == "would_enjoy":
        return ("Yes, " if fact.extra == "loves" else "No, ") + fact.render()
    return fact.value


def abstains(rules: frozenset[str]) -> bool:
    """True when the answer stage may say "not mentioned": `abstain` stated and the misfire
    `best_guess` ("never say you do not know") not stated."""
    return "abstain" in rules and "best_guess" not in rules


def _overlap_answer(items: list[ContextItem], question: str, rules: frozenset[str]) -> str:
    wanted = set(content_tokens(question))
    best, best_score = None, 0
    for item in items:
        score = len(wanted & set(content_tokens(item.text)))
        if score > best_score:
            best, best_score = item, score
    if abstains(rules) and (best is None or best_score < min(2, len(wanted))):
        return NOT_MENTIONED
    if best is None:
        return trim(items[0].text) if items else ""
    return trim(best.text)


def _line_text(line: str) -> str:
    """A context line without its `Memory:` label and `Time: ...` stamp (what a quote must name)."""
    line = line.strip().removeprefix("Memory:").strip()
    timed = _CONTEXT_TIME.match(line)
    return timed.group("text").strip() if timed and parse_date(timed.group("time")) else line


def _folded(text: str) -> str:
    return " ".join(text.split()).lower()


def answer_question(context: str, question: str, rules: frozenset[str], quotes: Quotes = NO_QUOTES) -> str:
    """The stand-in's short answer to `question` from the rendered `context`. When the `quotes` name
    context lines, it answers from those lines only (the lines a quote holds word for word, when there
    are any), with every answer fix (`pipeline.sim.hints`)."""
    if quotes:
        named = [line for line in context.splitlines() if line.strip() and quotes.name(_line_text(line))]
        quoted = [line for line in named if any(_folded(line) in _folded(q.text) for q in quotes.quotes)]
        if named:  # a line quoted word for word is the memory meant: a reader answers from it
            return _answer("\n".join(quoted or named), question, with_fixes(rules, "answer"))
    return _answer(context, question, rules)


def _answer(context: str, question: str, rules: frozenset[str]) -> str:
    items = parse_context(context, rules)
    query = parse_question(question)
    if query is None:
        return _overlap_answer(items, question, rules)
    found = _lookup(query, items)
    if found:
        return _compose(query, found, rules)
    if query.kind == "rel_name":  # "Kofi (Olga's cousin) works as ..." also names Olga's cousin
        named = [f.subject for i in items for f in i.facts if f.owner == query.subject and f.rel == query.key]
        if named:
            return named[-1]
    if abstains(rules):
        return NOT_MENTIONED
    relaxed = _lookup(query, items, any_subject=True)
    return _compose(query, relaxed, rules) if relaxed else _overlap_answer(items, question, rules)


def answer_handler(request: StageRequest) -> dict[str, Any]:
    rules, quotes = rules_in(request.instruction), quotes_in(request.instruction)
    inputs = request.inputs
    return {"answer": answer_question(inputs.get("context", ""), inputs.get("question", ""), rules, quotes)}


# ---------------------------------------------------------------------------------------------- judge


def judge_handler(request: StageRequest) -> dict[str, Any]:
    inputs = request.inputs
    correct = is_correct(inputs.get("question", ""), inputs.get("gold_answer", ""), inputs.get("generated_answer", ""))
    return {"label": "CORRECT" if correct else "WRONG"}
