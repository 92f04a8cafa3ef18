"""The graph conventions: how variables and operations of an execution graph are named and typed.

A variable's name is `<namespace>:<key>` (its id adds `@<version>`); the namespace fixes its kind (`VarKind`):

| name                     | kind        | value                                             | written by            |
|--------------------------|-------------|---------------------------------------------------|-----------------------|
| `turn:<turn_id>`         | turn        | one rendered conversation turn                    | every system          |
| `facts:<turn_id>`        | facts       | JSON list of the facts extracted from the turn    | mem0 `extract`        |
| `similar:<turn_id>`      | retrieved   | existing memories shown to `decide`               | mem0 `search_similar` |
| `decision:<turn_id>`     | decision    | JSON list of ADD/UPDATE/DELETE/NONE actions       | mem0 `decide`         |
| `memory:<unit_id>`       | memory      | a memory unit (deleted version: "")               | mem0 `store`          |
| `entry:<turn_id>`        | buffer      | a buffer entry (trimmed version: "")              | long_context          |
| `chunk:<index>`          | chunk       | a chunk of consecutive turns                      | rag `chunk`           |
| `boundary:<turn_id>`     | boundary    | whether the turn starts a new episode             | evermemos             |
| `event:<n>`              | event       | one dated atomic fact of an episode               | evermemos             |
| `episode:<n>`            | episode     | an episode's title and narrative                  | evermemos             |
| `query:<question_id>`    | query       | the question                                      | every system          |
| `sufficiency:<qid>`      | sufficiency | verdict of the sufficiency check                  | evermemos             |
| `expanded:<qid>`         | query       | JSON list of extra queries                        | evermemos             |
| `retrieved:<qid>`        | context     | the context a retrieval gave `respond`            | mem0, rag, evermemos  |
| `context:buffer`         | context     | the whole live buffer (shared by all questions)   | long_context          |
| `answer:<qid>`           | answer      | the generated answer                              | `respond` (shared)    |
| `gold:<qid>`             | gold        | the gold answer                                   | runner (judge)        |
| `verdict:<qid>`          | verdict     | CORRECT / WRONG / FAILED                          | runner (judge)        |
| `prompt:<stage>`         | prompt      | the instruction of an LLM stage                   | `Tracer` (every LLM op)|

A retrieval may record `NEAR_MISSES` (units ranked just below its cut); `MEMORY_KINDS` are memory units,
`QUESTION_SIDE_KINDS` the answering side; a foreign kind string is kept as is (`as_var_kind`). Names only:
nothing is recorded or stored here.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from functools import partial
from types import MappingProxyType


class OpKind(StrEnum):
    EXTRACTION = "extraction"
    UPDATE = "update"
    DELETION = "deletion"
    RETRIEVAL = "retrieval"
    RESPONSE = "response"
    JUDGE = "judge"
    OTHER = "other"


class OpStatus(StrEnum):
    OK = "ok"
    FAILED = "failed"


class VarKind(StrEnum):
    TURN = "turn"
    FACTS = "facts"
    RETRIEVED = "retrieved"
    DECISION = "decision"
    MEMORY = "memory"
    BUFFER = "buffer"
    CHUNK = "chunk"
    BOUNDARY = "boundary"
    EVENT = "event"
    EPISODE = "episode"
    QUERY = "query"
    SUFFICIENCY = "sufficiency"
    CONTEXT = "context"
    ANSWER = "answer"
    GOLD = "gold"
    VERDICT = "verdict"
    PROMPT = "prompt"


class Namespace(StrEnum):
    """The part of a variable name before the first colon."""

    TURN = "turn"
    FACTS = "facts"
    SIMILAR = "similar"
    DECISION = "decision"
    MEMORY = "memory"
    ENTRY = "entry"
    CHUNK = "chunk"
    BOUNDARY = "boundary"
    EVENT = "event"
    EPISODE = "episode"
    QUERY = "query"
    SUFFICIENCY = "sufficiency"
    EXPANDED = "expanded"
    RETRIEVED = "retrieved"
    CONTEXT = "context"
    ANSWER = "answer"
    GOLD = "gold"
    VERDICT = "verdict"
    PROMPT = "prompt"


_OTHER_KIND = {Namespace.SIMILAR: VarKind.RETRIEVED, Namespace.ENTRY: VarKind.BUFFER, Namespace.EXPANDED: VarKind.QUERY,
               Namespace.RETRIEVED: VarKind.CONTEXT}
KIND_BY_NAMESPACE: Mapping[Namespace, VarKind] = MappingProxyType(
    {ns: _OTHER_KIND.get(ns) or VarKind(ns.value) for ns in Namespace}
)

MEMORY_KINDS: frozenset[VarKind] = frozenset(
    {VarKind.MEMORY, VarKind.CHUNK, VarKind.BUFFER, VarKind.EPISODE, VarKind.EVENT}
)
QUESTION_SIDE_KINDS: frozenset[VarKind] = frozenset(
    {VarKind.QUERY, VarKind.CONTEXT, VarKind.ANSWER, VarKind.GOLD, VarKind.VERDICT}
)
CONSTRUCTION_OP_KINDS: frozenset[OpKind] = frozenset({OpKind.EXTRACTION, OpKind.UPDATE, OpKind.DELETION})

KNOBS_META = "knobs"  # conversation-graph meta: the memory system's knob values the run used (replay reads them)
NEAR_MISSES = "near_misses"  # retrieval meta: unit variable ids ranked just below the cut, best first

SEPARATOR = ":"
VERSION_MARK = "@"
BUFFER_CONTEXT_KEY = "buffer"  # long_context's one shared context: `context:buffer`


def as_var_kind(kind: str) -> VarKind | str:
    """`kind` as a `VarKind` when it is one of ours; another tool's kind string is kept unchanged."""
    try:
        return VarKind(kind)
    except ValueError:
        return kind


