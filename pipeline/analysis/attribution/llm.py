"""The LLM graph-walk attributor (the paper's method), bounded: an LM judges one operation at a time.

From the evidence it walks a frontier ordered by the system's prior (`MemorySystemSpec.prior`), one
`JudgeOperation` call per step under `max_chars_per_step`, until the first operation judged faulty or
`max_steps` (else the answer operation, with low confidence). Graph facts come from `walk_paths` (no LM),
one case's state is a `Walk`: a retrieval step also shows the units it missed, which its fault restores
(`restore_of`); every faulty operation seen is a suspect for replay. A failing call counts as "kept". It
does not verify its blame or aggregate.
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import dspy
from dspy.utils.callback import BaseCallback
from memtrace_loop.memory_systems.registry import SYSTEMS
from memtrace_loop.memory_systems.spec import WalkPrior
from memtrace_loop.pipeline.analysis.attribution.carrying import content_tokens, turn_text
from memtrace_loop.pipeline.analysis.attribution.evidence import EvidenceFinder
from memtrace_loop.pipeline.analysis.attribution.protocol import Attributor
from memtrace_loop.pipeline.analysis.attribution.records import Attribution, AttributionCost, ErrorType, Fault, Tunable
from memtrace_loop.pipeline.analysis.attribution.repairs import CONSTRUCTION_ERRORS
from memtrace_loop.pipeline.analysis.attribution.settings import LLMSettings
from memtrace_loop.pipeline.analysis.attribution.walk_paths import InformationPath
from memtrace_loop.pipeline.analysis.attribution.walk_render import (
    clip,
    fit_step,
    render_vars,
    same_word,
    share,
)
from memtrace_loop.pipeline.backends.embeddings import Embedder
from memtrace_loop.pipeline.backends.lm import LMSet
from memtrace_loop.pipeline.core.config import ConfigError
from memtrace_loop.pipeline.core.conventions import (
    CONSTRUCTION_OP_KINDS,
    MEMORY_KINDS,
    QUESTION_SIDE_KINDS,
    OpKind,
    VarKind,
    answer_name,
    name_of,
    turn_id_of,
)
from memtrace_loop.pipeline.core.graph import ExecutionGraph, Operation
from memtrace_loop.pipeline.core.records import CaseResult, Conversation

logger = logging.getLogger(__name__)

METHOD = "llm"
ERROR_BY_KIND: Mapping[OpKind, ErrorType] = MappingProxyType({
    OpKind.EXTRACTION: ErrorType.EXTRACTION,
    OpKind.UPDATE: ErrorType.UPDATE,
    OpKind.DELETION: ErrorType.DELETION,
    OpKind.RETRIEVAL: ErrorType.RETRIEVAL,
    OpKind.RESPONSE: ErrorType.RESPONSE,
    OpKind.OTHER: ErrorType.EXTRACTION,
})
MAX_VALUE_CHARS = 400  # one variable's value is clipped to this many characters before the step is fitted
PSEUDO_EVIDENCE_TURNS = 2  # BM25-ranked turns standing in for evidence when a question has none

def prior_of(graph: ExecutionGraph) -> WalkPrior:
    """The walk prior of the system that made `graph` (`graph.meta["system"]`; none for an unknown one)."""
    name = graph.meta.get("system")
    return SYSTEMS.get(name).prior if name in SYSTEMS else WalkPrior()


# Output kinds that hold a decision label, not content taken from the inputs.
LABEL_KINDS = frozenset({VarKind.BOUNDARY, VarKind.SUFFICIENCY})


@dataclass(frozen=True)
class StepVerdict:
    """The LM's verdict on one walk step: did the operation keep the information, and if not, why."""

    kept: bool
    error_type: ErrorType | None
    reason: str
    judged: bool  # False when the LM call failed or its reply could not be parsed


