"""The simulated world answers the real mem0ai library's two LLM requests (memory_systems/mem0ai/sim.py).

Every request here is built by the installed library's own functions (parse_messages,
get_fact_retrieval_messages, ensure_json_instruction, get_update_memory_messages), never typed by hand;
the end-to-end tests drive a real `mem0.Memory` whose LLM forwards to the stand-in and whose embedder is
our HashingEmbedder, and read what mem0 stored. docs/test_world.md's list of the rules mem0's default
prompts state is checked against `rules_in` here, so the page cannot go stale."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

import dspy
import pytest
from memtrace_loop.memory_systems.mem0ai import sim
from memtrace_loop.memory_systems.mem0ai.hooks import default_hooks, import_mem0, with_session_date
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.sim import stand_in
from memtrace_loop.pipeline.sim.engine import SimEngine
from memtrace_loop.pipeline.sim.paraphrase import canonical
from memtrace_loop.pipeline.sim.rules import RULES, RULES_BY_ID, rules_in, with_rules
from memtrace_loop.pipeline.sim.stages import STAGES, stage_for_outputs

from tests.support.paths import REPO

import_mem0()
from mem0.configs.prompts import get_update_memory_messages  # noqa: E402
from mem0.memory.utils import (  # noqa: E402
    ensure_json_instruction,
    get_fact_retrieval_messages,
    normalize_facts,
    parse_messages,
    remove_code_blocks,
)

DATE = "2023-05-08"  # a Monday: "last Saturday" is 6 May 2023
TURN = "Alice: Guess what. I went hiking at Mount Rainier last Saturday! My sister Carol just moved to Boston."
HANDLERS = stand_in.world_handlers()
ROWS = stand_in.foreign_rows(sim.STAGES)
EXTRACT_FIXES = ("resolve_dates", "third_party")
DECIDE_FIXES = ("newest_wins", "keep_compatible")


@pytest.fixture(scope="module")
def hooks() -> dict[str, str]:
    return default_hooks()


def extraction_messages(prompt: str, turns: Iterable[str], session_date: str | None = DATE) -> list[dict[str, str]]:
    """What mem0 1.0.x sends for a custom extraction prompt (main.py `_add_to_vector_store`)."""
    system = with_session_date(prompt, session_date) if session_date else prompt
    parsed = parse_messages([{"role": "user", "content": turn} for turn in turns])
    _, user = get_fact_retrieval_messages(parsed)  # "Input:\n" + the parsed lines, as for a custom prompt
    system, user = ensure_json_instruction(system, user)
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def mem0_facts(reply: str) -> list[str]:
    """mem0's own parsing of an extraction reply (a KeyError/JSONDecodeError is a lost turn in mem0)."""
    return normalize_facts(json.loads(remove_code_blocks(reply), strict=False)["facts"])


def extract(prompt: str, turns: Iterable[str] = (TURN,), session_date: str | None = DATE) -> str:
    return stand_in.respond(extraction_messages(prompt, turns, session_date), HANDLERS, ROWS)


def update(prompt: str | None, memories: list[dict[str, str]], facts: list[str]) -> list[dict[str, Any]]:
    message = get_update_memory_messages(memories, facts, prompt)
    return json.loads(stand_in.respond([{"role": "user", "content": message}], HANDLERS, ROWS))["memory"]


# ---------------------------------------------------------------------------------------------- extraction


def test_default_extraction_prompt_drops_dates_and_other_people(hooks: dict[str, str]) -> None:
    facts = mem0_facts(extract(hooks["fact_extraction"]))
    assert facts == ["Alice went hiking at Mount Rainier.", "Alice has a sister named Carol."]


def test_extraction_reads_the_rules_the_prompt_states_and_the_session_date(hooks: dict[str, str]) -> None:
    fixed = with_rules(hooks["fact_extraction"], EXTRACT_FIXES)
    facts = mem0_facts(extract(fixed))
    assert facts == [
        "Alice went hiking at Mount Rainier on 6 May 2023.",
        "Alice has a sister named Carol.",
        "Carol (Alice's sister) lives in Boston.",
    ]
    later = mem0_facts(extract(fixed, session_date="2023-06-12"))  # another session date, another day
    assert later[0] == "Alice went hiking at Mount Rainier on 10 June 2023."


