"""The lineage attributor (no LLM): which operation is to blame for a failed case?

From the evidence turns (gold ids, else `evidence.EvidenceFinder`) it follows the information forward
(`information_flow`) and gives the verdict: the earliest decisive construction drop (Extraction / Update /
DeletionError; a store write passes blame to its decision), else a RetrievalError on a search that missed a
live carrier (blamed on its knobs), else a ResponseError on the answer step (directly for unanswerable
questions). Pure: it never calls an LLM and does not aggregate.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from memtrace_loop.pipeline.analysis.attribution.carrying import (
    is_abstention,
    is_date_like,
    people_in,
    relative_date,
    turn_text,
)
from memtrace_loop.pipeline.analysis.attribution.evidence import EvidenceFinder
from memtrace_loop.pipeline.analysis.attribution.information_flow import Drop, InformationFlow, Track
from memtrace_loop.pipeline.analysis.attribution.protocol import Attributor, TracedRun, attribute_run
from memtrace_loop.pipeline.analysis.attribution.records import Attribution, ErrorType, Fault, Tunable
from memtrace_loop.pipeline.analysis.attribution.settings import LineageSettings
from memtrace_loop.pipeline.backends.embeddings import Embedder
from memtrace_loop.pipeline.backends.lm import LMSet
from memtrace_loop.pipeline.backends.text import normalize_answer
from memtrace_loop.pipeline.core.config import ConfigError
from memtrace_loop.pipeline.core.conventions import (
    MEMORY_KINDS,
    NEAR_MISSES,
    OpKind,
    VarKind,
    answer_name,
    name_of,
    turn_id_of,
)
from memtrace_loop.pipeline.core.graph import ExecutionGraph, Operation, Variable
from memtrace_loop.pipeline.core.records import CaseResult, Conversation

METHOD = "lineage"
MAX_GRAPHS = 64  # conversation graphs whose lineage an attributor keeps
ERROR_BY_KIND = {
    OpKind.EXTRACTION: ErrorType.EXTRACTION,
    OpKind.UPDATE: ErrorType.UPDATE,
    OpKind.DELETION: ErrorType.DELETION,
}


class ConversationLineage:
    """Attributes the failed cases of one conversation graph, which must not change while it is in use
    (its `InformationFlow` memoizes token sets and the store at question time)."""

    def __init__(
        self, graph: ExecutionGraph, conversation: Conversation | None = None, embedder: Embedder | None = None,
        semantic_threshold: float = 0.8,
    ) -> None:
        self.graph = graph
        self.flow = InformationFlow(graph, conversation.speakers if conversation else (), embedder, semantic_threshold)
        # pseudo-evidence by BM25 alone: fusing in the offline (lexical) hashing embedder lowered recall of a
        # gold turn in the top 2 from 108/124 to 97/124 on the simulated world; EvidenceFinder fuses when given
        # an embedder, for callers with a real embedding model
        self._finder = EvidenceFinder(graph)

    # ------------------------------------------------------------------ attribution

    def attribute(self, case: CaseResult) -> Attribution | None:
        """The attribution of one failed case, or None when the graph does not hold the case."""
        graph = self.graph
        qid = case.question.id
        answer_var = graph.latest(answer_name(qid))
        if answer_var is None:
            return None
        answer_op = graph.producer(answer_var.id)
        if answer_op is None:  # an answer no operation produced: not a case this graph recorded
            return None
        context_vars = [graph.variable(v) for v in answer_op.inputs if graph.variable(v).kind == VarKind.CONTEXT]
        retrieval_op = next((graph.producer(v.id) for v in context_vars if graph.producer(v.id)), None)
        found = self._finder.find(case.question)
        evidence, pseudo = found.turn_vars, found.pseudo
        evidence_ids = tuple(turn_id_of(e) for e in evidence)

        def verdict(op: Operation, error: ErrorType, reason: str, confidence: float) -> Attribution:
            tunable = Tunable.PROMPT if op.prompt is not None else Tunable.KNOBS
            return Attribution(
                case, op.id, op.name, op.stage, error, reason, confidence * (0.7 if pseudo else 1.0), METHOD,
                tunable, evidence_ids, pseudo,
            )

        if is_abstention(normalize_answer(case.question.gold)):
            return verdict(
                answer_op, ErrorType.RESPONSE,
                f"The question asks about something the conversation does not say (gold: \"{case.question.gold}\", "
                f"i.e. not mentioned); {answer_op.name} ({answer_op.id}) answered \"{case.prediction}\" in "
                f"{answer_var.id} instead of saying it is not mentioned in the conversation.",
                0.9,
            )
        tracks = self.flow.tracks(case, evidence)
        if not tracks:
            untraced = (  # evidence turns that share no word with the question or gold: drawn, yet not followed
                f"The evidence turns of {qid} ({', '.join(name_of(e) for e in evidence)}) share no content word "
                "with the question or its gold answer, so its information could not be followed through the graph"
            ) if evidence else f"No evidence turn could be traced for {qid}"
            return verdict(
                answer_op, ErrorType.RESPONSE,
                f"{untraced}; by default the answer step {answer_op.name} "
                f"({answer_op.id}) is blamed for \"{case.prediction}\" (gold \"{case.question.gold}\").",
                0.3,
            )

        broken, survivors_by_track = self._broken_tracks(tracks, answer_op, case, verdict)
        missed = self._missed_retrievals(case, tracks, survivors_by_track, retrieval_op, context_vars, verdict)
        if retrieval_op is not None and broken:  # once repaired, the lost information must also be retrieved
            missed.append(self._follow_up_retrieval(case, retrieval_op, broken, verdict))
        faults_by_op: dict[str, Fault] = {}
        for _, fault in sorted([*broken, *missed], key=lambda item: item[1].seq):
            known = faults_by_op.setdefault(fault.op, fault)  # one op failing several tracks restores them all
            restore = tuple(dict.fromkeys((*known.restore, *fault.restore)))
            faults_by_op[fault.op] = dataclasses.replace(known, restore=restore)
        suspects = tuple(faults_by_op.values())
        if broken:
            blamed = min(broken, key=lambda item: item[1].seq)[0]
        elif missed:
            blamed = missed[0][0]
        else:
            context = context_vars[0] if context_vars else None
            blamed = verdict(
                answer_op, ErrorType.RESPONSE, self._response_reason(case, answer_op, answer_var, context, tracks), 0.8,
            )
            suspects = (_fault(blamed, (), answer_op.seq),)
        return dataclasses.replace(blamed, suspects=suspects)

    def _broken_tracks(
        self, tracks: Sequence[Track], answer_op: Operation, case: CaseResult, verdict,
    ) -> tuple[list[tuple[Attribution, Fault]], dict[str, list[Variable]]]:
        """The tracks no live unit carries, each with the verdict on where it was lost; every track's survivors."""
        graph = self.graph
        live_memories = self.flow.live_memories
        broken: list[tuple[Attribution, Fault]] = []
        survivors_by_track: dict[str, list[Variable]] = {}
        for track in tracks:
            live, drops = self.flow.follow(track)
            survivors = [m for m in live_memories if m.id in live]
            if not survivors:  # by content: the information may live in a unit from another turn
                survivors = self.flow.content_survivors(track)
            survivors_by_track[track.label] = survivors
            if survivors:
                continue
            if drops:
                drop = drops[0] if track.is_gold or len(drops) == 1 else self._decisive(drops)
                found = self._construction_verdict(case, track, drop, verdict)
                restore = (drop.carrier.id,) if drop.carrier.kind in MEMORY_KINDS else track.sources
                broken.append((found, _fault(found, restore, drop.op.seq)))
            else:
                source = graph.variable(track.sources[0])
                first = graph.consumers(source.id)
                op = first[0] if first else answer_op
                found = verdict(
                    op, ErrorType.EXTRACTION,
                    f"{track.label} never reached any memory unit: nothing derived from {source.id} "
                    f"\"{source.value}\" carries it.",
                    0.5,
                )
                broken.append((found, _fault(found, track.sources, op.seq)))
        return broken, survivors_by_track

    def _missed_retrievals(
        self, case: CaseResult, tracks: Sequence[Track], survivors_by_track: dict[str, list[Variable]],
        retrieval_op: Operation | None, context_vars: Sequence[Variable], verdict,
    ) -> list[tuple[Attribution, Fault]]:
        """The tracks whose survivors the search missed, with the verdict (and the search as a second suspect
        when a steering LLM step is blamed)."""
        missed: list[tuple[Attribution, Fault]] = []
        if retrieval_op is None:
            return missed
        retrieved = set(retrieval_op.inputs)
        for track in tracks:
            survivors = survivors_by_track[track.label]
            if survivors and not any(m.id in retrieved for m in survivors):
                found = self._retrieval_verdict(case, track, survivors, retrieval_op, context_vars, verdict)
                blamed_op = self.graph.operation(found.op)
                missed.append((found, _fault(found, (survivors[0].id,), blamed_op.seq)))
                if found.op != retrieval_op.id and found.tunable == Tunable.PROMPT:
                    search = verdict(  # the search itself, for a replay to try when the steering repair fails
                        retrieval_op, ErrorType.RETRIEVAL,
                        f"{retrieval_op.name} ({retrieval_op.id}) did not retrieve {survivors[0].id} for "
                        f"{case.question.id}.",
                        0.5,
                    )
                    missed.append((search, _fault(search, (survivors[0].id,), retrieval_op.seq)))
        return missed

    @staticmethod
    def _follow_up_retrieval(
        case: CaseResult, retrieval_op: Operation, broken: Sequence[tuple[Attribution, Fault]], verdict,
    ) -> tuple[Attribution, Fault]:
        """The search as a suspect too: once the lost information is back in memory it must be retrieved."""
        sources = tuple(dict.fromkeys(v for found, f in broken for v in f.restore))
        follow_up = verdict(
            retrieval_op, ErrorType.RETRIEVAL,
            f"{retrieval_op.name} ({retrieval_op.id}, k={retrieval_op.meta.get('k', '?')}) must also return "
            f"the lost information ({', '.join(sources)}) for {case.question.id} once it is in memory.",
            0.5,
        )
        return follow_up, _fault(follow_up, sources, retrieval_op.seq)

    def _retrieval_verdict(
        self, case: CaseResult, track: Track, survivors: Sequence[Variable], retrieval_op: Operation,
        context_vars: Sequence[Variable], verdict,
    ) -> Attribution:
        """A unit carrying the track was stored but not retrieved: blame the copy step whose fragments crowd the
        search, else `top_k` when the unit ranked just below it, else the search when it returned fewer than
        `top_k`, else a steering LLM step, else the search's knobs."""
        graph = self.graph
        k = retrieval_op.meta.get("k", "?")
        crowding = self.flow.crowding_copy_step(retrieval_op)
        if crowding is not None:
            held = survivors[0]
            fragments = [v for v in retrieval_op.inputs if self.flow.is_fragment(graph.variable(v))]
            return verdict(
                crowding, ErrorType.EXTRACTION,
                f"{held.id} \"{held.value}\" holds {track.label}, but {retrieval_op.name} ({retrieval_op.id}, k={k}) "
                f"returned {len(fragments)} fragments of turns cut apart by {crowding.name} ({crowding.stage}) "
                f"instead, e.g. {_quote(graph.variable(fragments[0]).value, 80)}: the units are too small to hold "
                "whole turns, and fragments crowd the search.",
                0.8,
            )
        near = list(retrieval_op.meta.get(NEAR_MISSES, ()))
        ranked = [m for m in survivors if m.id in near]
        held = ranked[0] if ranked else survivors[0]
        reason = (
            f"{held.id} \"{held.value}\" holds {track.label} and was in the store when {case.question.id} was "
            f"asked, but {retrieval_op.name} ({retrieval_op.id}, k={k}) did not retrieve it into "
            f"{', '.join(v.id for v in context_vars)}."
        )
        if ranked:
            rank = (k if isinstance(k, int) else 0) + near.index(held.id) + 1
            return verdict(
                retrieval_op, ErrorType.RETRIEVAL,
                reason + f" The search ranked it just below the cut (about rank {rank} with k={k}): top_k is too "
                "small for this question.",
                0.85,
            )
        returned = len(retrieval_op.meta.get("scores", ()))
        if isinstance(k, int) and "scores" in retrieval_op.meta and returned < k:
            return verdict(
                retrieval_op, ErrorType.RETRIEVAL,
                reason + f" The search returned only {returned} of the {k} units it may return and did not rank "
                "this one at all: the search itself, not what it was asked, missed it.",
                0.8,
            )
        steering = self._retrieval_steering(retrieval_op)
        if steering is not None:  # an LLM step chose what to search for: its prompt is tunable
            reason += (
                f" The search was steered by {steering.name} ({steering.id}), whose output "
                f"{_quote(graph.variable(steering.outputs[0]).value) if steering.outputs else ''} did "
                f"not lead to it."
            )
        return verdict(steering or retrieval_op, ErrorType.RETRIEVAL, reason, 0.85)

    def _retrieval_steering(self, retrieval_op: Operation) -> Operation | None:
        """The latest LLM operation (e.g. a query expansion) whose output the retrieval used to search."""
        steering = [
            producer
            for var_id in retrieval_op.inputs
            if self.graph.variable(var_id).kind not in MEMORY_KINDS
            and (producer := self.graph.producer(var_id)) is not None
            and producer.prompt is not None
        ]
        return max(steering, key=lambda op: op.seq, default=None)

    def _decisive(self, drops: Sequence[Drop]) -> Drop:
        """The drop that destroyed a stored unit (an update or deletion) if any, else the first."""
        for drop in drops:
            if drop.op.kind in (OpKind.UPDATE, OpKind.DELETION) and drop.carrier.kind in MEMORY_KINDS:
                return drop
        return drops[0]

    def _construction_verdict(self, case: CaseResult, track: Track, drop: Drop, verdict) -> Attribution:
        graph = self.graph
        op, carrier, output = drop.op, drop.carrier, drop.output
        blamed = self.flow.decision_maker(op)
        error = ERROR_BY_KIND.get(op.kind) or ERROR_BY_KIND.get(blamed.kind, ErrorType.EXTRACTION)
        produced = f"{output.id} {_quote(output.value)}" if output is not None else "nothing"
        if error == ErrorType.EXTRACTION:
            lost = self._what_was_lost(case, track, carrier)
            reason = (
                f"{op.name} ({op.id}) read {carrier.id} {_quote(carrier.value)} but produced {produced}, "
                f"which lost {lost}."
            )
        elif error == ErrorType.DELETION:
            reason = (
                f"{blamed.name} ({blamed.id}) decided to delete {carrier.id} {_quote(carrier.value)}, which held "
                f"{track.label}; {op.name} ({op.id}) removed it ({produced}). Nothing said it stopped being "
                "true: the deleted memory was still needed."
            )
        elif carrier.kind in MEMORY_KINDS:
            reason = (
                f"{blamed.name} ({blamed.id}) overwrote {carrier.id} {_quote(carrier.value)} through {op.name} "
                f"({op.id}) with {produced}, losing {track.label}."
            )
        else:
            shown = [graph.variable(v) for v in op.inputs if graph.variable(v).kind == VarKind.RETRIEVED]
            old = f" It kept the old value already stored ({_quote(shown[0].value)}) instead of the new value." if (
                shown and shown[0].value
            ) else ""
            rejected = f" The store rejected it: {op.error}." if op.failed and op.error else ""
            reason = (
                f"{blamed.name} ({blamed.id}) saw the new fact in {carrier.id} {_quote(carrier.value)} holding "
                f"{track.label}, but its decision {produced} did not store it, so the newest value never reached "
                f"memory.{old}{rejected}"
            )
        return verdict(blamed, error, reason, 0.9 if track.is_gold else 0.8)

    def _what_was_lost(self, case: CaseResult, track: Track, carrier: Variable) -> str:
        parts = [track.label]
        if track.is_gold and is_date_like(case.question.gold):
            parts = [f"the date the answer needs (\"{case.question.gold}\")"]
            relative = relative_date(carrier.value)
            if relative:
                parts.append(f"the turn gives it as a relative date (\"{relative}\") that had to be resolved "
                             "against the session date")
        speaker = carrier.meta.get("speaker") if carrier.kind == VarKind.TURN else None
        said = turn_text(carrier.value) if carrier.kind == VarKind.TURN else carrier.value
        others = [n for n in people_in(said) if n != speaker and n not in self.flow.speakers]
        if others:
            parts.append(f"the turn is about another person ({', '.join(dict.fromkeys(others))}), not the speaker")
        return "; ".join(parts)

    def _response_reason(
        self, case: CaseResult, op: Operation, answer: Variable, context: Variable | None, tracks: Iterable[Track]
    ) -> str:
        held = f"the context {context.id}" if context is not None else "its inputs"
        reason = (
            f"{held} given to {op.name} ({op.id}) held {' and '.join(t.label for t in tracks)}, yet it answered "
            f"{answer.id} \"{case.prediction}\" (gold \"{case.question.gold}\")."
        )
        if is_date_like(case.question.gold) and not is_date_like(case.prediction):
            reason += " The question asks when; the answer left out the date that the memory states."
        return reason


