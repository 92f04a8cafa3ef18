"""The EverMemOS-style memory system: episodes with event logs; BM25 + dense retrieval fused by RRF.

Construction: hard limits or `detect_boundary` (LLM) close an episode, then `write_events` and
`write_episode` (LLM) write its events and narrative. Answering: BM25 and dense rankings fused and reranked;
with `multi_query`, `check_sufficiency` and `expand_queries` (LLM) add a second round; the final `top_k`
episodes are the context of `respond`. A failed LLM call is a failed operation with a safe default.
Stage repairs are `evermemos.repair`; stored episodes `evermemos.signatures`. No judging, no logging.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import dspy
from memtrace_loop.memory_systems.answering import record_query, record_retrieval, record_turn
from memtrace_loop.memory_systems.base import (
    MemorySystem,
    RecordedCall,
    RestoredUnit,
    Retrieved,
    ranked_depth,
)
from memtrace_loop.memory_systems.evermemos.repair import REPAIRED_STAGES, recorded_call, repaired_units
from memtrace_loop.memory_systems.evermemos.schema import LIMIT_STAGE, RETRIEVE_STAGE, STAGES, EverMemOSKnobs
from memtrace_loop.memory_systems.evermemos.signatures import (
    CheckSufficiency,
    DetectBoundary,
    ExpandQueries,
    StoredEpisode,
    StoredEvent,
    WriteEpisode,
    WriteEvents,
    episode_value,
    event_value,
    stored_episode,
)
from memtrace_loop.memory_systems.fusion import reciprocal_rank_fusion
from memtrace_loop.memory_systems.signatures import AnswerQuestion, human_date, render_turn
from memtrace_loop.memory_systems.store import InMemoryVectorStore
from memtrace_loop.pipeline.backends.bm25 import BM25Index
from memtrace_loop.pipeline.backends.embeddings import Embedder
from memtrace_loop.pipeline.backends.text import alnum_words
from memtrace_loop.pipeline.backends.tokens import TokenCounter, build_token_counter
from memtrace_loop.pipeline.core.conventions import (
    NEAR_MISSES,
    Namespace,
    OpKind,
    VarKind,
    boundary_name,
    episode_name,
    event_name,
    expanded_name,
    prefix,
    sufficiency_name,
)
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.records import Conversation, Question, Turn
from memtrace_loop.pipeline.core.tracing import Tracer

_DENSE_PREFIX = "ep"
_STOPWORDS = frozenset(
    """a an the and or of to in on at for with from by about as is are was were be been am do does did have has
    had what when where who whom which why how would could should will can that this it its his her their
    they them he she i me my you your we our""".split()
)


@dataclass(frozen=True)
class EverMemOSState:
    """The memory built from one conversation (read-only once ingestion is over; safe to share)."""

    conversation_id: str
    episodes: tuple[StoredEpisode, ...]
    lexical: BM25Index
    dense: InMemoryVectorStore
    terms: tuple[frozenset[str], ...]  # per episode, for the rerank


@dataclass(frozen=True)
class _Buffered:
    turn: Turn
    text: str
    var: str
    tokens: int


def terms(text: str) -> frozenset[str]:
    """Lowercase content words with simple plural/3rd-person endings stripped ("lives" -> "live")."""
    found = set()
    for token in alnum_words(text):
        if token in _STOPWORDS or len(token) < 2:
            continue
        if len(token) > 4 and token.endswith("ies"):
            token = token[:-3] + "y"
        elif len(token) > 3 and token.endswith("s") and not token.endswith("ss"):
            token = token[:-1]
        found.add(token)
    return frozenset(found)


def rerank(
    fused: Sequence[tuple[int, float]], queries: Sequence[str], terms_by_episode: Sequence[frozenset[str]]
) -> list[tuple[int, float, float]]:
    """The deterministic rerank: (episode index, coverage, fused score), best first."""
    wanted = [t for t in (terms(q) for q in queries) if t]
    ranked = []
    for position, (index, score) in enumerate(fused):
        have = terms_by_episode[index]
        coverage = max((len(q & have) / len(q) for q in wanted), default=0.0)
        ranked.append((position, index, coverage, score))
    ranked.sort(key=lambda item: (-round(item[2], 9), -round(item[3], 12), item[0]))
    return [(index, coverage, score) for _, index, coverage, score in ranked]


class EverMemOSMemory(MemorySystem):
    knobs: EverMemOSKnobs
    name = "evermemos"
    stages = STAGES

    def __init__(
        self, embedder: Embedder, knobs: EverMemOSKnobs | None = None, counter: TokenCounter | None = None
    ) -> None:
        super().__init__()
        self.detect_boundary = dspy.Predict(DetectBoundary)
        self.write_episode = dspy.Predict(WriteEpisode)
        self.write_events = dspy.Predict(WriteEvents)
        self.check_sufficiency = dspy.Predict(CheckSufficiency)
        self.expand_queries = dspy.Predict(ExpandQueries)
        self.respond = dspy.Predict(AnswerQuestion)
        self.embedder = embedder
        self.knobs = knobs or EverMemOSKnobs()
        self.counter = counter or build_token_counter(self.knobs.tokenizer)

    def construction_knobs(self) -> str:
        k = self.knobs
        return (
            f"max_episode_turns={k.max_episode_turns};max_episode_tokens={k.max_episode_tokens};"
            f"tokenizer={self.counter.name};embedder={self.embedder!r}"
        )

    def non_llm_stages(self) -> dict[str, str]:
        k = self.knobs
        return {
            LIMIT_STAGE: f"max_episode_turns={k.max_episode_turns}; max_episode_tokens={k.max_episode_tokens}; "
            f"tokenizer={self.counter.name} (close an episode regardless of detect_boundary)",
            RETRIEVE_STAGE: f"BM25 top {k.bm25_top} + dense top {k.emb_top} ({self.embedder!r}) per query, "
            f"reciprocal rank fusion k={k.rrf_k}, rerank by query coverage, top_k={k.top_k} episodes; "
            f"multi_query={k.multi_query} (at most {k.max_expanded_queries} expanded queries)",
        }

    # ------------------------------------------------------------------ construction

    def ingest(
        self, conversation: Conversation, tracer: Tracer, on_turn: Callable[[Turn], None] | None = None
    ) -> EverMemOSState:
        episodes: list[StoredEpisode] = []
        buffer: list[_Buffered] = []
        event_numbers = itertools.count(1)  # event variables are numbered across the conversation
        for turn in conversation.turns:
            text = render_turn(turn.speaker, turn.time, turn.text)
            var = record_turn(tracer, turn)
            entry = _Buffered(turn, text, var, self.counter.count(text))
            if buffer and self._starts_episode(buffer, entry, tracer):
                episodes.append(self._close(buffer, len(episodes) + 1, event_numbers, tracer))
                buffer = []
            buffer.append(entry)
            if on_turn is not None:
                on_turn(turn)
        if buffer:
            episodes.append(self._close(buffer, len(episodes) + 1, event_numbers, tracer))
        return self._index(conversation.id, episodes)

    def _starts_episode(self, buffer: list[_Buffered], entry: _Buffered, tracer: Tracer) -> bool:
        inputs = [*(b.var for b in buffer), entry.var]
        turns, tokens = len(buffer), sum(b.tokens for b in buffer) + entry.tokens
        limits = self.knobs
        meta = {"turns": turns, "tokens": tokens}
        if turns >= limits.max_episode_turns or tokens > limits.max_episode_tokens:
            if turns >= limits.max_episode_turns:
                why = f"turns {turns} >= {limits.max_episode_turns}"
            else:
                why = f"tokens {tokens} > {limits.max_episode_tokens}"
            out = tracer.variable(boundary_name(entry.turn.id), VarKind.BOUNDARY, f"new episode (hard limit: {why})")
            tracer.operation("episode_limit", LIMIT_STAGE, OpKind.OTHER, inputs, [out], meta=meta)
            return True
        with tracer.stage(
            self.detect_boundary, "detect_boundary", op="detect_boundary", kind=OpKind.OTHER, inputs=inputs, meta=meta,
            open_episode="\n".join(b.text for b in buffer), new_turn=entry.text,
        ) as decided:
            starts = bool(decided.prediction.starts_new_episode) if decided.ok else False
            decided.output(boundary_name(entry.turn.id), VarKind.BOUNDARY, "new episode" if starts else "same episode")
        return starts

    def _close(
        self, buffer: list[_Buffered], number: int, event_numbers: Iterator[int], tracer: Tracer
    ) -> StoredEpisode:
        turns_text = "\n".join(b.text for b in buffer)
        turn_vars = [b.var for b in buffer]
        date = human_date(buffer[0].turn.time)
        meta = {"episode": number}

        with tracer.stage(
            self.write_events, "write_events", op="write_events", kind=OpKind.EXTRACTION, inputs=turn_vars, meta=meta,
            turns=turns_text,
        ) as written:
            events: list[StoredEvent] = []
            for item in list(written.prediction.events) if written.ok else []:
                text = " ".join(str(item.text).split())
                if not text:
                    continue
                time = " ".join(str(item.time).split()) or date
                event_number = next(event_numbers)
                var = written.output(
                    event_name(event_number), VarKind.EVENT, event_value(text, time), {"time": time, **meta}
                )
                events.append(StoredEvent(event_number, text, time, var))

        with tracer.stage(
            self.write_episode, "write_episode", op="write_episode", kind=OpKind.EXTRACTION, inputs=turn_vars,
            meta=meta, turns=turns_text,
        ) as summarized:
            title = " ".join(str(summarized.prediction.title).split()) if summarized.ok else ""
            narrative = " ".join(str(summarized.prediction.narrative).split()) if summarized.ok else ""
            var = summarized.output(
                episode_name(number), VarKind.EPISODE, episode_value(title, narrative),
                {"date": date, "turns": [b.turn.id for b in buffer], "events": [e.var for e in events], "title": title},
            )
        return StoredEpisode(number, title, narrative, date, tuple(b.turn.id for b in buffer), tuple(events), var)

    def _index(self, conversation_id: str, episodes: list[StoredEpisode]) -> EverMemOSState:
        documents = [e.document() for e in episodes]
        dense = InMemoryVectorStore(self.embedder, id_prefix=_DENSE_PREFIX)
        vectors: Iterable[Any] = self.embedder.embed(documents) if documents else []
        for episode, document, vector in zip(episodes, documents, vectors, strict=True):
            dense.add(document, episode.date, vector)
        return EverMemOSState(
            conversation_id, tuple(episodes), BM25Index(documents), dense, tuple(terms(d) for d in documents)
        )

    # ------------------------------------------------------------------ answering

    def search(self, query: str, state: EverMemOSState) -> list[list[int]]:
        """The BM25 and the dense ranking of the episodes for one query (episode indexes, best first;
        only positive scores)."""
        lexical = [i for i, score in state.lexical.top(query, self.knobs.bm25_top) if score > 0]
        dense = [
            int(hit.unit.id.removeprefix(_DENSE_PREFIX)) - 1
            for hit in state.dense.search(query, self.knobs.emb_top)
            if hit.score > 0
        ]
        return [lexical, dense]

    def _select(
        self, rankings: list[list[int]], queries: Sequence[str], state: EverMemOSState, depth: int | None = None
    ) -> list[tuple[int, float, float]]:
        """The `depth` (default `top_k`) best episodes (index, coverage, score) after fusion and rerank."""
        fused = reciprocal_rank_fusion(rankings, self.knobs.rrf_k)
        return rerank(fused, queries, state.terms)[: depth or self.knobs.top_k]

    def retrieve(self, question: Question, state: EverMemOSState, tracer: Tracer) -> Retrieved:
        return self._retrieve(question, state, tracer, None)

    def retrieve_steered(
        self, question: Question, state: EverMemOSState, tracer: Tracer, queries: Sequence[str]
    ) -> Retrieved:
        """The retrieval with `queries` as the second round's extra queries (no sufficiency check or
        expansion call): what a replay uses to test a repaired steering output."""
        return self._retrieve(question, state, tracer, list(queries))

    def _retrieve(
        self, question: Question, state: EverMemOSState, tracer: Tracer, steered: list[str] | None
    ) -> Retrieved:
        query_var = record_query(tracer, question)
        k = self.knobs.top_k
        rankings = self.search(question.text, state)
        first = self._select(rankings, [question.text], state)
        final = first
        ranked = self._select(rankings, [question.text], state, depth=ranked_depth(k))
        added: list[str] = []
        extra: list[str] = []
        if steered is not None:
            added = [q for q in dict.fromkeys(" ".join(q.split()) for q in steered) if q and q != question.text]
        elif self.knobs.multi_query:
            added, extra = self._expand(question, state, tracer, query_var, first)
        queries = [question.text, *added]
        if added:
            rankings += [ranking for query in added for ranking in self.search(query, state)]
            final = self._select(rankings, queries, state)
            ranked = self._select(rankings, queries, state, depth=ranked_depth(k))

        chosen = [state.episodes[i] for i, _, _ in final]
        near = [v for i, _, _ in ranked[k:] for v in state.episodes[i].unit_vars()]
        context = "\n\n".join(e.block() for e in chosen)
        context_var = record_retrieval(
            tracer, question, query_var, [v for e in chosen for v in e.unit_vars()], context,
            stage=RETRIEVE_STAGE, name="retrieve_episodes", extra_inputs=extra,
            meta={
                "k": self.knobs.top_k,
                "rounds": 2 if added else 1,
                "queries": queries,
                "episodes": [e.number for e in chosen],
                "coverage": [round(c, 4) for _, c, _ in final],
                "scores": [round(s, 6) for _, _, s in final],
                NEAR_MISSES: near,
            },
        )
        return Retrieved(query_var, context_var, context)

    def _expand(
        self, question: Question, state: EverMemOSState, tracer: Tracer, query_var: str,
        first: list[tuple[int, float, float]],
    ) -> tuple[list[str], list[str]]:
        """Check whether the first round suffices and, if not, ask for more queries."""
        shown = "\n\n".join(state.episodes[i].block() for i, _, _ in first)
        first_vars = [v for i, _, _ in first for v in state.episodes[i].unit_vars()]
        with tracer.stage(
            self.check_sufficiency, "check_sufficiency", op="check_sufficiency", kind=OpKind.RETRIEVAL,
            inputs=[query_var, *first_vars], question=question.text, retrieved_episodes=shown,
        ) as checked:
            sufficient = bool(checked.prediction.sufficient) if checked.ok else True
            verdict = ("sufficient" if sufficient else "insufficient") if checked.ok else "unknown (check failed)"
            sufficiency_var = checked.output(sufficiency_name(question.id), VarKind.SUFFICIENCY, verdict)
        if sufficient:
            return [], [sufficiency_var]

        with tracer.stage(
            self.expand_queries, "expand_queries", op="expand_queries", kind=OpKind.RETRIEVAL,
            inputs=[query_var, sufficiency_var], question=question.text, retrieved_episodes=shown,
        ) as expanded:
            raw = list(expanded.prediction.queries) if expanded.ok else []
            cleaned = (" ".join(str(q).split()) for q in raw)
            added = [q for q in dict.fromkeys(cleaned) if q and q != question.text][: self.knobs.max_expanded_queries]
            expansion_var = expanded.output(expanded_name(question.id), VarKind.QUERY, json.dumps(added))
        return added, [sufficiency_var, expansion_var]

    # ------------------------------------------------------------------ replay

    def restore(self, graph: ExecutionGraph) -> EverMemOSState:
        """The episodes and their indexes rebuilt from the graph's episode and event variables."""
        episodes = []
        for name in sorted(graph.names(prefix(Namespace.EPISODE)), key=lambda n: int(n.split(":", 1)[1])):
            var = graph.latest(name)
            if var is not None:
                episodes.append(stored_episode(graph, var))
        return self._index(graph.graph_id, episodes)

    def recorded_call(self, graph: ExecutionGraph, op_id: str) -> RecordedCall:
        """Each LLM stage's keyword inputs rebuilt from its input variables (`evermemos.repair`)."""
        return recorded_call(graph, graph.operation(op_id)) or super().recorded_call(graph, op_id)

    def repaired_units(self, graph: ExecutionGraph, op_id: str, prediction: Any) -> tuple[RestoredUnit, ...]:
        """New events / narrative sentences of a re-run writer (`evermemos.repair`); a boundary or
        steering stage raises `ReplayUnsupportedError` (it writes no unit of its own)."""
        op = graph.operation(op_id)
        if op.stage in REPAIRED_STAGES:
            return repaired_units(graph, op, prediction)
        return super().repaired_units(graph, op_id, prediction)

    def with_units(self, state: EverMemOSState, units: Sequence[RestoredUnit], tracer: Tracer) -> EverMemOSState:
        """A copy holding each unit as an event: in the episode it came from, else in an extra episode of its own."""
        episodes = list(state.episodes)
        next_event = 1 + max((e.number for episode in episodes for e in episode.events), default=0)
        for offset, restored in enumerate(units):
            home = next((i for i, e in enumerate(episodes) if restored.source in e.unit_vars()), None)
            number = episodes[home].number if home is not None else len(episodes) + 1
            date = human_date(restored.time)
            event_var = tracer.variable(
                event_name(next_event + offset), VarKind.EVENT, event_value(restored.text, date),
                {"time": date, "episode": number, "restored_from": restored.source},
            )
            event = StoredEvent(next_event + offset, restored.text, date, event_var)
            if home is not None:
                episodes[home] = dataclasses.replace(episodes[home], events=(*episodes[home].events, event))
                continue
            var = tracer.variable(
                episode_name(number), VarKind.EPISODE, "",
                {"date": date, "turns": [], "events": [event_var], "title": "", "restored_from": restored.source},
            )
            episodes.append(StoredEpisode(number, "", "", date, (), (event,), var))
        return self._index(state.conversation_id, episodes)