@dataclass
class Walk:
    """The state of one walk (one case): the frontier (a heap ranked by the prior), the operations seen
    and judged, the variables on the information's path, and the steps, calls and tokens spent."""

    graph: ExecutionGraph
    case: CaseResult
    prior: WalkPrior
    upstream: frozenset[str]
    evidence: tuple[str, ...]
    needed: str
    on_path: set[str]
    path: InformationPath
    pseudo: bool = False
    started: float = 0.0
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    unjudged: list[str] = field(default_factory=list)  # steps whose call failed or reply was unparsable
    heap: list[tuple[int, int, str]] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    labelled_stages: set[str] = field(default_factory=set)  # stages queued with an op that only writes labels
    kept_by_op: dict[str, bool] = field(default_factory=dict)
    faulty: dict[str, StepVerdict] = field(default_factory=dict)  # every operation judged faulty, by id
    steps: int = 0

    def relevant(self, op: Operation) -> bool:
        if op.kind == OpKind.JUDGE or op.stage in self.prior.skip_stages:
            return False
        question_side = any(self.graph.variable(v).kind in QUESTION_SIDE_KINDS for v in (*op.inputs, *op.outputs))
        return not question_side or op.id in self.upstream

    def push(self, op: Operation) -> None:
        if op.id in self.seen or not self.relevant(op):
            return
        if op.outputs and all(self.graph.variable(v).kind in LABEL_KINDS for v in op.outputs):
            # a decision that writes only a label (a boundary) carries no content: the first one per stage
            # stands for the rest (a buffer re-read by a decision per turn would use up every step)
            if op.stage in self.labelled_stages:
                return
            self.labelled_stages.add(op.stage)
        self.seen.add(op.id)
        heapq.heappush(self.heap, (self.prior.rank(op), op.seq, op.id))

    def seed(self, context_ops: Sequence[Operation]) -> None:
        """The first frontier: the readers of the evidence (and the question's retrieval, if the prior says so)."""
        for var_id in self.evidence:
            for op in self.graph.consumers(var_id):
                if op.prompt != var_id:
                    self.push(op)
        if self.prior.seed_retrieval:
            for op in context_ops:
                self.push(op)

    def advance(self, op: Operation) -> None:
        """`op` kept the information: its outputs join the path and their readers the frontier."""
        for out in op.outputs:
            self.on_path.add(out)
            for consumer in self.graph.consumers(out):
                if consumer.prompt != out:
                    self.push(consumer)


def restore_of(walk: Walk, op: Operation) -> tuple[str, ...]:
    """What a repair of faulty `op` puts back: for a retrieval the units it missed (else the evidence
    turns); for the answer step the context lines that held the information; for a construction step its
    stored units on the path it destroyed, else the evidence turns its information came from (what a
    replay puts back in memory; never an intermediate such as extracted facts)."""
    graph, path = walk.graph, walk.path
    if op.kind == OpKind.RETRIEVAL:
        return path.missed(op) or walk.evidence
    if op.kind == OpKind.RESPONSE and (held := path.context_holders(op)):
        return held
    if op.kind in CONSTRUCTION_OP_KINDS:
        return _stored_carriers(walk, op) or tuple(e for e in walk.evidence if e in graph.ancestors(op.id)) or (
            walk.evidence
        )
    on_path = walk.on_path | path.carriers
    return tuple(v for v in op.inputs if v in on_path) or tuple(
        v for v in op.inputs if graph.variable(v).kind not in (VarKind.QUERY, VarKind.PROMPT)
    )


def _stored_carriers(walk: Walk, op: Operation) -> tuple[str, ...]:
    """The stored units on the information's path that a construction step (or the writes executing its
    decision) read, i.e. destroyed: an update's or deletion's old value."""
    graph, on_path = walk.graph, walk.on_path | walk.path.carriers
    readers = [op, *(c for v in op.outputs for c in graph.consumers(v) if c.prompt is None)]
    return tuple(dict.fromkeys(
        v for reader in readers for v in reader.inputs if v in on_path and graph.variable(v).kind in MEMORY_KINDS
    ))


def retrieval_note(path: InformationPath, op: Operation, restore: Sequence[str]) -> str:
    """What a retrieval fault's reason adds: the unit it missed, and whether `top_k` cut it off."""
    k = op.meta.get("k", "?")
    near = path.near_missed(op)
    if near:
        return (f" It missed {near[0]}, which holds the needed information and was ranked just below the cut "
                f"(k={k}): top_k is too small for this question.")
    missed = [v for v in restore if v in path.carriers]
    if missed:
        return f" It missed {missed[0]}, which was in memory and holds the needed information."
    return ""


# ------------------------------------------------------------------------------------------ LM calls


ERROR_CHOICES = ("ExtractionError", "UpdateError", "DeletionError", "RetrievalError", "ResponseError", "none")


