"""The synthetic LoCoMo generator: determinism, layout, speed, and honest planted causes."""

from __future__ import annotations

import json
import re
from collections import Counter
from itertools import combinations, pairwise

import pytest
from memtrace_loop.pipeline.sim.dates import human, parse_date, parse_stamp, resolve_relative
from memtrace_loop.pipeline.sim.grammar import parse_question, read_sentence, split_sentences
from memtrace_loop.pipeline.sim.handlers import answer_question, decide_actions, extract_facts
from memtrace_loop.pipeline.sim.judge import is_correct
from memtrace_loop.pipeline.sim.rules import RULES, RuleEffect
from memtrace_loop.pipeline.sim.stages import expected_cause
from memtrace_loop.pipeline.sim.world import NOT_MENTIONED, generate_locomo

FIXES = tuple(rule for rule in RULES if rule.effect == RuleEffect.FIX)  # misfires and noise are planted nowhere
ALL_RULES = frozenset(rule.id for rule in FIXES)
STAMP = re.compile(r"^\d{1,2}:\d{2} (?:am|pm) on \d{1,2} [A-Z][a-z]+, \d{4}$")


def _sessions(sample: dict) -> list[tuple[int, list[dict]]]:
    conversation = sample["conversation"]
    numbers = sorted(int(m.group(1)) for k in conversation if (m := re.fullmatch(r"session_(\d+)", k)))
    return [(n, conversation[f"session_{n}"]) for n in numbers]


def _rendered_turns(sample: dict) -> list[tuple[str, str]]:
    """(dia_id, `[8 May 2023] Alice: text`) for every turn, in order."""
    rendered = []
    for number, turns in _sessions(sample):
        day = parse_stamp(sample["conversation"][f"session_{number}_date_time"]).date()
        rendered.extend((t["dia_id"], f"[{human(day)}] {t['speaker']}: {t['text']}") for t in turns)
    return rendered


def _oracle_accuracy(sample: dict, rules: frozenset[str]) -> list[tuple[dict, bool]]:
    """Run the stand-in's extract/decide/answer handlers with perfect retrieval (every memory is
    shown to decide and to answer) and judge every question."""
    store: dict[str, tuple[str, str]] = {}
    for number, (_, turn) in enumerate(_rendered_turns(sample)):
        day = turn[1 : turn.index("]")]
        facts = extract_facts(turn, rules)
        existing = "\n".join(f"[{key}] {text}" for key, (text, _) in store.items())
        for action in decide_actions(existing, facts, rules):
            if action["event"] == "ADD":
                store[f"m{number}-{len(store)}"] = (action["text"], day)
            elif action["event"] == "UPDATE":
                store[action["id"]] = (action["text"], day)
            elif action["event"] == "DELETE":
                store.pop(action["id"])
    context = "\n".join(f"Memory: {text} Time: {day}" for text, day in store.values())
    judged = []
    for qa in sample["qa"]:
        gold = NOT_MENTIONED if qa["category"] == 5 else qa["answer"]
        prediction = answer_question(context, qa["question"], rules)
        judged.append((qa, is_correct(qa["question"], gold, prediction)))
    return judged


@pytest.fixture(scope="module")
def samples() -> list[dict]:
    return generate_locomo(seed=11, n_conversations=4)


def test_same_seed_gives_identical_json_and_other_seed_differs() -> None:
    first = json.dumps(generate_locomo(5, 3), sort_keys=True)
    assert first == json.dumps(generate_locomo(5, 3), sort_keys=True)
    assert first != json.dumps(generate_locomo(6, 3), sort_keys=True)
    # conversation i does not depend on how many are generated
    assert generate_locomo(5, 1)[0] == generate_locomo(5, 3)[0]


def test_layout_matches_locomo(samples: list[dict]) -> None:
    for index, sample in enumerate(samples):
        assert sample["sample_id"] == f"sim-11-{index}"
        conversation = sample["conversation"]
        speakers = {conversation["speaker_a"], conversation["speaker_b"]}
        assert len(speakers) == 2
        sessions = _sessions(sample)
        assert [n for n, _ in sessions] == list(range(1, 7))
        dia_ids = set()
        for number, turns in sessions:
            assert STAMP.match(conversation[f"session_{number}_date_time"])
            assert len(turns) == 14
            for k, turn in enumerate(turns, start=1):
                assert set(turn) == {"speaker", "dia_id", "text"}
                assert turn["dia_id"] == f"D{number}:{k}"
                assert turn["speaker"] in speakers and turn["text"].strip()
                dia_ids.add(turn["dia_id"])
            assert all(a["speaker"] != b["speaker"] for a, b in pairwise(turns))
        for qa in sample["qa"]:
            assert qa["evidence"] and set(qa["evidence"]) <= dia_ids
            assert qa["category"] in (1, 2, 3, 4, 5)
            if qa["category"] == 5:
                assert "adversarial_answer" in qa and "answer" not in qa
            else:
                assert "answer" in qa and "adversarial_answer" not in qa
            sim = qa["sim"]
            assert set(sim) == {"kind", "needs", "cause", "cause_stage"}
            assert (sim["cause"], sim["cause_stage"]) == expected_cause(sim["needs"])
    categories = Counter(qa["category"] for s in samples for qa in s["qa"])
    assert set(categories) == {1, 2, 3, 4, 5}


