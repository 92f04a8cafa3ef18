"""Running a memory system: whole datasets (`run_dataset`), single questions (`LoopCaseRunner`), and the
`MemoryCache` of built memories both reuse.

`run_dataset` ingests conversations in parallel (each into its own execution graph; turns within one
conversation stay in order), then answers and judges questions in parallel, each traced into a private
buffer committed to its conversation's graph in dataset order, so results, graphs and metrics equal a
sequential run's. Progress goes to an optional `ProgressSink`.

A memory system's `memory_key(conversation)` names everything construction depends on; the cache maps it to
the ingestion graph (a snapshot, copied before use) and the memory state (read-only once built), counting
hits and the LM calls they saved. `LoopCaseRunner` (GEPA's program scores one question at a time) takes a
memory from the cache, built at most once even when several threads ask (`get_or_build`), so a candidate
changing only answer-side prompts re-answers and never re-ingests; a reuse counts as saving the build calls
once per (memory, prompt set), as a whole-dataset evaluation would. This module does not log to MLflow or print.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType
from typing import Any, Protocol, TypeVar

import dspy
from memtrace_loop.memory_systems.base import MemorySystem
from memtrace_loop.optimizers.base import ConstructionCall, TracedCase
from memtrace_loop.pipeline.analysis.evaluation import EvaluationReport, summarize
from memtrace_loop.pipeline.analysis.judge import JUDGE_STAGE, judge_answer
from memtrace_loop.pipeline.core.conventions import KNOBS_META
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.lru import Lru
from memtrace_loop.pipeline.core.records import CaseResult, Conversation, Dataset, Question
from memtrace_loop.pipeline.core.single_flight import KeyedLocks
from memtrace_loop.pipeline.core.stop import StopToken
from memtrace_loop.pipeline.core.tracing import Tracer

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class CachedMemory:
    graph: ExecutionGraph  # the ingestion graph; copy it before appending
    state: Any
    lm_calls: int  # LLM calls it took to build
    construction_calls: tuple[ConstructionCall, ...] = ()  # as DSPy traced them, for GEPA's reflection


@dataclass(frozen=True)
class CacheStats:
    hits: int
    misses: int
    lm_calls_saved: int


class MemoryCache:
    """Built memories by memory key, thread-safe, least recently used dropped first."""

    def __init__(self, max_entries: int = 512) -> None:
        self._entries = Lru[CachedMemory](max_entries)
        self._lock = threading.Lock()
        self._hits = 0
        self._misses = 0
        self._saved = 0
        self._builds = KeyedLocks()

    def get(self, key: str, count_saved: bool = True) -> CachedMemory | None:
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                self._misses += 1
                return None
            self._hits += 1
            self._saved += found.lm_calls if count_saved else 0
            return found

    def put(self, key: str, memory: CachedMemory) -> None:
        with self._lock:
            self._entries.put(key, memory)

    def get_or_build(
        self, key: str, build: Callable[[], CachedMemory], count_saved: bool = True
    ) -> tuple[CachedMemory, bool]:
        """(the memory under `key`, reused?) — `build()` runs at most once per key at a time: a thread
        asking while another builds the same key waits and then reuses its memory. `count_saved=False`:
        a hit is counted, but not as saved calls (the caller counts what a reuse saved itself)."""
        with self._builds.hold(key):
            found = self.get(key, count_saved)
            if found is not None:
                return found, True
            built = build()
            self.put(key, built)
            return built, False

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(self._hits, self._misses, self._saved)


class ProgressSink(Protocol):
    """Receives progress; `advance` may be called from worker threads."""

    def begin(self, phase: str, total: int) -> None: ...

    def advance(self, phase: str, amount: int = 1) -> None: ...


class _NoProgress:
    def begin(self, phase: str, total: int) -> None:
        pass

    def advance(self, phase: str, amount: int = 1) -> None:
        pass


@dataclass(frozen=True)
class LMCallCounts:
    """LLM calls made (and served from DSPy's cache) across a run, summed from the graphs."""

    calls: int
    cached_calls: int
    prompt_tokens: int
    completion_tokens: int
    failed_operations: int


@dataclass(frozen=True)
class RunResult:
    results: tuple[CaseResult, ...]
    graph_by_conversation: Mapping[str, ExecutionGraph]
    report: EvaluationReport
    counts: LMCallCounts  # summed over the graphs (reused memories included)
    reused_memories: int = 0  # conversations whose memory came from the cache
    lm_calls_saved: int = 0  # LLM calls the reused memories did not have to make again
    tokens_saved: int = 0  # prompt + completion tokens of those calls (in `counts`, but not spent again)
    reused_cached_calls: int = 0  # of `counts.cached_calls`, those in the reused memories' copied graphs

    @cached_property
    def result_by_question(self) -> Mapping[str, CaseResult]:
        """Each question's result by its id (built once, on first use)."""
        return MappingProxyType({r.question.id: r for r in self.results})


def _map(
    fn: Callable[[T], R], items: Sequence[T], workers: int, on_done: Callable[[T], None] | None = None,
    stop: StopToken | None = None,
) -> list[R]:
    """`fn` over `items` with up to `workers` threads; results in input order. No item starts after
    `stop` is requested (`Interrupted`), and when one item raises, the items not yet started are
    cancelled and the error is raised without waiting for the ones still running."""
    on_done = on_done or (lambda _item: None)

    def guarded(item: T) -> R:
        if stop is not None:
            stop.check()
        return fn(item)

    if workers <= 1 or len(items) <= 1:
        out = []
        for item in items:
            out.append(guarded(item))
            on_done(item)
        return out
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="memtrace")
    futures = [pool.submit(guarded, item) for item in items]
    results = []
    try:
        for item, future in zip(items, futures, strict=True):
            results.append(future.result())
            on_done(item)
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return results


