"""The stand-in's reaction to quoted information in a stage's instruction (`pipeline.sim.hints`), per row.

Every row of the world's table and every row a memory system adds has a case: its output without a
quote, with a quote naming an item of its inputs (the named items get every fix of the stage, the
others stay), and with a quote naming nothing in its inputs (unchanged); two wordings around the same
quote give the same output. Quotes never add information the inputs lack, never add misfires, and the
quoted strings of mem0's default prompts (JSON examples, prose examples) name nothing in the world.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from mem0.configs import prompts as mem0_prompts
from mem0.configs.prompts import get_update_memory_messages
from memtrace_loop.pipeline.sim.handlers import answer_question, extract_facts
from memtrace_loop.pipeline.sim.hints import Quote, quotes_in, words
from memtrace_loop.pipeline.sim.protocol import StageRequest
from memtrace_loop.pipeline.sim.rules import RULES_BY_ID, RuleEffect
from memtrace_loop.pipeline.sim.stages import STAGES, SimStage
from memtrace_loop.pipeline.sim.stand_in import respond
from memtrace_loop.pipeline.sim.system_stages import system_stages
from memtrace_loop.pipeline.sim.world import generate_locomo

BASE = "Do this stage of the memory system carefully."
WORDINGS = (
    'Make sure your output keeps this information: "{}" (a later question depends on it).',
    "A reviewer flagged this part of the conversation as important: \u201c{}\u201d. Use it.",
)
UNRELATED = "Bob bought a red kayak in Chicago"
ROWS: tuple[SimStage, ...] = (*STAGES, *system_stages())
TURN = "[8 May 2023] Alice: My sister Carol just moved to Denver. I went hiking at Mount Rainier yesterday!"
TWO_TURNS = (
    "[8 May 2023] Alice: My sister Carol just moved to Denver.\n"
    "[8 May 2023] Bob: I went hiking at Mount Rainier yesterday!"
)
HIKE_LINE = "Memory: Alice went hiking at Mount Rainier. Time: 8 May 2023"
CONTEXT = f"{HIKE_LINE}\nMemory: Alice lives in Boston. Time: 1 May 2023"
RETRIEVED = (
    "Episode: Alice: family and friends (8 May 2023)\n"
    "Memory: Alice has a sister named Carol. Time: 8 May 2023\n"
    "Memory: Alice lives in Boston. Time: 1 May 2023"
)


def _dspy_row(name: str, **inputs: str) -> Callable[[str], dict[str, Any]]:
    row = next(r for r in ROWS if r.name == name)
    return lambda instruction: dict(row.handler(StageRequest(instruction, inputs=dict(inputs))))


def _mem0_extraction(instruction: str) -> dict[str, Any]:
    system = f'{instruction}\nReturn JSON {{"facts": ["one fact", "another fact"]}}. Today\'s date is 2023-05-08.'
    user = "Input:\nuser: Alice: My sister Carol just moved to Denver. I went hiking at Mount Rainier yesterday!"
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    return dict(json.loads(respond(messages, foreign=ROWS)))


def _mem0_update(instruction: str) -> dict[str, Any]:
    memories = [{"id": "0", "text": "Alice has a pet dog named Max."}, {"id": "1", "text": "Alice lives in Boston."}]
    facts = ["Alice has a pet cat named Luna.", "Alice lives in Austin."]
    messages = [{"role": "user", "content": get_update_memory_messages(memories, facts, instruction)}]
    return dict(json.loads(respond(messages, foreign=ROWS)))


@dataclass(frozen=True)
class Case:
    """How to ask one row (instruction -> output values), a quote naming an item of its inputs, and
    the output expected under that quote."""

    ask: Callable[[str], dict[str, Any]]
    named: str
    expected: dict[str, Any]


CARRIED = [
    "Alice has a sister named Carol.", "Carol (Alice's sister) lives in Denver.", "Alice went hiking at Mount Rainier.",
]
CASES: dict[str, Case] = {
    # the third party is extracted with its subject; the unquoted hiking sentence keeps losing its date
    "extract": Case(_dspy_row("extract", turn=TURN), "My sister Carol just moved to Denver", {"facts": CARRIED}),
    # the quoted memory is no longer deleted by a compatible fact; the unquoted city is still not updated
    "decide": Case(
        _dspy_row(
            "decide",
            existing_memories="[0] Alice has a pet dog named Max.\n[1] Alice lives in Boston.",
            new_facts=json.dumps(["Alice has a pet cat named Luna.", "Alice lives in Austin."]),
        ),
        "[1 May 2023] Alice: I have a dog named Max.",
        {"actions": [
            {"event": "ADD", "text": "Alice has a pet cat named Luna."}, {"event": "NONE", "id": "1", "text": ""},
        ]},
    ),
    "answer": Case(
        _dspy_row("answer", context=CONTEXT, question="When did Alice go hiking?"), HIKE_LINE, {"answer": "8 May 2023"}
    ),
    # no rules: nothing a quote can raise
    "detect_boundary": Case(
        _dspy_row("detect_boundary", open_episode="[8 May 2023] Alice: My sister Carol just moved to Denver.",
                  new_turn="[8 May 2023] Bob: I went hiking at Mount Rainier yesterday!"),
        "I went hiking at Mount Rainier yesterday", {"starts_new_episode": True},
    ),
    "write_events": Case(
        _dspy_row("write_events", turns=TWO_TURNS),
        "Bob: I went hiking at Mount Rainier yesterday!",
        {"events": [
            {"text": "Alice has a sister named Carol.", "time": "8 May 2023"},
            {"text": "Bob went hiking at Mount Rainier on 7 May 2023.", "time": "7 May 2023"},
        ]},
    ),
    "write_episode": Case(
        _dspy_row("write_episode", turns=TWO_TURNS),
        "My sister Carol just moved to Denver",
        {"title": "Alice: family and friends; Bob: outings",
         "narrative": "On 8 May 2023, Alice has a sister named Carol. Bob went hiking at Mount Rainier."},
    ),
    "check_sufficiency": Case(
        _dspy_row("check_sufficiency", question="Where does Alice live?", retrieved_episodes=RETRIEVED),
        "Memory: Alice lives in Austin. Time: 9 May 2023", {"sufficient": False},
    ),
    "expand_queries": Case(
        _dspy_row("expand_queries", question="Where does Alice's sister live?", retrieved_episodes=RETRIEVED),
        "Carol lives in Denver now", {"queries": ["alice sister live", "Where does Carol live?"]},
    ),
    "fact_extraction": Case(_mem0_extraction, "My sister Carol just moved to Denver", {"facts": CARRIED}),
    "update_memory": Case(
        _mem0_update, "[1 May 2023] Alice: I have a dog named Max.",
        {"memory": [{"id": "2", "text": "Alice has a pet cat named Luna.", "event": "ADD"},
                    {"id": "1", "text": "Alice lives in Boston.", "event": "NONE"}]},
    ),
}
FIXLESS = {row.name for row in ROWS if not row.fixes()} - {"check_sufficiency"}


def test_every_row_of_the_world_has_a_case() -> None:
    assert {row.name for row in ROWS} == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_quote_naming_an_input_changes_exactly_the_named_items(name: str) -> None:
    case = CASES[name]
    before = case.ask(BASE)
    quoted = case.ask(f"{BASE} {WORDINGS[0].format(case.named)}")
    assert quoted == case.expected
    if name in FIXLESS:
        assert quoted == before  # a stage without fix rules is not changed by a quote
    else:
        assert quoted != before


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_wording_around_a_quote_does_not_matter(name: str) -> None:
    case = CASES[name]
    outputs = [case.ask(f"{BASE} {wording.format(case.named)}") for wording in WORDINGS]
    assert outputs == [case.expected, case.expected]


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_quote_naming_nothing_in_the_inputs_changes_nothing(name: str) -> None:
    case = CASES[name]
    assert case.ask(f"{BASE} {WORDINGS[0].format(UNRELATED)}") == case.ask(BASE)


def test_a_quote_adds_no_information_the_inputs_lack() -> None:
    rules = frozenset[str]()
    hint = quotes_in(WORDINGS[0].format("[8 May 2023] Bob: I live in Chicago now."))
    assert answer_question(CONTEXT, "Where does Bob live?", rules, hint) == answer_question(
        CONTEXT, "Where does Bob live?", rules
    )  # the answer stage never answers from the quote itself
    absent = quotes_in(WORDINGS[0].format("My brother Tom works as a chef"))
    assert extract_facts(TURN, rules, absent) == extract_facts(TURN, rules)
    ask = CASES["expand_queries"].ask  # a person no retrieved memory names is never asked about
    assert ask(WORDINGS[0].format("Dave lives in Denver now")) == ask(BASE)


def test_a_quoted_turn_resolves_its_dates_and_names_its_subject() -> None:
    facts = extract_facts(TURN, frozenset(), quotes_in(WORDINGS[1].format(TURN)))
    assert facts == [
        "Alice has a sister named Carol.",
        "Carol (Alice's sister) lives in Denver.",
        "Alice went hiking at Mount Rainier on 7 May 2023.",
    ]


def test_quoted_lines_are_answered_with_fixes_only_and_stated_misfires_still_apply() -> None:
    context = (
        "Memory: Nora enjoys pottery as a hobby. Time: 1 May 2023\n"
        "Memory: Nora enjoys painting as a hobby. Time: 3 May 2023\n"
        "Memory: Nora lives in Boston. Time: 3 May 2023"
    )
    question = "What hobbies does Nora have?"
    hint = WORDINGS[0].format("Nora enjoys pottery as a hobby. Nora enjoys painting as a hobby.")
    assert answer_question(context, question, frozenset(), quotes_in(hint)) == "pottery and painting"
    misfire = frozenset({"one_answer"})  # stated by the instruction: obeyed, as without the quote
    assert answer_question(context, question, misfire, quotes_in(hint)) == "painting"
    assert all(RULES_BY_ID[r].effect == RuleEffect.FIX for r in ("use_dates", "abstain"))
    adversarial = "Where does Bob live?"  # quoted lines that do not answer: abstain, a fix
    assert answer_question(context, adversarial, frozenset(), quotes_in(hint)) == "Not mentioned in the conversation."
    assert answer_question(context, adversarial, frozenset()) == "Boston"


@pytest.mark.parametrize(
    ("instruction", "spans"),
    [
        ('Use the event "ADD", "UPDATE" or "NONE".', []),  # one content word each
        ('Reply {"facts": ["Alice likes jazz", "Bob runs marathons"]}.', []),  # JSON key and list items
        ('Example: {"text" : "Loves cheese pizza", "event" : "UPDATE"}', []),  # JSON values
        ("Keep 'Alice lives in Boston' in mind.", []),  # single quotes never count
        ('Keep this: "Alice lives in Boston" (a question needs it).', ["Alice lives in Boston"]),
        ("Keep \u201cAlice lives in Boston\u201d.", ["Alice lives in Boston"]),
        ('Two: "Alice lives in Boston", and "Bob works at Globex".', ["Alice lives in Boston", "Bob works at Globex"]),
    ],
)
def test_what_counts_as_a_quote(instruction: str, spans: list[str]) -> None:
    assert [quote.text for quote in quotes_in(instruction).quotes] == spans


def test_when_a_quote_names_an_item() -> None:
    item = words("Alice lives in Boston.")
    assert Quote("", words("I just moved to Boston")).names(item)
    assert Quote("", words("[8 May 2023] Alice: I moved to Boston")).names(item)
    assert not Quote("", words("Carol lives in Denver")).names(item)  # "lives" alone is no information
    assert not Quote("", words("[8 May 2023] Alice: I have a dog named Max and a cat named Luna.")).names(item)


def _unquoted(prompt: str) -> str:
    return prompt.replace('"', "'")


def test_mem0s_default_prompts_behave_as_without_their_quotes() -> None:
    """mem0's defaults quote JSON shapes (not counted) and a few prose examples ("Likes cheese pizza"):
    the rows' outputs over a generated conversation are the same with those quotes made single."""
    extraction, update = mem0_prompts.USER_MEMORY_EXTRACTION_PROMPT, mem0_prompts.DEFAULT_UPDATE_MEMORY_PROMPT
    assert not quotes_in(extraction) and quotes_in(update)  # the update default has prose quotes
    memories: list[dict[str, str]] = []
    checked = 0
    for sample in generate_locomo(7, 1, sessions_per_conversation=4):
        conversation = sample["conversation"]
        for key in (k for k in conversation if k.startswith("session_") and not k.endswith("date_time")):
            for turn in conversation[key]:
                user = f"Input:\nuser: {turn['speaker']}: {turn['text']}"
                replies = [
                    respond([{"role": "system", "content": p}, {"role": "user", "content": user}], foreign=ROWS)
                    for p in (extraction, _unquoted(extraction))
                ]
                assert replies[0] == replies[1]
                facts = json.loads(replies[0])["facts"]
                if not facts:
                    continue
                decided = [
                    respond([{"role": "user", "content": get_update_memory_messages(memories, facts, p)}], foreign=ROWS)
                    for p in (update, _unquoted(update))
                ]
                assert decided[0] == decided[1]
                checked += 1
                memories.extend({"id": str(len(memories) + i), "text": f} for i, f in enumerate(facts))
    assert checked >= 10
