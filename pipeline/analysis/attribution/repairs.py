"""How replay repairs one blamed operation, per operation kind, and what each repair may carry.

A repair writes what a FIXED stage could have written from what it read; the only ground truth it may
carry is the case's evidence turns and gold answer, where a fixed stage could know them:
`RERUN` (an LLM construction stage called again with a hint), `REBUILD` (knobs reset), `WIDEN` (`top_k`
raised just enough), `STEER` (a steering stage told what to reach), `SWAP` (a missed unit that was in memory
in place of the lowest hit), `ANSWER` (the answer stage pointed at its own context lines). A repair that
would have to carry the gold answer itself does not exist (`plan_repair` returns None). It runs nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from memtrace_loop.memory_systems.answering import RESPOND_STAGE
from memtrace_loop.memory_systems.base import MemorySystem, ranked_depth
from memtrace_loop.memory_systems.stages import StageRepair, StageSpec
from memtrace_loop.pipeline.analysis.attribution.records import Attribution, ErrorType, Fault, Tunable
from memtrace_loop.pipeline.backends.text import alnum_words
from memtrace_loop.pipeline.core.conventions import (
    MEMORY_KINDS,
    NEAR_MISSES,
    OpKind,
    VarKind,
    answer_name,
    first_version,
    kind_of,
    query_name,
    turn_name,
)
from memtrace_loop.pipeline.core.graph import ExecutionGraph, GraphError

CONSTRUCTION_ERRORS = frozenset({ErrorType.EXTRACTION, ErrorType.UPDATE, ErrorType.DELETION})
# words too common to tell that a context line carries a turn's information
_COMMON = frozenset(
    "a an and are as at be been but by did do does for from had has have he her his i in is it its me my "
    "of on or our she so that the their them they this to was we were what when where which who will with "
    "you your said says memory time timestamp date episode narrative title events event "
    "january february march april may june july august september october november december "
    "monday tuesday wednesday thursday friday saturday sunday".split()
)  # labels of rendered memories, and calendar words: a date alone does not say which information a line holds
MIN_SHARED_WORDS = 2
MIN_LINE_CHARS = 20  # a shorter line (a title, a date) does not carry a unit's information by being in it


class Repair(StrEnum):

    RERUN = "rerun"
    REBUILD = "rebuild"
    WIDEN = "widen"
    STEER = "steer"
    SWAP = "swap"
    ANSWER = "answer"


@dataclass(frozen=True)
class RepairPlan:
    """One planned repair: the fault, how, the `top_k` a `WIDEN` needs, the units a `STEER` or `SWAP` is about."""

    fault: Fault
    kind: Repair
    top_k: int = 0
    missed: tuple[str, ...] = ()


def plan_repair(system: MemorySystem, graph: ExecutionGraph, fault: Fault) -> RepairPlan | None:
    """The repair a fixed stage could make for `fault` (None when none exists)."""
    if fault.stage == RESPOND_STAGE or fault.error_type == ErrorType.RESPONSE:
        return RepairPlan(fault, Repair.ANSWER) if fault.op in graph else None
    if fault.error_type in CONSTRUCTION_ERRORS:
        return _construction_plan(system, fault)
    return _retrieval_plan(system, graph, fault)


def _construction_plan(system: MemorySystem, fault: Fault) -> RepairPlan | None:
    spec = next((s for s in system.stages if s.name == fault.stage), None)
    if spec is None:
        return None
    if spec.llm:
        return RepairPlan(fault, Repair.RERUN)
    if spec.repair == StageRepair.RESET_KNOBS and not system.construction_stages:
        return RepairPlan(fault, Repair.REBUILD)
    return None


def _retrieval_plan(system: MemorySystem, graph: ExecutionGraph, fault: Fault) -> RepairPlan | None:
    missed = tuple(v for v in fault.restore if v in graph and graph.variable(v).kind in MEMORY_KINDS)
    top_k = needed_top_k(graph, fault)
    if fault.tunable == Tunable.KNOBS and top_k is not None and widen_spec(system) is not None:
        return RepairPlan(fault, Repair.WIDEN, top_k=top_k, missed=missed)
    if fault.tunable == Tunable.KNOBS and top_k is None and widen_spec(system) is not None:
        # nothing named was ranked (a unit a repaired stage writes, or one deleted before the search)
        k = graph.operation(fault.op).meta.get("k") if fault.op in graph else None
        return RepairPlan(fault, Repair.WIDEN, top_k=ranked_depth(k), missed=missed) if isinstance(k, int) else None
    steering = {s.name for s in system.stages if s.repair == StageRepair.STEER}
    if fault.stage in steering:  # the steering step itself: told what the search must reach
        return RepairPlan(fault, Repair.STEER, missed=missed)
    if not missed:
        return None
    if fault.tunable == Tunable.PROMPT and steering:
        return RepairPlan(fault, Repair.STEER, missed=missed)
    return RepairPlan(fault, Repair.SWAP, missed=missed)


def swappable(graph: ExecutionGraph, unit: str, search_op: str, revived_by: Collection[str] = ()) -> bool:
    """Whether a `SWAP` may put `unit` into the context of `search_op`: no later version of it was written
    before the search, or the first that was lies downstream of a repaired operation in `revived_by`."""
    if unit not in graph or search_op not in graph:
        return False
    versions = [v.id for v in graph.versions(graph.variable(unit).name)]
    later = versions[versions.index(unit) + 1:]
    at = graph.operation(search_op).seq
    replaced = [op for v in later if (op := graph.producer(v)) is not None and op.seq < at]
    if not replaced:
        return True
    return bool(graph.ancestors(replaced[0].id) & set(revived_by))  # the first overwrite was the repaired one's


def widen_spec(system: MemorySystem) -> StageSpec | None:
    """The system's `WIDEN` stage (its retrieval; its first knob is `top_k`), None without one."""
    return next((s for s in system.stages if s.repair == StageRepair.WIDEN and s.knobs), None)


