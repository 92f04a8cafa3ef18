"""Planting facts: the episodes of one simulated conversation and the questions they answer.

An episode is one planted fact kind for one speaker: one or two turns placed in sessions (a later
turn always in a later session) and the questions whose gold answers they hold. The `Planner` keeps
the conversation's random generator, the free turn positions and the pools of unused names/values,
so that no two episodes collide (a speaker never has two facts in one slot unless an episode plants
exactly that). Each question records the rules it needs (`needs`); its expected cause under the
default prompts follows from them (`pipeline.sim.rules.expected_cause`).

It does not write the LoCoMo layout or small talk (that is `pipeline.sim.world`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import date

from memtrace_loop.pipeline.sim import vocab
from memtrace_loop.pipeline.sim.dates import RELATIVE_EXPRESSIONS, human, resolve_relative
from memtrace_loop.pipeline.sim.grammar import FORMS_BY_KIND, article, fill, who_text


@dataclass(frozen=True)
class Placed:
    """A planted turn: session number (1-based), position in the session, speaker, text."""

    session: int
    position: int
    speaker: str
    text: str


@dataclass(frozen=True)
class PlannedQA:
    question: str
    answer: str
    evidence: tuple[int, ...]  # indexes into the episode's turns
    category: int
    kind: str
    needs: tuple[str, ...] = ()
    slot: str | None = None  # what the question asks about; set when it can be turned adversarial


@dataclass(frozen=True)
class Episode:
    kind: str
    speaker: str
    turns: tuple[Placed, ...]
    questions: tuple[PlannedQA, ...]

    @property
    def slots(self) -> frozenset[str]:
        """What this episode makes answerable about its speaker."""
        return frozenset(qa.slot for qa in self.questions if qa.slot)


class Planner:
    """Places episodes for the two speakers of one conversation."""

    def __init__(self, rng: random.Random, speakers: tuple[str, str], days: list[date], turns_per_session: int):
        self.rng = rng
        self.speakers = speakers
        self.days = days
        self.free: dict[tuple[int, str], list[int]] = {}
        self.layout: dict[int, list[str]] = {}  # session -> speaker of each position
        for session in range(1, len(days) + 1):
            first = rng.randrange(2)
            self.layout[session] = [speakers[(p + first) % 2] for p in range(turns_per_session)]
            for position, speaker in enumerate(self.layout[session]):
                self.free.setdefault((session, speaker), []).append(position)
        self.names = [n for n in vocab.FIRST_NAMES if n not in speakers]
        rng.shuffle(self.names)
        self.pet_names = list(vocab.PET_NAMES)
        rng.shuffle(self.pet_names)
        self.prefs = list(vocab.PREFS)
        rng.shuffle(self.prefs)
        self.used: dict[str, set[str]] = {s: set() for s in speakers}
        self.taken: set[str] = set()  # answer values already planted, kept unique per conversation

    # ------------------------------------------------------------------------------- placement
    def _take(self, session: int, speaker: str) -> int | None:
        positions = self.free.get((session, speaker), [])
        usable = [p for p in positions if p > 0] or positions
        if not usable:
            return None
        position = self.rng.choice(usable)
        positions.remove(position)
        return position

    def _place(self, speaker: str, texts: list[str]) -> tuple[Placed, ...] | None:
        """Place texts in strictly increasing sessions (random), or None if there is no room."""
        count, last = len(texts), len(self.days)
        if count > last:
            return None
        for _ in range(12):
            sessions = sorted(self.rng.sample(range(1, last + 1), count))
            if all(self.free.get((s, speaker)) for s in sessions):
                placed = []
                for session, text in zip(sessions, texts, strict=True):
                    position = self._take(session, speaker)
                    assert position is not None
                    placed.append(Placed(session, position, speaker, text))
                return tuple(placed)
        return None

    def _say(self, kind: str, **values: str) -> str:
        form = self.rng.choice(FORMS_BY_KIND[kind])
        text = fill(form.text, **values)
        if self.rng.random() < 0.3:
            text = f"{self.rng.choice(vocab.OPENERS)} {text}"
        return text

    def _pick(self, speaker: str, group: str, options: tuple[str, ...] | list[str]) -> str | None:
        free = [o for o in options if f"{group}:{o}" not in self.used[speaker]]
        if not free:
            return None
        choice = self.rng.choice(free)
        self.used[speaker].add(f"{group}:{choice}")
        return choice

    def _fresh(self, options: tuple[str, ...], count: int = 1) -> list[str]:
        """`count` distinct values not yet planted in this conversation (reused only if exhausted)."""
        free = [o for o in options if o not in self.taken]
        chosen = self.rng.sample(free if len(free) >= count else list(options), count)
        self.taken.update(chosen)
        return chosen

    def _name(self) -> str:
        if self.names:
            return self.names.pop()
        first, second = self.rng.sample(vocab.FIRST_NAMES, 2)  # never reached with the built-in lists
        return f"{first}-{second}"

    # ------------------------------------------------------------------------------- episodes
    def event(self, speaker: str) -> Episode | None:
        activity_base = self._pick(speaker, "activity", [a.base for a in vocab.ACTIVITIES])
        if activity_base is None:
            return None
        activity = next(a for a in vocab.ACTIVITIES if a.base == activity_base)
        place = self._fresh(activity.places)[0]
        when = self.rng.choice(RELATIVE_EXPRESSIONS)
        text = self._say(
            "event",
            past=activity.past,
            prep=activity.prep,
            place=place,
            when=when,
            When=when[0].upper() + when[1:],
        )
        turns = self._place(speaker, [text])
        if turns is None:
            return None
        day = resolve_relative(when, self.days[turns[0].session - 1])
        assert day is not None
        questions = (
            PlannedQA(
                f"When did {speaker} {activity.base}?",
                human(day),
                (0,),
                2,
                "event_date",
                ("resolve_dates", "use_dates"),
                f"event:{activity.base}",
            ),
            PlannedQA(
                f"Where did {speaker} {activity.base}?",
                place,
                (0,),
                4,
                "event_place",
                slot=f"event:{activity.base}",
            ),
        )
        return Episode("event", speaker, turns, questions)

    def third_party(self, speaker: str, hop: bool) -> Episode | None:
        rel = self._pick(speaker, "rel", vocab.RELATIONS)
        if rel is None:
            return None
        name = self._name()
        lives = self.rng.random() < 0.5
        value = self._fresh(vocab.CITIES if lives else vocab.JOBS)[0]
        slot = {"city": value} if lives else {"job": value}
        if hop:
            texts = [
                self._say("relation", rel=rel, name=name),
                self._say("bare_lives" if lives else "bare_job", name=name, **slot),
            ]
        else:
            texts = [self._say("tp_lives" if lives else "tp_job", rel=rel, name=name, **slot)]
        turns = self._place(speaker, texts)
        if turns is None:
            return None
        who = who_text(speaker, rel) if hop else who_text(speaker, rel, name)
        asked = f"Where does {who} live?" if lives else f"What kind of work does {who} do?"
        every = tuple(range(len(turns)))
        questions = (
            PlannedQA(asked, value, every, 1 if hop else 4, "multi_hop" if hop else "third_party", ("third_party",)),
            PlannedQA(f"What is the name of {speaker}'s {rel}?", name, (0,), 4, "relation_name", slot=f"rel:{rel}"),
        )
        return Episode("multi_hop" if hop else "third_party", speaker, turns, questions)

    def preference(self, speaker: str) -> Episode | None:
        taken = {p.category for p in vocab.PREFS if f"pref:{p.category}" in self.used[speaker]}
        item = next((p for p in self.prefs if p.category not in taken), None)
        if item is None:
            return None
        self.prefs.remove(item)
        self.used[speaker].add(f"pref:{item.category}")
        likes = self.rng.random() < 0.6
        turns = self._place(speaker, [self._say("likes" if likes else "dislikes", thing=item.thing)])
        if turns is None:
            return None
        qa = PlannedQA(
            f"Would {speaker} enjoy {item.occasion}?",
            "Yes" if likes else "No",
            (0,),
            3,
            "preference",
            slot=f"pref:{item.keyword}",
        )
        return Episode("preference", speaker, turns, (qa,))

    def change(self, speaker: str) -> Episode | None:
        family = self._pick(speaker, "family", ["works_at", "lives_in"])
        if family is None:
            return None
        pool = vocab.COMPANIES if family == "works_at" else vocab.CITIES
        old, new = self._fresh(pool, 2)
        key = "company" if family == "works_at" else "city"
        turns = self._place(speaker, [self._say(family, **{key: old}), self._say(f"{family}_new", **{key: new})])
        if turns is None:
            return None
        asked = f"Where does {speaker} work?" if family == "works_at" else f"Where does {speaker} live?"
        qa = PlannedQA(asked, new, (1,), 4, "changed_value", ("newest_wins",), family)
        return Episode("changed_value", speaker, turns, (qa,))

    def additive(self, speaker: str) -> Episode | None:
        family = self._pick(speaker, "family", ["hobby", "pet"])
        if family is None:
            return None
        if family == "hobby":
            first, second = self._fresh(vocab.HOBBIES, 2)
            texts = [self._say("hobby", hobby=first), self._say("hobby_new", hobby=second)]
            turns = self._place(speaker, texts)
            if turns is None:
                return None
            qa = PlannedQA(
                f"What hobbies does {speaker} have?",
                f"{first} and {second}",
                (0, 1),
                1,
                "additive",
                ("keep_compatible",),
                "hobby",
            )
            return Episode("additive", speaker, turns, (qa,))
        (animal_a, animal_b), name_a, name_b = self.rng.sample(vocab.ANIMALS, 2), *self._pet_names(2)
        texts = [
            self._say("pet", animal=animal_a, pet=name_a),
            self._say("pet_new", animal=animal_b, pet=name_b),
        ]
        turns = self._place(speaker, texts)
        if turns is None:
            return None
        both = f"{article(animal_a)} {animal_a} named {name_a} and {article(animal_b)} {animal_b} named {name_b}"
        questions = (
            PlannedQA(f"What pets does {speaker} have?", both, (0, 1), 1, "additive", ("keep_compatible",), "pet"),
            PlannedQA(
                f"What is the name of {speaker}'s {animal_a}?",
                name_a,
                (0,),
                4,
                "additive",
                ("keep_compatible",),
                f"pet:{animal_a}",
            ),
            PlannedQA(
                f"What is the name of {speaker}'s {animal_b}?",
                name_b,
                (1,),
                4,
                "pet_name",
                slot=f"pet:{animal_b}",
            ),
        )
        return Episode("additive", speaker, turns, questions)

    def _pet_names(self, count: int) -> list[str]:
        return [self.pet_names.pop() if self.pet_names else self._name() for _ in range(count)]

    def stable(self, speaker: str) -> Episode | None:
        family = self._pick(speaker, "family", ["hometown", "job"])
        if family is None:
            return None
        value = self._fresh(vocab.HOMETOWNS if family == "hometown" else vocab.JOBS)[0]
        text = self._say(family, **({"home": value} if family == "hometown" else {"job": value}))
        turns = self._place(speaker, [text])
        if turns is None:
            return None
        asked = f"Where did {speaker} grow up?" if family == "hometown" else f"What kind of work does {speaker} do?"
        return Episode("stable", speaker, turns, (PlannedQA(asked, value, (0,), 4, "stable", slot=family),))