def declare_prompts(tracer: Tracer, system: MemorySystem, judge: dspy.Predict) -> None:
    """Record every current stage prompt (a new version where it changed) before buffered answering."""
    for stage, instruction in system.prompt_set().instruction_by_stage.items():
        tracer.prompt_variable(stage, instruction)
    tracer.prompt_variable(JUDGE_STAGE, judge.signature.instructions)


def count_lm_calls(graphs: Iterable[ExecutionGraph]) -> LMCallCounts:
    calls = cached = prompt = completion = failed = 0
    for graph in graphs:
        for op in graph.operations():
            calls += op.usage.calls
            cached += op.usage.cached_calls
            prompt += op.usage.prompt_tokens
            completion += op.usage.completion_tokens
            failed += op.failed
    return LMCallCounts(calls, cached, prompt, completion, failed)


def build_memory(
    system: MemorySystem, judge: dspy.Predict, conversation: Conversation, dataset: str,
    on_turn: Callable[[Any], None] | None = None,
) -> tuple[ExecutionGraph, CachedMemory]:
    """Ingest `conversation` into a fresh graph (every stage prompt declared up front), its construction
    stages' LM calls recorded as DSPy traces them; the graph and its snapshot as a `CachedMemory`."""
    graph = ExecutionGraph(conversation.id, {"system": system.name, KNOBS_META: system.knob_values(),
                                             "dataset": dataset})
    tracer = Tracer(graph)
    declare_prompts(tracer, system, judge)
    name_by_predictor = {id(p): name for name, p in system.named_predictors()}
    with dspy.context(trace=[]):
        state = system.ingest(conversation, tracer, on_turn=on_turn)
        trace = list(dspy.settings.trace)
    calls = tuple(
        ConstructionCall(name_by_predictor[id(predictor)], dict(inputs), outputs)
        for predictor, inputs, outputs in trace if id(predictor) in name_by_predictor
    )
    return graph, CachedMemory(graph.copy(), state, count_lm_calls([graph]).calls, calls)