def reach(k: int, hits: Collection[str], near: Sequence[tuple[str, str]], texts: Collection[str]) -> tuple[int, bool]:
    """The `top_k` a search that cut at `k` (the texts of its hits; its ranked near misses as (variable
    id, text)) needs to hold every one of `texts` it ranked, and whether it ranked them all. Pure.

    >>> near = [("memory:m4@1", "d"), ("memory:m5@1", "e"), ("memory:m6@2", "f")]
    >>> reach(3, {"a", "b", "c"}, near, {"a", "e"}), reach(3, {"a", "b", "c"}, near, {"a", "z"})
    ((5, True), (3, False))
    """
    missing = set(texts) - set(hits)
    ranks = [i + 1 for i, (_, text) in enumerate(near) if text in missing]
    reached = k + _episode_span([v for v, _ in near], max(ranks)) if ranks else k
    return reached, missing <= {text for _, text in near}


def needed_top_k(graph: ExecutionGraph, fault: Fault) -> int | None:
    """The `top_k` reaching the deepest restored unit the fault's retrieval ranked below its cut (None: unranked)."""
    if fault.op not in graph:
        return None
    meta = graph.operation(fault.op).meta
    k, near = meta.get("k"), list(meta.get(NEAR_MISSES, ()))
    ranks = [near.index(v) + 1 for v in fault.restore if v in near]
    if not isinstance(k, int) or not ranks:
        return None
    return k + _episode_span(near, max(ranks))


def _episode_span(near: Sequence[str], rank: int) -> int:
    """How many ranked units the first `rank` near misses are (an episode and its events rank as one)."""
    if not any(kind_of(v) == VarKind.EPISODE for v in near):
        return rank
    return max(sum(1 for v in near[:rank] if kind_of(v) == VarKind.EPISODE), 1)


