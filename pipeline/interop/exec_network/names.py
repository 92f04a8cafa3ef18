"""ExecNetwork ids: how our variable and operation names map to the reference tooling's.

`NAME_TABLE` with `their_name` / `our_name`, `split_full_name` (smartcomment's `class_name` and `name`),
`op_id_for` and `full_node_ids` (original ids of imported records kept). It reads and writes no document.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from memtrace_loop.pipeline.core.conventions import Namespace, prefix, prompt_name
from memtrace_loop.pipeline.core.graph import ExecutionGraph

ORIGINAL = "exec_network"  # meta key of an imported variable's / operation's original ExecNetwork record


@dataclass(frozen=True, slots=True)
class NameRule:
    """One name correspondence. `what` is "operation", "variable" (exact) or "prefix"; a prefix's
    `theirs` may hold `{sample}` (the graph id) and `rest` is the regex the remainder must match when
    mapping their name back. `stage` is our stage of an operation imported under that name."""

    what: str
    ours: str
    theirs: str
    rest: str = ".+"
    stage: str = ""


NAME_TABLE: tuple[NameRule, ...] = (
    NameRule("operation", "question_answering", "question-answering", stage="respond"),
    NameRule("operation", "llm_judge", "llm-judge", stage="judge"),
    NameRule("variable", prompt_name("extract"), "fact-extraction-system-prompt"),
    NameRule("variable", prompt_name("decide"), "memory-update-decision-prompt"),
    NameRule("variable", prompt_name("respond"), "question-answering-prompt"),
    NameRule("prefix", prefix(Namespace.TURN), "U{sample}:", rest=r"D\d+:\d+"),
    NameRule("prefix", prefix(Namespace.MEMORY), "memory-unit-"), NameRule("prefix", prefix(Namespace.QUERY), "query:"),
    NameRule("prefix", prefix(Namespace.ANSWER), "prediction:"),
    NameRule("prefix", prefix(Namespace.GOLD), "golden_answers:"),
    NameRule("prefix", prefix(Namespace.VERDICT), "judge_verdict:"),
    NameRule("variable", prompt_name("judge"), "judge_prompt:llm-judge"),
)

# the class names of an export: every namespace of ours, and the class of each name the table maps to
CLASS_NAMES: frozenset[str] = frozenset(
    {str(namespace) for namespace in Namespace}
    | {rule.theirs.split(":", 1)[0] for rule in NAME_TABLE if ":" in rule.theirs and "{" not in rule.theirs}
)

def _rule_rest(rule: NameRule) -> re.Pattern[str]:
    head = re.escape(rule.theirs).replace(re.escape("{sample}"), "[^:]+")
    return re.compile(f"{head}({rule.rest})")


def their_name(ours: str, sample: str, what: str = "variable") -> str:
    """Our variable (or operation) name in their conventions; unchanged when the table has none."""
    for rule in NAME_TABLE:
        if rule.what == what and rule.ours == ours:
            return rule.theirs
        if what == "variable" and rule.what == "prefix" and ours.startswith(rule.ours):
            return rule.theirs.format(sample=sample) + ours[len(rule.ours):]
    return ours


def our_name(theirs: str, what: str = "variable") -> str:
    """Their variable (or operation) name in ours; unchanged when the table has none."""
    for rule in NAME_TABLE:
        if rule.what == what and rule.theirs == theirs:
            return rule.ours
        if what == "variable" and rule.what == "prefix" and (match := _rule_rest(rule).fullmatch(theirs)):
            return rule.ours + match.group(1)
    return theirs


def split_full_name(full_name: str) -> tuple[str | None, str]:
    """smartcomment's (`class_name`, `name`) of an exported full name (`query:q1` -> ("query", "q1"); no class: None,
    never "")."""
    head, sep, rest = full_name.partition(":")
    if sep and head in CLASS_NAMES and any(c.isalnum() for c in rest):
        return head, rest
    return None, full_name


def stable_hex(*parts: object) -> str:
    """16 hex digits of the SHA-256 of `parts` joined by ":" (deterministic ids)."""
    return hashlib.sha256(":".join(map(str, parts)).encode()).hexdigest()[:16]


def op_id_for(graph: ExecutionGraph, op_id: str) -> str:
    """The ExecNetwork `op_id` that `to_exec_network` gives our operation `op_id` (e.g. "op:12"): the
    original id of an operation imported from ExecNetwork, else a deterministic one."""
    op = graph.operation(op_id)
    original = op.meta.get(ORIGINAL)
    if isinstance(original, dict) and isinstance(original.get("op_id"), str):
        return original["op_id"]
    return f"op-{stable_hex(graph.graph_id, op.seq)}"


def full_node_ids(graph: ExecutionGraph) -> dict[str, str]:
    """Our variable id -> their full node id: the original id of a variable imported from ExecNetwork,
    else our name mapped through the table (our name kept where the mapped name would collide)."""
    originals = {v.id: v.meta[ORIGINAL]["full_node_id"] for v in graph.variables()
                 if isinstance(v.meta.get(ORIGINAL), dict) and "full_node_id" in v.meta[ORIGINAL]}
    if originals:
        return {v.id: originals.get(v.id, v.id) for v in graph.variables()}
    mapped = {name: their_name(name, graph.graph_id) for name in graph.names()}
    counts: dict[str, int] = {}
    for theirs in mapped.values():
        counts[theirs] = counts.get(theirs, 0) + 1
    names = {ours: theirs if counts[theirs] == 1 and (theirs == ours or theirs not in mapped) else ours
             for ours, theirs in mapped.items()}
    return {v.id: f"{names[v.name]}@{v.version}" for v in graph.variables()}

