"""Running a memory system over a dataset: ingest, answer, judge — traced, in parallel, deterministic.

Conversations are ingested in parallel (each into its own execution graph; turns within one
conversation stay in order), then questions are answered and judged in parallel, each traced into a
private buffer that is committed to its conversation's graph in dataset order. So results, graphs and
metrics equal those of a sequential run. Progress is reported through an optional `ProgressSink`
(the entry point decides how to show it). This module does not log to MLflow or print.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType
from typing import Any, Protocol, TypeVar

import dspy
from memtrace_loop.memory_systems.base import MemorySystem
from memtrace_loop.optimizers.base import ConstructionCall
from memtrace_loop.pipeline.analysis.evaluation import EvaluationReport, summarize
from memtrace_loop.pipeline.analysis.judge import JUDGE_STAGE, judge_answer
from memtrace_loop.pipeline.core.conventions import KNOBS_META
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.records import CaseResult, Conversation, Dataset, Question
from memtrace_loop.pipeline.core.stop import StopToken
from memtrace_loop.pipeline.core.tracing import Tracer
from memtrace_loop.pipeline.loop.memory_cache import CachedMemory, MemoryCache

T = TypeVar("T")
R = TypeVar("R")


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


def new_conversation_graph(
    system: MemorySystem, judge: dspy.Predict, conversation: Conversation, meta: Mapping[str, Any] | None = None
) -> tuple[ExecutionGraph, Tracer]:
    """A fresh graph for one conversation with every stage prompt declared up front."""
    graph = ExecutionGraph(conversation.id, {"system": system.name, KNOBS_META: system.knob_values(), **(meta or {})})
    tracer = Tracer(graph)
    declare_prompts(tracer, system, judge)
    return graph, tracer


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


def ingest_recorded(
    system: MemorySystem, conversation: Conversation, tracer: Tracer, on_turn: Callable[[Any], None] | None = None
) -> tuple[Any, tuple[ConstructionCall, ...]]:
    """`system.ingest` with its construction stages' LM calls recorded as DSPy traces them (kept with a
    cached memory so a reuse can still show them to GEPA's reflection)."""
    name_by_predictor = {id(p): name for name, p in system.named_predictors()}
    with dspy.context(trace=[]):
        state = system.ingest(conversation, tracer, on_turn=on_turn)
        trace = list(dspy.settings.trace)
    calls = tuple(
        ConstructionCall(name_by_predictor[id(predictor)], dict(inputs), outputs)
        for predictor, inputs, outputs in trace if id(predictor) in name_by_predictor
    )
    return state, calls


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
        graph, tracer = new_conversation_graph(system, judge, conversation, {"dataset": dataset.name})
        state, calls = ingest_recorded(system, conversation, tracer, lambda _turn: progress.advance("ingest"))
        if memory_cache is not None:
            memory_cache.put(key, CachedMemory(graph.copy(), state, count_lm_calls([graph]).calls, calls))
        return graph, state

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
