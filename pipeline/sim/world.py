"""`generate_locomo`: seeded synthetic conversations in the LoCoMo JSON layout.

Each sample has `sample_id` ("sim-<seed>-<i>"), `conversation` (`speaker_a`, `speaker_b`,
`session_N_date_time` in LoCoMo's "1:56 pm on 8 May, 2023" format, `session_N` = turns with
`speaker`, `dia_id` "D<N>:<k>", `text`) and `qa` (`question`, `answer` or - for category 5 -
`adversarial_answer`, `evidence`, `category`). Every qa item also carries `sim`: the planted fact
`kind`, the rules the memory system `needs` to answer it, and the `cause`/`cause_stage` it is expected
to fail with under the default prompts (derived from the rules it lacks; None when it needs none -
retrieval misses are not predictable from rules and are never planted).

Facts are planted by `pipeline.sim.episodes`; the remaining turns are small talk from
`pipeline.sim.vocab`. Everything is drawn from `random.Random` seeded with the seed and the
conversation index, so the output is identical for a seed and conversation `i` does not depend on
how many conversations are generated. It writes no files and copies nothing from LoCoMo.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from memtrace_loop.pipeline.sim import vocab
from memtrace_loop.pipeline.sim.dates import locomo_stamp
from memtrace_loop.pipeline.sim.episodes import Episode, PlannedQA, Planner
from memtrace_loop.pipeline.sim.grammar import fill
from memtrace_loop.pipeline.sim.stages import expected_cause

NOT_MENTIONED = "Not mentioned in the conversation"
KIND_WEIGHTS: tuple[tuple[str, float], ...] = (
    ("event", 3.0),
    ("third_party", 1.5),
    ("multi_hop", 1.5),
    ("preference", 1.5),
    ("change", 1.2),
    ("additive", 1.2),
    ("stable", 1.0),
)
ADVERSARIAL_SHARE = 0.25  # category-5 questions per other question (LoCoMo has ~0.29)


def _build(planner: Planner, kind: str, speaker: str) -> Episode | None:
    if kind in ("third_party", "multi_hop"):
        return planner.third_party(speaker, hop=kind == "multi_hop")
    return getattr(planner, kind)(speaker)


def _plan(planner: Planner, per_speaker: int) -> list[Episode]:
    rng = planner.rng
    episodes: list[Episode] = []
    kinds = [kind for kind, _ in KIND_WEIGHTS]
    for speaker in planner.speakers:
        exhausted: set[str] = set()
        first_round = kinds[:]
        rng.shuffle(first_round)
        made = 0
        while made < per_speaker and len(exhausted) < len(kinds):
            if first_round:
                kind = first_round.pop()
            else:
                open_kinds = [(k, w) for k, w in KIND_WEIGHTS if k not in exhausted]
                kind = rng.choices([k for k, _ in open_kinds], weights=[w for _, w in open_kinds])[0]
            if kind in exhausted:
                continue
            episode = _build(planner, kind, speaker)
            if episode is None:
                exhausted.add(kind)
                continue
            episodes.append(episode)
            made += 1
    return episodes


def _dia_id(session: int, position: int) -> str:
    return f"D{session}:{position + 1}"


def _qa_item(
    qa: PlannedQA,
    evidence: list[str],
    category: int | None = None,
    question: str | None = None,
    adversarial: bool = False,
) -> dict[str, Any]:
    needs = ("abstain",) if adversarial else qa.needs
    cause, stage = expected_cause(needs)
    item: dict[str, Any] = {"question": question or qa.question}
    item["adversarial_answer" if adversarial else "answer"] = qa.answer
    item["evidence"] = evidence
    item["category"] = 5 if adversarial else (category or qa.category)
    item["sim"] = {
        "kind": "adversarial" if adversarial else qa.kind,
        "needs": list(needs),
        "cause": cause,
        "cause_stage": stage,
    }
    return item


def _questions(rng: random.Random, episodes: list[Episode], speakers: tuple[str, str]) -> list[dict[str, Any]]:
    items: list[tuple[int, str, dict[str, Any]]] = []
    candidates: list[tuple[str, dict[str, Any]]] = []
    slots = {s: set().union(*(e.slots for e in episodes if e.speaker == s)) for s in speakers}
    for episode in episodes:
        other = speakers[1] if episode.speaker == speakers[0] else speakers[0]
        for qa in episode.questions:
            evidence = [_dia_id(episode.turns[i].session, episode.turns[i].position) for i in qa.evidence]
            order = f"{episode.turns[qa.evidence[0]].session:04d}"
            items.append((qa.category, order, _qa_item(qa, evidence)))
            if qa.slot and qa.slot not in slots[other]:
                swapped = re.sub(rf"\b{re.escape(episode.speaker)}\b", other, qa.question, count=1)
                candidates.append((order, _qa_item(qa, evidence, question=swapped, adversarial=True)))
    unique = list({item["question"]: (order, item) for order, item in candidates}.values())
    count = min(len(unique), round(ADVERSARIAL_SHARE * len(items)))
    items.extend((5, order, item) for order, item in rng.sample(unique, count))
    items.sort(key=lambda entry: (entry[0], entry[1]))
    return [item for _, _, item in items]


def _small_talk(rng: random.Random, other: str, after_fact: bool) -> str:
    first = rng.choice(vocab.REACTIONS) if after_fact else rng.choice(vocab.SMALL_TALK)
    sentences = [first]
    if rng.random() < 0.4:
        sentences.append(rng.choice(vocab.SMALL_TALK))
    return " ".join(fill(s, other=other) if "{other}" in s else s for s in dict.fromkeys(sentences))


def _sample(seed: int, index: int, sessions: int, turns: int) -> dict[str, Any]:
    rng = random.Random(f"memtrace-sim:{seed}:{index}")
    speakers = tuple(rng.sample(vocab.FIRST_NAMES, 2))
    day = date(2022, 1, 3) + timedelta(days=rng.randrange(540))
    moments: list[datetime] = []
    for session in range(sessions):
        if session:
            day += timedelta(days=rng.randint(3, 16))
        moments.append(datetime(day.year, day.month, day.day, rng.randint(8, 21), rng.randrange(60)))
    planner = Planner(rng, (speakers[0], speakers[1]), [m.date() for m in moments], turns)
    per_speaker = max(3, round(sessions * turns / 10))
    episodes = _plan(planner, per_speaker)
    planted = {(t.session, t.position): t.text for e in episodes for t in e.turns}

    conversation: dict[str, Any] = {"speaker_a": speakers[0], "speaker_b": speakers[1]}
    for session in range(1, sessions + 1):
        conversation[f"session_{session}_date_time"] = locomo_stamp(moments[session - 1])
        rows = []
        for position, speaker in enumerate(planner.layout[session]):
            other = speakers[1] if speaker == speakers[0] else speakers[0]
            text = planted.get((session, position))
            if text is None:
                text = _small_talk(rng, other, (session, position - 1) in planted)
            rows.append({"speaker": speaker, "dia_id": _dia_id(session, position), "text": text})
        conversation[f"session_{session}"] = rows
    return {
        "sample_id": f"sim-{seed}-{index}",
        "conversation": conversation,
        "qa": _questions(rng, episodes, (speakers[0], speakers[1])),
    }


def generate_locomo(
    seed: int, n_conversations: int, sessions_per_conversation: int = 6, turns_per_session: int = 14
) -> list[dict[str, Any]]:
    """`n_conversations` synthetic LoCoMo samples; identical output for identical arguments."""
    if n_conversations < 0 or sessions_per_conversation < 1 or turns_per_session < 2:
        raise ValueError("need n_conversations >= 0, sessions_per_conversation >= 1, turns_per_session >= 2")
    return [_sample(seed, index, sessions_per_conversation, turns_per_session) for index in range(n_conversations)]


@dataclass(frozen=True)
class PlantedQuestion:
    """What the world planted behind one question: the rules a system needs to answer it."""

    question_id: str
    kind: str
    needs: tuple[str, ...]


def planted_questions(samples: list[dict[str, Any]]) -> dict[str, PlantedQuestion]:
    """Planted needs by question id (ids as `pipeline.data.parse_locomo` makes them: `<sample>:q<i>`)."""
    found = {}
    for sample in samples:
        for index, item in enumerate(sample["qa"]):
            question_id = f"{sample['sample_id']}:q{index}"
            planted = item["sim"]
            found[question_id] = PlantedQuestion(question_id, planted["kind"], tuple(planted["needs"]))
    return found