def answer_fault(graph: ExecutionGraph, attribution: Attribution) -> Fault | None:
    """The case's answer operation as a fault a joint repair may include (None without one)."""
    answer = graph.latest(answer_name(attribution.question_id))
    op = graph.producer(answer.id) if answer is not None else None
    if op is None:
        return None
    reason = "the answer stage did not use what its context says"
    return Fault(op.id, op.name, op.stage, ErrorType.RESPONSE, Tunable.PROMPT, reason, (), op.seq)


def answer_repairable(graph: ExecutionGraph, attribution: Attribution, fault: Fault) -> bool:
    """Whether the answer's recorded context has a line carrying the evidence (else only the gold would do)."""
    op = graph.operation(fault.op)
    contexts = [graph.variable(v).value for v in op.inputs if graph.variable(v).kind == VarKind.CONTEXT]
    known = evidence_units(graph, attribution)
    texts = evidence_texts(graph, attribution)
    return any(evidence_lines(context, texts, known) for context in contexts)


def evidence_units(graph: ExecutionGraph, attribution: Attribution) -> list[str]:
    """Texts of the memory units descending from the evidence turns that share words with them."""
    turns = [v for v in (first_version(turn_name(t)) for t in attribution.evidence) if v in graph]
    below: frozenset[str] = frozenset().union(*(graph.descendants(v) for v in turns)) if turns else frozenset()
    words = [_words(graph.variable(v).value) for v in turns]
    units = (graph.variable(v).value for v in sorted(below) if _is_unit(graph, v))
    return [u for u in units if any(len(_words(u) & w) >= MIN_SHARED_WORDS for w in words)]


def _is_unit(graph: ExecutionGraph, node: str) -> bool:
    try:
        var = graph.variable(node)
    except GraphError:  # an operation id
        return False
    return var.kind in MEMORY_KINDS and bool(var.value)


def steering_fault(
    system: MemorySystem, graph: ExecutionGraph, attribution: Attribution, missed: Fault
) -> Fault | None:
    """The case's steering operation as a prompt fault a replay may try alone or jointly (None when there is none)."""
    steering = {s.name for s in system.stages if s.repair == StageRepair.STEER}
    query = graph.latest(query_name(attribution.question_id))
    if not steering or query is None:
        return None
    ops = [o for o in graph.consumers(query.id) if o.stage in steering]
    writers = {s.name for s in system.stages if s.name in steering and _writes_queries(system, s.name)}
    op = next((o for o in ops if o.stage in writers), ops[0] if ops else None)  # the step that writes queries
    if op is None:
        return None
    reason = "the steering step did not ask for what the search missed"
    return Fault(op.id, op.name, op.stage, ErrorType.RETRIEVAL, Tunable.PROMPT, reason, missed.restore, op.seq)


def reader_faults(system: MemorySystem, graph: ExecutionGraph, attribution: Attribution) -> tuple[Fault, ...]:
    """The extraction operations reading an evidence turn, as faults a replay may try: an LLM stage's as a
    prompt fault; a `RESET_KNOBS` stage's (chunking) as a knob fault, once per stage, when its knobs are off
    their defaults."""
    writers = {s.name for s in system.stages if s.llm and s.construction}
    off_default = set(system.non_default_knobs())
    cutters = {s.name for s in system.stages if s.repair == StageRepair.RESET_KNOBS and s.construction
               and not s.llm and off_default & set(s.knobs)}
    turns = [v for v in (first_version(turn_name(t)) for t in attribution.evidence) if v in graph]
    ops = [(turn, op) for turn in turns for op in graph.consumers(turn) if op.kind == OpKind.EXTRACTION]
    found = [
        Fault(op.id, op.name, op.stage, ErrorType.EXTRACTION, Tunable.PROMPT,
              "the stage that read the evidence turn could have written it better", (turn,), op.seq)
        for turn, op in ops if op.stage in writers
    ]
    first_cut = {op.stage: (turn, op) for turn, op in reversed(ops) if op.stage in cutters}
    found += [
        Fault(op.id, op.name, op.stage, ErrorType.EXTRACTION, Tunable.KNOBS,
              f"the units {op.stage} cut from the evidence turn may be why the search missed them", (turn,), op.seq)
        for turn, op in first_cut.values()
    ]
    return tuple(found)