class JudgeOperation(dspy.Signature):
    """You audit one operation of a memory system that failed to answer a question. The information the
    answer needs came from the conversation turns shown as `needed_information`. Look at what the
    operation read (`operation_inputs`), what it wrote (`operation_outputs`) and its instructions
    (`operation_prompt`). Decide whether this operation kept the needed information that its inputs held.
    If it lost, dropped, overwrote, deleted, failed to retrieve, or (for the answer step) failed to use it,
    answer kept_information = False and name the error type: ExtractionError (never made it into memory),
    UpdateError (a later update degraded or overwrote it), DeletionError (a unit holding it was deleted),
    RetrievalError (in the store but not in the retrieved context), ResponseError (in the context, yet the
    answer is wrong). If the operation kept it (or its inputs never held it), answer kept_information =
    True and error_type = none. Give a short reason that quotes what was lost."""

    question: str = dspy.InputField()
    gold_answer: str = dspy.InputField()
    needed_information: str = dspy.InputField(desc="the evidence turns the answer needs")
    operation: str = dspy.InputField(desc="name, stage and kind of the operation")
    operation_inputs: str = dspy.InputField(desc="the variables it read (clipped)")
    operation_outputs: str = dspy.InputField(desc="the variables it wrote (clipped)")
    operation_prompt: str = dspy.InputField(desc="the instruction it ran with (clipped), or 'none'")
    kept_information: bool = dspy.OutputField()
    error_type: str = dspy.OutputField(desc="one of: " + ", ".join(ERROR_CHOICES))
    reason: str = dspy.OutputField()


class _CallCounter(BaseCallback):
    """Counts the LM calls made while it is installed (one walk step)."""

    def __init__(self) -> None:
        self.calls = 0

    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        self.calls += 1


def _error_type(raw: object) -> ErrorType | None:
    text = str(raw or "").strip().lower()
    return next((kind for kind in ErrorType if kind.value.lower() in text), None)


