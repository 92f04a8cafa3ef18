"""Test helpers: the stand-in LM without a response cache, sim datasets and runs, a tiny hand-made conversation."""

from __future__ import annotations

import dspy
from memtrace_loop.memory_systems.registry import build_memory_system
from memtrace_loop.pipeline.analysis.judge import make_judge
from memtrace_loop.pipeline.backends.call_count import CallLedger
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.backends.lm import LMConfig, LMSet
from memtrace_loop.pipeline.backends.registry import build_lm
from memtrace_loop.pipeline.core.records import Conversation, Dataset, Question, Turn
from memtrace_loop.pipeline.data.locomo import parse_locomo
from memtrace_loop.pipeline.loop.runner import RunResult, run_dataset
from memtrace_loop.pipeline.sim.world import generate_locomo

# A three-turn conversation whose answer changes (Paris, then Rome), for scripted-LM tests of a system.
CONVERSATION = Conversation(
    "c1",
    ("Alice", "Bob"),
    (
        Turn("D1:1", "Alice", "I moved to Paris last month.", 1, "2023-05-08T13:56"),
        Turn("D1:2", "Bob", "Nice weather today.", 1, "2023-05-08T13:56"),
        Turn("D2:1", "Alice", "I now live in Rome.", 2, "2023-06-09T10:00"),
    ),
)
QUESTION = Question("c1:q0", "c1", "Where does Alice live?", "Rome", 4, ("D2:1",))


def sim_lm(reuse_calls: bool = True) -> dspy.LM:
    """The deterministic stand-in LM, uncached so every test sees the current stand-in code (with
    `reuse_calls`, a request it answered before is answered from its store of replies, counted reused)."""
    return build_lm(LMConfig(backend="sim", model="stand-in", cache=False, reuse_calls=reuse_calls))


def counted_sim_lms(calls: CallLedger) -> LMSet:
    """The four roles on the stand-in LM, each counting its calls into `calls` (what a loop needs)."""
    return calls.counted(LMSet(*(sim_lm(),) * 4))


def sim_dataset(seed: int = 0, n_conversations: int = 4) -> Dataset:
    return parse_locomo(generate_locomo(seed=seed, n_conversations=n_conversations), "sim")


def sim_run(system: str = "mem0", *, seed: int = 2, n_conversations: int = 1,
            sessions_per_conversation: int = 4) -> RunResult:
    """A traced, judged run of `system` on a small sim world (the graphs `memtrace run` would save)."""
    dataset = parse_locomo(generate_locomo(seed=seed, n_conversations=n_conversations,
                                           sessions_per_conversation=sessions_per_conversation), "sim")
    lm = sim_lm()
    memory = build_memory_system({"name": system}, HashingEmbedder())
    memory.set_lm(lm)
    return run_dataset(memory, make_judge(lm), dataset, workers=1)