def test_planted_causes_cover_every_rule_driven_error_type(samples: list[dict]) -> None:
    causes = Counter(qa["sim"]["cause"] for s in samples for qa in s["qa"])
    assert {"ExtractionError", "UpdateError", "DeletionError", "ResponseError"} <= set(causes)
    assert causes[None] > 0


def test_temporal_golds_are_the_resolved_relative_dates(samples: list[dict]) -> None:
    checked = 0
    for sample in samples:
        text_by_id = dict(_rendered_turns(sample))
        for qa in sample["qa"]:
            if qa["sim"]["kind"] != "event_date":
                continue
            turn = text_by_id[qa["evidence"][0]]
            session_day = parse_date(turn[1 : turn.index("]")])
            expression = re.search(r"yesterday|\w+ days ago|last \w+day", turn, re.IGNORECASE)
            assert expression and session_day
            assert qa["answer"] == human(resolve_relative(expression.group(0), session_day))
            checked += 1
    assert checked >= 4


def test_every_sentence_is_in_the_grammar_and_every_question_parses(samples: list[dict]) -> None:
    for sample in samples:
        for _, turn in _rendered_turns(sample):
            speaker, text = turn.split("] ", 1)[1].split(": ", 1)
            for sentence in split_sentences(text):
                assert read_sentence(sentence, speaker, None, ALL_RULES) is not None, sentence
            assert not any(" said: " in fact for fact in extract_facts(turn, ALL_RULES))
        for qa in sample["qa"]:
            assert parse_question(qa["question"]) is not None, qa["question"]


RULE_SETS = [
    frozenset(),
    ALL_RULES,
    *(frozenset({rule.id}) for rule in FIXES),
    *(ALL_RULES - {rule.id} for rule in FIXES),
    *(frozenset(pair) for pair in combinations(sorted(ALL_RULES), 2)),
]


@pytest.mark.parametrize("rules", RULE_SETS, ids=lambda r: "+".join(sorted(r)) or "default")
def test_with_perfect_retrieval_a_question_fails_exactly_when_a_needed_rule_is_missing(
    samples: list[dict], rules: frozenset[str]
) -> None:
    for sample in samples:
        for qa, correct in _oracle_accuracy(sample, rules):
            cause, _ = expected_cause(qa["sim"]["needs"], rules)
            assert correct == (cause is None), (sorted(rules), qa)


@pytest.mark.slow
@pytest.mark.parametrize("rules", [frozenset(), ALL_RULES], ids=["default", "all"])
def test_planted_causes_stay_honest_at_benchmark_size(rules: frozenset[str]) -> None:
    for sample in generate_locomo(seed=3, n_conversations=2, sessions_per_conversation=30, turns_per_session=20):
        for qa, correct in _oracle_accuracy(sample, rules):
            assert correct == (expected_cause(qa["sim"]["needs"], rules)[0] is None), qa


def test_default_rules_answer_about_half_of_categories_one_to_four(samples: list[dict]) -> None:
    judged = [ok for s in samples for qa, ok in _oracle_accuracy(s, frozenset()) if qa["category"] != 5]
    assert 0.4 <= sum(judged) / len(judged) <= 0.6


def test_benchmark_size_plants_more_facts() -> None:
    # how fast: experiments/lab/bench/speed_bench.py (no wall-clock assertion in tests)
    big = generate_locomo(seed=1, n_conversations=10, sessions_per_conversation=30, turns_per_session=20)
    assert all(sum(len(turns) for _, turns in _sessions(s)) == 600 for s in big)
    assert min(len(s["qa"]) for s in big) > 3 * len(generate_locomo(1, 1)[0]["qa"])


def test_tiny_shapes_do_not_crash() -> None:
    for sessions, turns in ((1, 2), (1, 14), (2, 3)):
        sample = generate_locomo(0, 1, sessions_per_conversation=sessions, turns_per_session=turns)[0]
        assert len(_sessions(sample)) == sessions
    with pytest.raises(ValueError):
        generate_locomo(0, 1, sessions_per_conversation=0)


def test_the_project_loader_reads_the_generated_samples() -> None:
    from memtrace_loop.pipeline.data.locomo import parse_locomo

    raw = generate_locomo(2, 2)
    dataset = parse_locomo(raw, "sim")
    assert len(dataset.conversations) == 2
    assert len(dataset.questions) == sum(len(s["qa"]) for s in raw)
    adversarial = [q for q in dataset.questions if q.category == 5]
    assert adversarial and all(q.gold.startswith("Not mentioned") for q in adversarial)