def run_dataset(
    system: MemorySystem,
    judge: dspy.Predict,
    dataset: Dataset,
    *,
    workers: int = 8,
    progress: ProgressSink | None = None,
    exclude_categories: Sequence[int] = (5,),
    seed: int = 0,
    memory_cache: MemoryCache | None = None,
    stop: StopToken | None = None,
) -> RunResult:
    """Ingest every conversation (or reuse its cached memory), answer and judge every question; trace it
    all. With `stop`, no conversation or question starts after a stop is requested (`Interrupted`)."""
    progress = progress or _NoProgress()
    conversations = list(dataset.conversations)

    progress.begin("ingest", sum(len(c.turns) for c in conversations))
    reused: list[tuple[int, int, int]] = []  # (calls, cached calls, tokens) of each reused memory's graph

    def ingest(conversation: Conversation) -> tuple[ExecutionGraph, Any]:
        key = system.memory_key(conversation) if memory_cache is not None else ""
        cached = memory_cache.get(key) if memory_cache is not None else None
        if cached is not None:
            graph = cached.graph.copy()
            declare_prompts(Tracer(graph), system, judge)
            progress.advance("ingest", len(conversation.turns))
            saved = count_lm_calls([cached.graph])
            reused.append((cached.lm_calls, saved.cached_calls, saved.prompt_tokens + saved.completion_tokens))
            return graph, cached.state
        graph, memory = build_memory(system, judge, conversation, dataset.name, lambda _: progress.advance("ingest"))
        if memory_cache is not None:
            memory_cache.put(key, memory)
        return graph, memory.state

    built = _map(ingest, conversations, workers, stop=stop)
    graph_by_conversation = {c.id: g for c, (g, _) in zip(conversations, built, strict=True)}
    state_by_conversation = {c.id: s for c, (_, s) in zip(conversations, built, strict=True)}

    questions = [q for q in dataset.questions if q.conversation_id in graph_by_conversation]
    progress.begin("answer", len(questions))

    def answer(question: Question) -> tuple[Tracer, CaseResult]:
        tracer = Tracer(graph_by_conversation[question.conversation_id], buffered=True)
        outcome = system.answer(question, state_by_conversation[question.conversation_id], tracer)
        return tracer, judge_answer(judge, question, outcome, tracer)

    answered = _map(answer, questions, workers, lambda _q: progress.advance("answer"), stop=stop)
    for tracer, _ in answered:  # dataset order: graphs do not depend on thread timing
        tracer.commit()
    results = tuple(result for _, result in answered)
    report = summarize(results, exclude_categories=tuple(exclude_categories), seed=seed)
    return RunResult(
        results, graph_by_conversation, report, count_lm_calls(graph_by_conversation.values()), len(reused),
        sum(r[0] for r in reused), sum(r[2] for r in reused), sum(r[1] for r in reused),
    )


def _made(counts: LMCallCounts) -> int:
    return counts.calls - counts.cached_calls


class LoopCaseRunner:
    """One train or dev question at a time, answered and judged with a given system over the loop's judge,
    splits and memory cache (the per-question half of the loop's `Evaluator`, optimizers.base)."""

    def __init__(
        self, judge: dspy.Predict, dataset_by_split: Mapping[str, Dataset], cache: MemoryCache,
        exclude_categories: Sequence[int] = (5,),
    ) -> None:
        self._judge = judge
        self._dataset_by_split = dict(dataset_by_split)
        self._cache = cache
        self._excluded = set(exclude_categories)
        self._reused: set[tuple[str, str]] = set()  # (memory key, prompt digest) whose reuse was counted
        self._lock = threading.Lock()

    def _dataset(self, split: str) -> Dataset:
        if split not in self._dataset_by_split:
            raise ValueError(f"an optimizer may run cases of {sorted(self._dataset_by_split)}, not {split!r}")
        return self._dataset_by_split[split]

    def questions(self, split: str) -> tuple[Question, ...]:
        return tuple(q for q in self._dataset(split).questions if q.category not in self._excluded)

    def run_case(self, system: MemorySystem, split: str, question_id: str) -> TracedCase:
        """The case carries the LM calls it really made (ingestion only when it built the memory; DSPy's
        cache excluded) and the memory's construction calls, built or reused."""
        dataset = self._dataset(split)
        question = next((q for q in dataset.questions if q.id == question_id), None)
        if question is None:
            raise ValueError(f"question {question_id!r} is not in the {split} split")
        conversation = next(c for c in dataset.conversations if c.id == question.conversation_id)
        key = system.memory_key(conversation)
        with self._lock:
            first = (key, system.prompt_set().digest()) not in self._reused
            self._reused.add((key, system.prompt_set().digest()))
        memory, reused = self._cache.get_or_build(
            key, lambda: build_memory(system, self._judge, conversation, dataset.name)[1], count_saved=first
        )
        graph = memory.graph.copy()
        before = count_lm_calls([graph])
        tracer = Tracer(graph)
        declare_prompts(tracer, system, self._judge)
        outcome = system.answer(question, memory.state, tracer)
        case = judge_answer(self._judge, question, outcome, tracer)
        made = _made(count_lm_calls([graph])) - _made(before) + (0 if reused else _made(before))
        return TracedCase(case, graph, conversation, memory.construction_calls, made, reused)