# ------------------------------------------------------------------ names

def var_name(namespace: Namespace, key: object) -> str:
    """`<namespace>:<key>`, e.g. `var_name(Namespace.TURN, "D3:7") == "turn:D3:7"`."""
    return f"{namespace}{SEPARATOR}{key}"


def prefix(namespace: Namespace) -> str:
    """`<namespace>:`, the prefix every name of the namespace starts with (for `graph.names(prefix)`)."""
    return f"{namespace}{SEPARATOR}"


# `<namespace>:<key>` of one namespace: `turn_name("D3:7") == "turn:D3:7"`
turn_name = partial(var_name, Namespace.TURN)
facts_name = partial(var_name, Namespace.FACTS)
similar_name = partial(var_name, Namespace.SIMILAR)
decision_name = partial(var_name, Namespace.DECISION)
memory_name = partial(var_name, Namespace.MEMORY)
entry_name = partial(var_name, Namespace.ENTRY)
chunk_name = partial(var_name, Namespace.CHUNK)
boundary_name = partial(var_name, Namespace.BOUNDARY)
event_name = partial(var_name, Namespace.EVENT)
episode_name = partial(var_name, Namespace.EPISODE)
query_name = partial(var_name, Namespace.QUERY)
sufficiency_name = partial(var_name, Namespace.SUFFICIENCY)
expanded_name = partial(var_name, Namespace.EXPANDED)
retrieved_name = partial(var_name, Namespace.RETRIEVED)
answer_name = partial(var_name, Namespace.ANSWER)
gold_name = partial(var_name, Namespace.GOLD)
verdict_name = partial(var_name, Namespace.VERDICT)
prompt_name = partial(var_name, Namespace.PROMPT)
BUFFER_CONTEXT_NAME = var_name(Namespace.CONTEXT, BUFFER_CONTEXT_KEY)


def first_version(name: str) -> str:
    """The id of version 1 of `name` (turns, chunks: values written once)."""
    return f"{name}{VERSION_MARK}1"


# ------------------------------------------------------------------ parsing

def name_of(node: str) -> str:
    """The name of a variable id (`turn:D3:7@1` -> `turn:D3:7`); a bare name is returned unchanged."""
    return node.rsplit(VERSION_MARK, 1)[0] if VERSION_MARK in node else node


def split_name(node: str) -> tuple[Namespace, str]:
    """(namespace, key) of a variable name or id: `memory:m17@3` -> (Namespace.MEMORY, "m17")."""
    namespace, sep, key = name_of(node).partition(SEPARATOR)
    if not sep:
        raise ValueError(f"{node!r} is not a `<namespace>:<key>` variable name")
    try:
        return Namespace(namespace), key
    except ValueError:
        raise ValueError(f"{node!r}: unknown namespace {namespace!r}") from None


def key_of(node: str, namespace: Namespace) -> str:
    """The key of a variable name or id in `namespace` (`turn:D3:7@1` -> `D3:7`); ValueError otherwise."""
    found, key = split_name(node)
    if found != namespace:
        raise ValueError(f"{node!r} is not in namespace {namespace.value!r}")
    return key


def turn_id_of(node: str) -> str:
    """The turn id of a `turn:` variable name or id (`turn:D3:7@1` -> `D3:7`); a variable outside the
    namespace (a turn of an imported graph) keeps its name."""
    return name_of(node).removeprefix(prefix(Namespace.TURN))


def is_in(node: str, namespace: Namespace) -> bool:
    """Whether a variable name or id is in `namespace`."""
    return node.startswith(prefix(namespace))


def kind_of(node: str) -> VarKind:
    """The kind a variable name or id has by our conventions (ValueError outside them)."""
    return KIND_BY_NAMESPACE[split_name(node)[0]]