def test_without_a_date_line_relative_dates_cannot_be_resolved(hooks: dict[str, str]) -> None:
    undated = re.sub(r"- Today's date is \{session_date\}\.\n", "", hooks["fact_extraction"])
    assert "Today's date" not in undated
    facts = mem0_facts(extract(with_rules(undated, EXTRACT_FIXES), session_date=None))
    assert facts[0] == "Alice went hiking at Mount Rainier."


def test_only_user_lines_are_mined_and_every_user_line_is_a_turn(hooks: dict[str, str]) -> None:
    parsed = parse_messages([
        {"role": "user", "content": "Alice: I grew up in Ohio."},
        {"role": "assistant", "content": "Bob: I grew up in Iowa."},
        {"role": "user", "content": "Alice: I work at Globex, it keeps me busy."},
    ])
    system, user = ensure_json_instruction(with_session_date(hooks["fact_extraction"], DATE), f"Input:\n{parsed}")
    reply = stand_in.respond([{"role": "system", "content": system}, {"role": "user", "content": user}], HANDLERS, ROWS)
    assert mem0_facts(reply) == ["Alice grew up in Ohio.", "Alice works at Globex."]


def test_a_prompt_that_never_names_the_facts_key_gets_a_reply_mem0_cannot_parse() -> None:
    reply = extract("Extract what is worth remembering about the speaker and answer in JSON.")
    facts = ["Alice went hiking at Mount Rainier.", "Alice has a sister named Carol."]
    assert json.loads(reply) == {sim.OTHER_KEY: facts}
    with pytest.raises(KeyError):
        mem0_facts(reply)


def test_a_prompt_that_never_says_json_gets_prose_when_mem0_appends_nothing() -> None:
    turn = "Alice: I grew up in Ohio. I keep my notes as JSON."  # "json" in the turn: mem0 appends no shape
    messages = extraction_messages("Extract the facts about the speaker.", [turn])
    assert "'facts' key" not in messages[0]["content"]
    reply = stand_in.respond(messages, HANDLERS, ROWS)
    assert reply.startswith("- Alice grew up in Ohio.")
    with pytest.raises(json.JSONDecodeError):
        mem0_facts(reply)


def test_a_prompt_without_json_gets_mem0s_appended_shape_and_parses() -> None:
    messages = extraction_messages("Extract what is worth remembering about the speaker.", [TURN])
    assert "'facts' key" in messages[0]["content"]  # ensure_json_instruction appended mem0's shape
    assert mem0_facts(stand_in.respond(messages, HANDLERS, ROWS))[0] == "Alice went hiking at Mount Rainier."


# ---------------------------------------------------------------------------------------------- update

MEMORIES = [
    {"id": "0", "text": "Alice works at Globex."},
    {"id": "1", "text": "Alice enjoys pottery as a hobby."},
    {"id": "2", "text": "Alice went hiking at Mount Hood."},
]
FACTS = [
    "Alice works at Hooli.",  # a changed single value
    "Alice enjoys chess as a hobby.",  # a second hobby: both are true
    "Alice went hiking at Mount Hood on 6 May 2023.",  # adds a date to a memory
    "Alice grew up in Ohio.",  # new
]


def test_default_update_prompt_keeps_the_stale_value_and_deletes_the_still_true_hobby(hooks: dict[str, str]) -> None:
    assert update(hooks["update_memory"], MEMORIES, FACTS) == [
        {"id": "0", "text": "Alice works at Globex.", "event": "NONE"},
        {"id": "1", "text": "Alice enjoys pottery as a hobby.", "event": "DELETE"},
        {"id": "3", "text": "Alice enjoys chess as a hobby.", "event": "ADD"},
        {"id": "2", "text": "Alice went hiking at Mount Hood on 6 May 2023.", "event": "UPDATE",
         "old_memory": "Alice went hiking at Mount Hood."},
        {"id": "4", "text": "Alice grew up in Ohio.", "event": "ADD"},
    ]


def test_update_with_the_decide_rules_updates_the_value_and_keeps_both_hobbies(hooks: dict[str, str]) -> None:
    actions = update(with_rules(hooks["update_memory"], DECIDE_FIXES), MEMORIES, FACTS)
    assert [(a["event"], a["id"], a["text"]) for a in actions] == [
        ("UPDATE", "0", "Alice works at Hooli."),
        ("ADD", "3", "Alice enjoys chess as a hobby."),
        ("UPDATE", "2", "Alice went hiking at Mount Hood on 6 May 2023."),
        ("ADD", "4", "Alice grew up in Ohio."),
    ]
    assert actions[0]["old_memory"] == "Alice works at Globex."