def retrieval_knob_fault(system: MemorySystem, graph: ExecutionGraph, attribution: Attribution) -> Fault | None:
    """The case's retrieval as a knob fault with nothing named missed (None without a `WIDEN` stage)."""
    widen = widen_spec(system)
    query = graph.latest(query_name(attribution.question_id))
    if widen is None or query is None:
        return None
    op = next((o for o in graph.consumers(query.id) if o.stage == widen.name), None)
    if op is None:
        return None
    reason = "the retrieval's top_k cut what a repaired stage wrote"
    return Fault(op.id, op.name, op.stage, ErrorType.RETRIEVAL, Tunable.KNOBS, reason, (), op.seq)


def _writes_queries(system: MemorySystem, stage: str) -> bool:
    predictor = dict(system.named_predictors()).get(stage)
    return predictor is not None and "queries" in predictor.signature.output_fields


# ---------------------------------------------------------------------------------------------- hints


def evidence_texts(graph: ExecutionGraph, attribution: Attribution, near_op: str | None = None) -> tuple[str, ...]:
    """The evidence turns' recorded texts; only those upstream of `near_op` when any is."""
    turns = [first_version(turn_name(t)) for t in attribution.evidence]
    turns = [v for v in turns if v in graph]
    if near_op is not None and near_op in graph:
        read = graph.ancestors(near_op)
        turns = [v for v in turns if v in read] or turns
    return tuple(graph.variable(v).value for v in turns)


def _quoted(texts: Iterable[str]) -> str:
    return " ".join(" ".join(t.split()) for t in texts).replace('"', "'")


def construction_hint(texts: Iterable[str], gold: str) -> str:
    """The one sentence added to a construction stage's instruction: the information it must keep."""
    return (
        f'Make sure your output keeps this information: "{_quoted(texts)}" '
        f'(a later question about it is answered by "{gold.replace(chr(34), chr(39))}").'
    )


def steer_hint(texts: Iterable[str]) -> str:
    """The one sentence added to a steering stage's instruction: the memory the search must reach."""
    return f'Make sure the search also reaches this memory: "{_quoted(texts)}".'


def answer_hint(lines: Iterable[str]) -> str:
    """The one sentence added to the answer stage's instruction: the context lines to answer from."""
    return f'Answer from this memory in the context: "{_quoted(lines)}".'


def evidence_lines(context: str, evidence: Iterable[str], units: Iterable[str] = ()) -> tuple[str, ...]:
    """The lines of `context` holding or held in one of `units` (texts descending from the evidence), or
    sharing at least `MIN_SHARED_WORDS` uncommon words with an evidence text and half of their own."""
    wanted = [_words(t) for t in evidence]
    held = [" ".join(u.split()) for u in units if u.strip()]
    found = []
    for line in (line.strip() for line in context.splitlines()):
        if not line:
            continue
        words = _words(line)
        shared = max((len(words & w) for w in wanted), default=0)
        folded = " ".join(line.split())
        held_here = any(u in folded or (len(folded) >= MIN_LINE_CHARS and folded in u) for u in held)
        if held_here or (shared >= MIN_SHARED_WORDS and 2 * shared >= len(words)):
            found.append(line)
    return tuple(dict.fromkeys(found))


def superseded(lines: Sequence[str], repaired: Sequence[str]) -> tuple[str, ...]:
    """`lines` without those a repaired unit (not the line itself) holds every uncommon word of."""
    better = [(" ".join(r.split()), _words(r)) for r in repaired]
    kept = [
        line for line in lines
        if not any(words and _words(line) <= words and text not in " ".join(line.split()) for text, words in better)
    ]
    return tuple(kept)


def _words(text: str) -> frozenset[str]:
    return frozenset(w for w in alnum_words(text.lower()) if w not in _COMMON and not w.isdigit())
