"""Synthetic LongMemEval records from the simulated world's conversations (for tests and offline demos).

`generate_longmemeval(seed, n_questions, ...)` writes records in exactly the layout that
`pipeline.data.longmemeval` parses (deterministic for a seed). It lives beside the sim world because it
is built from it: the data loaders stay independent of the test world. It does not parse or load.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from collections import Counter
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from memtrace_loop.pipeline.data.locomo import parse_session_date
from memtrace_loop.pipeline.data.longmemeval import ABSTENTION_MARK, GENERATED_ABSTENTION_GOLD, format_date
from memtrace_loop.pipeline.sim.world import generate_locomo


def _question_type(item: Mapping[str, Any], speaker_by_dia: Mapping[str, str], assistant: str) -> str:
    kind = item.get("sim", {}).get("kind")
    if kind in ("change", "changed_value"):
        return "knowledge-update"
    if item["category"] == 2:
        return "temporal-reasoning"
    if kind == "multi_hop" or item["category"] == 1:
        return "multi-session"
    if kind == "preference":
        return "single-session-preference"
    if any(speaker_by_dia.get(d) == assistant for d in item.get("evidence", ())):
        return "single-session-assistant"
    return "single-session-user"


def _record_from(sample: Mapping[str, Any], item: Mapping[str, Any], qid: str) -> dict[str, Any]:
    conv = sample["conversation"]
    user, assistant = conv["speaker_a"], conv["speaker_b"]
    numbers = sorted(int(key.split("_")[1]) for key in conv if re.fullmatch(r"session_\d+", key))
    abstention = item["category"] == 5
    evidence = set() if abstention else set(item.get("evidence", ()))
    speaker_by_dia = {t["dia_id"]: t["speaker"] for n in numbers for t in conv[f"session_{n}"]}
    sessions, dates, session_ids, answer_ids = [], [], [], []
    last = datetime.min
    for n in numbers:
        turns = [
            {"role": "user" if t["speaker"] == user else "assistant", "content": t["text"],
             "has_answer": t["dia_id"] in evidence}
            for t in conv[f"session_{n}"]
        ]
        last = datetime.fromisoformat(parse_session_date(conv[f"session_{n}_date_time"]))
        prefix = "answer_" if any(t["has_answer"] for t in turns) else ""
        session_id = f"{prefix}{qid.removesuffix(ABSTENTION_MARK)}_{n}"
        sessions.append(turns)
        dates.append(format_date(last))
        session_ids.append(session_id)
        if session_id.startswith("answer_"):
            answer_ids.append(session_id)
    return {
        "question_id": qid,
        "question_type": _question_type(item, speaker_by_dia, assistant),
        "question": item["question"],
        "answer": GENERATED_ABSTENTION_GOLD if abstention else item["answer"],
        "question_date": format_date(last + timedelta(days=1, hours=1)),
        "haystack_dates": dates,
        "haystack_session_ids": session_ids,
        "haystack_sessions": sessions,
        "answer_session_ids": answer_ids,
    }


def generate_longmemeval(
    seed: int,
    n_questions: int,
    sessions_per_question: int = 4,
    turns_per_session: int = 8,
    questions_per_haystack: int = 3,
) -> list[dict[str, Any]]:
    """`n_questions` synthetic LongMemEval records built from `pipeline.sim.world` conversations.

    Each simulated conversation is the haystack of up to `questions_per_haystack` questions drawn from
    its planted questions (the first speaker is the user, the second the assistant); adversarial
    questions become `_abs` abstention questions with an abstaining gold and no evidence. Identical
    output for identical arguments."""
    if n_questions < 0 or questions_per_haystack < 1:
        raise ValueError("need n_questions >= 0 and questions_per_haystack >= 1")
    records: list[dict[str, Any]] = []
    picked_by_bucket: Counter[str] = Counter()  # question type, or "abstention": keeps the types balanced
    batch = max(1, math.ceil(n_questions / questions_per_haystack))
    index = 0
    while len(records) < n_questions:
        samples = generate_locomo(seed, batch, sessions_per_question, turns_per_session)
        for sample in samples[index:]:
            rng = random.Random(f"memtrace-longmemeval:{seed}:{index}")
            candidates = [_record_from(sample, item, f"{seed}-{index}-{k}") for k, item in enumerate(sample["qa"])]
            order = list(range(len(candidates)))
            rng.shuffle(order)
            chosen: list[int] = []
            for _ in range(min(questions_per_haystack, len(order))):
                best = min(order, key=lambda k: picked_by_bucket[_bucket(sample["qa"][k], candidates[k])])
                order.remove(best)
                chosen.append(best)
                picked_by_bucket[_bucket(sample["qa"][best], candidates[best])] += 1
            for k in sorted(chosen):
                digest = hashlib.sha256(f"{seed}:{index}:{k}".encode()).hexdigest()[:8]
                qid = digest + (ABSTENTION_MARK if sample["qa"][k]["category"] == 5 else "")
                records.append(_record_from(sample, sample["qa"][k], qid))
                if len(records) == n_questions:
                    return records
            index += 1
        batch *= 2
    return records


def _bucket(item: Mapping[str, Any], record: Mapping[str, Any]) -> str:
    return "abstention" if item["category"] == 5 else str(record["question_type"])