class LLMAttributor:
    """Walks each failed case's graph with an LM judging one operation per step (see the module doc)."""

    name = METHOD

    def __init__(self, lm: dspy.BaseLM, settings: LLMSettings | None = None) -> None:
        self.lm = lm
        self.settings = settings or LLMSettings()
        self.judge = dspy.Predict(JudgeOperation)
        self.judge.set_lm(lm)
        self._finder: EvidenceFinder | None = None  # the evidence index of the graph seen last

    # ---------------------------------------------------------------- one step

    def step_fields(
        self, graph: ExecutionGraph, op: Operation, case: CaseResult, needed: str, on_path: set[str],
        missed: Sequence[str] = (),
    ) -> dict[str, str]:
        """The fields one step shows the LM for `op`: inputs on the path first, then by shared words, clipped."""
        limit = MAX_VALUE_CHARS
        asked = content_tokens(f"{case.question.text} {case.question.gold}")
        words = frozenset(
            {w for w in content_tokens(needed) if any(same_word(w, a) for a in asked)}
            | content_tokens(case.question.gold)
        )
        shown = list(op.inputs)
        if op.kind == OpKind.RETRIEVAL:  # what the store held on the path but the search did not return
            shown += [
                v for v in sorted(on_path)
                if v not in op.inputs and graph.variable(v).kind in MEMORY_KINDS and graph.variable(v).value
                and (latest := graph.latest(name_of(v))) is not None and latest.id == v
                and not latest.meta.get("deleted")
            ]
            shown += [v for v in missed if v not in shown]
        first = {*on_path, *missed}
        inputs = sorted(
            (graph.variable(v) for v in shown),
            key=lambda v: (v.id not in first, -len(content_tokens(v.value) & words), v.id),
        )
        outputs = [graph.variable(v) for v in op.outputs]
        budget = self.settings.max_chars_per_step
        leading = min(sum(1 for v in inputs if v.id in first), 3)
        # a long prompt (mem0's are 4-5k characters) keeps a quarter of the step: it must not squeeze the
        # inputs and outputs, which the verdict is about, out of a step fitted proportionally to length
        prompt = clip(graph.variable(op.prompt).value, budget * 25 // 100) if op.prompt else "none"
        fields = {
            "question": case.question.text,
            "gold_answer": case.question.gold,
            "operation": f"{op.name} (stage {op.stage}, kind {op.kind.value}, {op.id})",
            "needed_information": needed,
            "operation_inputs": render_vars(
                inputs, share(budget * 45 // 100, min(len(inputs), 12), limit), words, budget * 45 // 100,
                lead=(leading, min(limit, budget * 45 // 100 // (leading + 1))),
            ),
            "operation_outputs": render_vars(
                outputs, share(budget * 30 // 100, len(outputs), 2 * limit), words, budget * 30 // 100
            ),
            "operation_prompt": prompt,
        }
        # the needed information is what every verdict is about: it keeps its own share, never squeezed
        # out by long input lists
        fixed = ("question", "gold_answer", "operation", "needed_information")
        return fit_step(fields, self.settings.max_chars_per_step, fixed=fixed)

    def _ask(self, fields: Mapping[str, str], op: Operation, walk: Walk) -> StepVerdict:
        counter = _CallCounter()
        callbacks = [*dspy.settings.get("callbacks", []), counter]
        try:
            with dspy.context(callbacks=callbacks, track_usage=True):
                prediction = self.judge(**fields)
        except Exception as exc:  # a failing or unparsable reply is recorded, never a crash of the walk
            walk.calls += max(counter.calls, 1)
            walk.unjudged.append(f"{op.id}: {type(exc).__name__}")
            logger.debug("llm attributor: step on %s failed: %s", op.id, exc)
            return StepVerdict(True, None, "", False)
        walk.calls += max(counter.calls, 1)
        try:
            for usage in (prediction.get_lm_usage() or {}).values():
                walk.prompt_tokens += int(usage.get("prompt_tokens") or 0)
                walk.completion_tokens += int(usage.get("completion_tokens") or 0)
        except Exception as exc:  # usage is bookkeeping: losing it must not lose the verdict
            logger.debug("llm attributor: no usage for %s: %s", op.id, exc)
        kept = prediction.get("kept_information")
        if not isinstance(kept, bool):
            walk.unjudged.append(f"{op.id}: kept_information={kept!r}")
            return StepVerdict(True, None, "", False)
        return StepVerdict(kept, _error_type(prediction.get("error_type")), str(prediction.get("reason") or ""), True)

    # ---------------------------------------------------------------- the walk

    def _evidence(self, graph: ExecutionGraph, case: CaseResult) -> tuple[tuple[str, ...], bool]:
        if self._finder is None or self._finder.graph is not graph:  # one index per graph, not per case
            self._finder = EvidenceFinder(graph, k=PSEUDO_EVIDENCE_TURNS)
        found = self._finder.find(case.question)
        return found.turn_vars, found.pseudo

    def attribute(
        self, graph: ExecutionGraph, case: CaseResult, conversation: Conversation | None = None
    ) -> Attribution | None:
        started = time.perf_counter()
        answer_var = graph.latest(answer_name(case.question.id))
        answer_op = graph.producer(answer_var.id) if answer_var is not None else None
        if answer_var is None or answer_op is None:
            return None
        evidence, pseudo = self._evidence(graph, case)
        needed = "\n".join(f"[{e}] {turn_text(graph.variable(e).value)}" for e in evidence) or "unknown"
        walk = Walk(
            graph, case, prior_of(graph), graph.ancestors(answer_var.id), evidence, needed, set(evidence),
            InformationPath(graph, case.question, evidence), pseudo, started,
        )
        context_ops = [
            p for v in answer_op.inputs
            if graph.variable(v).kind == VarKind.CONTEXT and (p := graph.producer(v)) is not None
        ]
        walk.seed(context_ops)
        found = self._walk(walk, [*context_ops, answer_op])  # the tail is shown last, when not reached
        if found is not None:
            self._judge_answer(walk, answer_op, found[0])
            return self._blame(walk, *found, context_ops, answer_op)
        reason = (
            f"No operation among the {walk.steps} shown was judged to lose the information; by default the answer "
            f"step {answer_op.name} ({answer_op.id}) is blamed for \"{case.prediction}\" (gold "
            f"\"{case.question.gold}\")."
        )
        fallback = StepVerdict(False, ErrorType.RESPONSE, reason, True)
        return self._blame(walk, answer_op, fallback, context_ops, answer_op, 0.2)

    def _judge_answer(self, walk: Walk, answer_op: Operation, blamed: Operation) -> None:
        """After a blame upstream, judge the answer step too when its context held the information."""
        if (
            blamed.id != answer_op.id and answer_op.id not in walk.kept_by_op
            and walk.steps < self.settings.max_steps and walk.path.context_holders(answer_op)
        ):
            self._judge(walk, answer_op)

    def _walk(self, walk: Walk, tail: Sequence[Operation]) -> tuple[Operation, StepVerdict] | None:
        """Judge operations from the frontier until one is decisively faulty (returned) or the steps run out."""
        graph = walk.graph
        while walk.steps < self.settings.max_steps:
            if not walk.heap:
                pending = [op for op in tail if op.id not in walk.seen]
                if not pending:
                    break
                walk.seen.add(pending[0].id)
                heapq.heappush(walk.heap, (3, pending[0].seq, pending[0].id))
            op = graph.operation(heapq.heappop(walk.heap)[2])
            if op.id in walk.kept_by_op:
                continue  # already judged as the sibling of a faulty operation
            verdict = self._judge(walk, op)
            if not walk.kept_by_op[op.id] and op.kind == OpKind.RETRIEVAL:
                early = self._faulty_construction(walk)
                if early is not None:
                    return early
            if not walk.kept_by_op[op.id]:
                keeper = self._keeper(walk, op)
                if keeper is None:
                    return op, verdict
                op = keeper
            walk.advance(op)
        return None

    def _judge(self, walk: Walk, op: Operation) -> StepVerdict:
        missed = walk.path.missed(op) if op.kind == OpKind.RETRIEVAL else ()
        fields = self.step_fields(walk.graph, op, walk.case, walk.needed, walk.on_path, missed)
        verdict = self._ask(fields, op, walk)
        walk.steps += 1
        walk.kept_by_op[op.id] = not (verdict.judged and not verdict.kept)
        if not walk.kept_by_op[op.id]:
            walk.faulty[op.id] = verdict
        return verdict

    def _faulty_construction(self, walk: Walk) -> tuple[Operation, StepVerdict] | None:
        """After a faulty search, the evidence's construction judged first (the first faulty one, else None)."""
        graph = walk.graph
        for early in sorted(
            {c.id: c for e in walk.evidence for c in graph.consumers(e)
             if c.kind in CONSTRUCTION_OP_KINDS and c.id not in walk.kept_by_op and walk.relevant(c)}.values(),
            key=lambda c: c.seq,
        ):
            if walk.steps >= self.settings.max_steps:
                break
            walk.seen.add(early.id)
            found = self._judge(walk, early)
            if not walk.kept_by_op[early.id]:
                return early, found
        return None

    def _keeper(self, walk: Walk, op: Operation) -> Operation | None:
        """A sibling of faulty `op` that read the same information and kept it (e.g. the event log keeps a date the
        narrative lost): `op` is decisive only when there is none."""
        graph = walk.graph
        read = [v for v in op.inputs if v in walk.on_path]
        units = [v for v in read if graph.variable(v).kind in MEMORY_KINDS]
        siblings = sorted(
            {c.id: c for v in (units if op.kind != OpKind.EXTRACTION and units else read) for c in graph.consumers(v)
             if c.id != op.id and c.prompt != v and c.kind in CONSTRUCTION_OP_KINDS and walk.relevant(c)}.values(),
            key=lambda c: c.seq,
        )
        for sibling in siblings:
            if sibling.id not in walk.kept_by_op and walk.steps < self.settings.max_steps:
                walk.seen.add(sibling.id)
                self._judge(walk, sibling)
            if walk.kept_by_op.get(sibling.id):
                return sibling
        return None

    def _blame(
        self, walk: Walk, op: Operation, verdict: StepVerdict, context_ops: Sequence[Operation], answer_op: Operation,
        confidence: float = 0.75,
    ) -> Attribution:
        case = walk.case
        primary = self._crowding(walk, op) or self._fault(walk, op, verdict)
        reason = primary.reason
        if walk.unjudged:
            reason += f" {len(walk.unjudged)} step(s) could not be judged (LM call failed or reply unparsable)."
            confidence *= 0.8
        if walk.pseudo:
            confidence *= 0.7
        primary = dataclasses.replace(primary, reason=reason)
        suspects = self._suspects(walk, primary, context_ops, answer_op)
        cost = AttributionCost(
            lm_calls=walk.calls, prompt_tokens=walk.prompt_tokens, completion_tokens=walk.completion_tokens,
            seconds=time.perf_counter() - walk.started,
        )
        return Attribution(
            case, primary.op, primary.op_name, primary.stage, primary.error_type, reason, confidence, METHOD,
            primary.tunable, tuple(turn_id_of(e) for e in walk.evidence), walk.pseudo, suspects=suspects, cost=cost,
        )

    def _fault(self, walk: Walk, op: Operation, verdict: StepVerdict) -> Fault:
        """`op` judged faulty as a `Fault` (a store write's blame goes to its LLM decision), with its restore."""
        graph = walk.graph
        error = verdict.error_type or ERROR_BY_KIND.get(op.kind, ErrorType.RESPONSE)
        blamed = op
        if op.prompt is None and op.kind in CONSTRUCTION_OP_KINDS:  # a store write executes an LLM decision
            makers = [p for v in op.inputs if (p := graph.producer(v)) is not None and p.prompt is not None]
            blamed = max(makers, key=lambda p: p.seq, default=op)
        tunable = Tunable.PROMPT if blamed.prompt is not None else Tunable.KNOBS
        reason = verdict.reason.strip() or f"{op.name} ({op.id}) did not keep the needed information."
        if blamed is not op:
            reason += f" ({op.name} {op.id} executed the decision of {blamed.name} {blamed.id}.)"
        restore = restore_of(walk, op)
        if op.kind == OpKind.RETRIEVAL:
            reason += retrieval_note(walk.path, op, restore)
        return Fault(blamed.id, blamed.name, blamed.stage, error, tunable, reason, restore, blamed.seq)

    @staticmethod
    def _crowding(walk: Walk, op: Operation) -> Fault | None:
        """The copy step's knobs, when a faulty search's results are mostly pieces of turns it cut (else None)."""
        crowding = walk.path.flow.crowding_copy_step(op) if op.kind == OpKind.RETRIEVAL else None
        if crowding is None:
            return None
        note = (f"{crowding.name} ({crowding.id}) cut turns into pieces that make up most of what {op.name} "
                f"({op.id}) returned: the units are too small to hold whole turns and crowd the search.")
        return Fault(crowding.id, crowding.name, crowding.stage, ErrorType.EXTRACTION, Tunable.KNOBS, note,
                     restore_of(walk, op), crowding.seq)

    def _suspects(
        self, walk: Walk, primary: Fault, context_ops: Sequence[Operation], answer_op: Operation
    ) -> tuple[Fault, ...]:
        """Every faulty operation the walk saw on the information's path, earliest first, with its restore."""
        graph = walk.graph
        found = [primary]
        for op_id, verdict in walk.faulty.items():
            op = graph.operation(op_id)
            if op.kind == OpKind.RESPONSE and not walk.path.context_holders(op):
                continue  # the answer cannot use what its context did not hold
            found.append(self._fault(walk, op, verdict))
        found += [c for op_id in walk.faulty if (c := self._crowding(walk, graph.operation(op_id))) is not None]
        if primary.error_type in CONSTRUCTION_ERRORS and primary.op != answer_op.id:
            for search in context_ops:
                if search.kind == OpKind.RETRIEVAL and search.id not in walk.faulty:
                    missed = walk.path.missed(search) or primary.restore
                    note = (f"{search.name} ({search.id}, k={search.meta.get('k', '?')}) must also return the lost "
                            f"information ({', '.join(missed)}) for {walk.case.question.id} once it is in memory.")
                    found.append(Fault(search.id, search.name, search.stage, ErrorType.RETRIEVAL, Tunable.KNOBS,
                                       note, missed, search.seq))
        by_op: dict[str, Fault] = {}
        for fault in sorted(found, key=lambda f: f.seq):
            by_op.setdefault(fault.op, fault)
        return tuple(by_op.values())


def build(settings: LLMSettings, lms: LMSet | None, embedder: Embedder | None) -> Attributor:
    """The LLM walk on the run's `attributor` LM (a ConfigError without one)."""
    lm = getattr(lms, "attributor", None) if lms is not None else None
    if lm is None:
        raise ConfigError("attributor.name: the llm attributor needs an `attributor` LM (lm.attributor)")
    return LLMAttributor(lm=lm, settings=settings)
