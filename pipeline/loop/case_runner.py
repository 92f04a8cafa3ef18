"""Answering one question at a time, for optimizers that score examples themselves (GEPA's program).

`LoopCaseRunner` answers and judges a single train or dev question with a given memory system (its
prompts and knobs as they are), traced into a copy of its conversation's ingestion graph. The memory is
taken from the loop's `MemoryCache` by the system's memory key and built at most once, even when
several threads ask for questions of the same conversation at the same time (`get_or_build`); a
candidate that changes only answer-side prompts therefore re-answers and never re-ingests. Each case
carries the LM calls it really made as its graph tells (`TracedCase.lm_calls_made`: ingestion only when
it built the memory; DSPy's cache excluded), for the optimizer; the loop counts calls with its
`CallLedger` only. A reuse counts as saving the memory's build calls once per (memory, prompt set) —
what a whole-dataset evaluation of that prompt set would have saved — not once per question. The
construction stages' LM calls are recorded with the memory when it is built and returned with every
case, built or reused.

It does not run whole datasets (see `runner.run_dataset`), aggregate metrics, or touch the test split.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

import dspy
from memtrace_loop.memory_systems.base import MemorySystem
from memtrace_loop.optimizers.base import TracedCase
from memtrace_loop.pipeline.analysis.judge import judge_answer
from memtrace_loop.pipeline.core.records import Conversation, Dataset, Question
from memtrace_loop.pipeline.core.tracing import Tracer
from memtrace_loop.pipeline.loop.memory_cache import CachedMemory, MemoryCache
from memtrace_loop.pipeline.loop.runner import (
    LMCallCounts,
    count_lm_calls,
    declare_prompts,
    ingest_recorded,
    new_conversation_graph,
)


def _made(counts: LMCallCounts) -> int:
    return counts.calls - counts.cached_calls


class LoopCaseRunner:
    """Per-question runs (the per-question half of the loop's `Evaluator`, optimizers.base) over the loop's
    judge, splits and memory cache."""

    def __init__(
        self,
        judge: dspy.Predict,
        dataset_by_split: Mapping[str, Dataset],
        cache: MemoryCache,
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

    def _find(self, split: str, question_id: str) -> tuple[Dataset, Question, Conversation]:
        dataset = self._dataset(split)
        question = next((q for q in dataset.questions if q.id == question_id), None)
        if question is None:
            raise ValueError(f"question {question_id!r} is not in the {split} split")
        conversation = next(c for c in dataset.conversations if c.id == question.conversation_id)
        return dataset, question, conversation

    def run_case(self, system: MemorySystem, split: str, question_id: str) -> TracedCase:
        dataset, question, conversation = self._find(split, question_id)

        def build() -> CachedMemory:
            graph, tracer = new_conversation_graph(system, self._judge, conversation, {"dataset": dataset.name})
            state, calls = ingest_recorded(system, conversation, tracer)
            return CachedMemory(graph.copy(), state, count_lm_calls([graph]).calls, calls)

        key = system.memory_key(conversation)
        with self._lock:
            first = (key, system.prompt_set().digest()) not in self._reused
            self._reused.add((key, system.prompt_set().digest()))
        memory, reused = self._cache.get_or_build(key, build, count_saved=first)
        graph = memory.graph.copy()
        before = count_lm_calls([graph])
        tracer = Tracer(graph)
        declare_prompts(tracer, system, self._judge)
        outcome = system.answer(question, memory.state, tracer)
        case = judge_answer(self._judge, question, outcome, tracer)
        made = _made(count_lm_calls([graph])) - _made(before) + (0 if reused else _made(before))
        return TracedCase(case, graph, conversation, tuple(memory.construction_calls), made, reused)