def _fault(found: Attribution, restore: Sequence[str], seq: int) -> Fault:
    return Fault(
        found.op, found.op_name, found.stage, found.error_type, found.tunable, found.reason, tuple(restore), seq
    )


def _quote(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return f"\"{text if len(text) <= limit else text[: limit - 3] + '...'}\""


class LineageAttributor:
    """The default attributor: follows the evidence through each conversation graph (no LLM)."""

    name = METHOD

    def __init__(self, embedder: Embedder | None = None, semantic_threshold: float = 0.8) -> None:
        self.name = f"{METHOD}+meaning" if embedder is not None else METHOD
        self.embedder = embedder
        self.semantic_threshold = semantic_threshold
        self._lineage_by_graph: dict[int, tuple[ExecutionGraph, ConversationLineage]] = {}

    def lineage(self, graph: ExecutionGraph, conversation: Conversation | None = None) -> ConversationLineage:
        held = self._lineage_by_graph.get(id(graph))
        if held is not None and held[0] is graph:
            return held[1]
        if len(self._lineage_by_graph) >= MAX_GRAPHS:
            self._lineage_by_graph.clear()
        lineage = ConversationLineage(graph, conversation, self.embedder, self.semantic_threshold)
        self._lineage_by_graph[id(graph)] = (graph, lineage)
        return lineage

    def attribute(
        self, graph: ExecutionGraph, case: CaseResult, conversation: Conversation | None = None
    ) -> Attribution | None:
        return self.lineage(graph, conversation).attribute(case)


def attribute_failures(
    results: Iterable[CaseResult], graph_by_conversation: Mapping[str, ExecutionGraph],
    conversation_by_id: Mapping[str, Conversation] | None = None, exclude_categories: Iterable[int] = (),
) -> tuple[Attribution, ...]:
    """Lineage attributions of every failed case (in result order) whose conversation graph is given."""
    run = TracedRun(tuple(results), graph_by_conversation, conversation_by_id or {}, tuple(exclude_categories))
    return attribute_run(LineageAttributor(), run)


def build(settings: LineageSettings, lms: LMSet | None, embedder: Embedder | None) -> Attributor:
    """The lineage attributor its settings describe (`use_embedder` needs the run's embedder)."""
    if not settings.use_embedder:
        return LineageAttributor()
    if embedder is None:
        raise ConfigError("attributor.use_embedder: no embedder was given to match carriers by meaning")
    return LineageAttributor(embedder=embedder, semantic_threshold=settings.semantic_threshold)