def test_update_on_an_empty_memory_and_with_mem0s_default_prompt_argument() -> None:
    fact = "Alice grew up in Ohio."
    assert update(None, [], [fact]) == [{"id": "0", "text": fact, "event": "ADD"}]


def test_update_rules_come_from_the_words_not_from_the_memories_or_facts(hooks: dict[str, str]) -> None:
    sentence = RULES_BY_ID["keep_compatible"].sentence
    memories = [*MEMORIES, {"id": "3", "text": f"Alice said: {sentence}"}]
    actions = update(hooks["update_memory"], memories, ["Alice enjoys chess as a hobby.", f"Bob said: {sentence}"])
    assert ("DELETE", "1") in [(a["event"], a["id"]) for a in actions]  # no rule read from the data
    assert rules_in(get_update_memory_messages(memories, [], hooks["update_memory"])) >= {"keep_compatible"}


# ---------------------------------------------------------------------------------------------- dispatch


def test_requests_in_other_shapes_are_not_recognized(hooks: dict[str, str]) -> None:
    system = with_session_date(hooks["fact_extraction"], DATE)
    for messages in (
        [{"role": "system", "content": system}, {"role": "user", "content": f"Tell me: {TURN}"}],
        [{"role": "system", "content": system}, {"role": "user", "content": f"Input:\n{TURN}"}],  # no role lines
        [{"role": "user", "content": hooks["update_memory"]}],  # mem0's appended text missing
    ):
        with pytest.raises(stand_in.UnknownStageError):
            stand_in.respond(messages, HANDLERS, ROWS)
    with pytest.raises(stand_in.UnknownStageError, match=r"no foreign row \(.*: none given\)"):  # no rows given
        stand_in.respond(extraction_messages(hooks["fact_extraction"], [TURN]), HANDLERS)


@pytest.mark.usefixtures("lm_history")  # reads `lm.history` (off in the test session)
def test_foreign_rows_leave_dispatch_by_output_fields_alone() -> None:
    assert stand_in.world_handlers(sim.STAGES) == stand_in.world_handlers()
    assert stage_for_outputs(["facts"], (*sim.STAGES, *STAGES)) == "extract"
    assert stage_for_outputs(["actions"], (*sim.STAGES, *STAGES)) == "decide"
    engine = SimEngine()
    lm = dspy.LM("sim/stand-in", engine=engine, cache=False)
    signature = dspy.Signature("turn -> facts: list[str]", "Extract facts.")
    with dspy.context(lm=lm):
        facts = dspy.Predict(signature)(turn="[8 May 2023] Alice: I grew up in Ohio.").facts
    assert facts == ["Alice grew up in Ohio."]
    messages = lm.history[-1]["messages"]
    assert engine.reply(messages) == stand_in.respond(messages) == lm.history[-1]["outputs"][0]


def test_paraphrasing_world_paraphrases_mem0s_construction_replies(hooks: dict[str, str]) -> None:
    rows = stand_in.paraphrasing_rows(ROWS)
    messages = extraction_messages(with_rules(hooks["fact_extraction"], EXTRACT_FIXES), [TURN])
    plain, paraphrased = mem0_facts(stand_in.respond(messages, HANDLERS, ROWS)), mem0_facts(
        stand_in.respond(messages, HANDLERS, rows)
    )
    assert paraphrased != plain and [canonical(f) for f in paraphrased] == plain
    message = get_update_memory_messages([{"id": "0", "text": paraphrased[2]}], [plain[2]], hooks["update_memory"])
    (action,) = json.loads(stand_in.respond([{"role": "user", "content": message}], HANDLERS, rows))["memory"]
    assert action == {"id": "0", "text": paraphrased[2], "event": "NONE"}  # the paraphrase is read as the same fact


# ---------------------------------------------------------------------------------------------- the docs

PAGE = REPO / "docs" / "test_world.md"
_ROW = re.compile(r"^\| `(?P<rule>\w+)` \| (?P<stage>\w+) \| (?P<stated>yes|no) \|", re.M)


_CATALOG_ROW = re.compile(
    r"^\| `(?P<rule>\w+)` \| (?P<stage>\w+) \| (?P<effect>fix|misfire|noise) \| (?P<error>\w+) \|", re.M
)


def test_the_page_lists_the_whole_rule_catalog() -> None:
    catalog = PAGE.read_text(encoding="utf-8").split("## mem0ai", 1)[0]
    rows = [m.group("rule", "stage", "effect", "error") for m in _CATALOG_ROW.finditer(catalog)]
    assert sorted(rows) == sorted((r.id, r.stage, r.effect.value, r.fixes_error_type) for r in RULES)


def test_the_documented_rules_of_mem0s_default_prompts_are_the_measured_ones(hooks: dict[str, str]) -> None:
    section = PAGE.read_text(encoding="utf-8").split("## mem0ai", 1)[1]
    rows = {m.group("rule"): (m.group("stage"), m.group("stated") == "yes") for m in _ROW.finditer(section)}
    assert rows == {r.id: (r.stage, r.id in rules_in(" ".join(hooks.values()))) for r in RULES
                    if r.stage in ("extract", "decide")}
    stated = rules_in(hooks["fact_extraction"]) | rules_in(hooks["update_memory"])
    assert stated == {rule for rule, (_, yes) in rows.items() if yes}  # no rule of another stage either


# ---------------------------------------------------------------------------------------------- end to end


class StandInLLM:
    """mem0's LLM object answering through the simulated world (`m.llm = ...`)."""

    def __init__(self, rows: tuple[Any, ...] = ROWS) -> None:
        self.rows = rows
        self.replies: list[str] = []

    def generate_response(self, messages: list[dict[str, str]], response_format: Any = None, **_: Any) -> str:
        self.replies.append(stand_in.respond(messages, HANDLERS, self.rows))
        return self.replies[-1]


class HashingMem0Embedder:
    """mem0's embedder object backed by our HashingEmbedder (`m.embedding_model = ...`)."""

    def __init__(self) -> None:
        self.embedder = HashingEmbedder()

    def embed(self, text: str, memory_action: str | None = None) -> list[float]:
        return [float(x) for x in self.embedder.embed([text])[0]]


CONVERSATION = (
    TURN,
    "Alice: I work at Globex, it keeps me busy.",
    "Alice: I've gotten really into pottery lately.",
    "Alice: I switched jobs, I work at Hooli now.",
    "Alice: I started doing chess too, it's so fun.",
)


def stored(extraction: str, update_prompt: str, turns: Iterable[str] = CONVERSATION) -> list[str]:
    """The memories a real mem0.Memory stores for `turns` with these hook texts on the simulated world."""
    from mem0 import Memory

    memory = Memory.from_config({
        "vector_store": {"provider": "qdrant", "config": {
            "collection_name": "sim", "path": ":memory:", "embedding_model_dims": HashingEmbedder().dim}},
        "llm": {"provider": "openai", "config": {"api_key": "unused", "model": "unused"}},
        "embedder": {"provider": "openai", "config": {"api_key": "unused", "embedding_dims": HashingEmbedder().dim}},
        "history_db_path": ":memory:",
        "custom_fact_extraction_prompt": with_session_date(extraction, DATE),
        "custom_update_memory_prompt": update_prompt,
    })
    memory.llm, memory.embedding_model = StandInLLM(), HashingMem0Embedder()
    for turn in turns:
        memory.add([{"role": "user", "content": turn}], user_id="alice")
    return sorted(item["memory"] for item in memory.get_all(user_id="alice")["results"])


def test_a_real_mem0_stores_the_default_prompts_mistakes_and_the_fixed_prompts_facts(hooks: dict[str, str]) -> None:
    assert stored(hooks["fact_extraction"], hooks["update_memory"]) == [
        "Alice enjoys chess as a hobby.",  # pottery, still true, was deleted
        "Alice has a sister named Carol.",  # Carol's move was skipped
        "Alice went hiking at Mount Rainier.",  # the date was dropped
        "Alice works at Globex.",  # the job change was not applied
    ]
    fixed = with_rules(hooks["fact_extraction"], EXTRACT_FIXES), with_rules(hooks["update_memory"], DECIDE_FIXES)
    assert stored(*fixed) == [
        "Alice enjoys chess as a hobby.",
        "Alice enjoys pottery as a hobby.",
        "Alice has a sister named Carol.",
        "Alice went hiking at Mount Rainier on 6 May 2023.",
        "Alice works at Hooli.",
        "Carol (Alice's sister) lives in Boston.",
    ]


def test_a_rewrite_that_breaks_mem0s_json_shape_loses_facts_without_a_crash(hooks: dict[str, str]) -> None:
    broken = "Extract what is worth remembering about the speaker and answer in JSON."
    assert stored(broken, hooks["update_memory"]) == []
