"""Test helper: a small closed loop on the simulated world (mem0, the attribution optimizer, stand-in LMs)."""

from __future__ import annotations

from memtrace_loop.memory_systems.mem0.system import Mem0Memory
from memtrace_loop.optimizers.registry import build_optimizer
from memtrace_loop.pipeline.analysis.judge import make_judge
from memtrace_loop.pipeline.backends.call_count import CallLedger
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.data.splits import split_by_conversation
from memtrace_loop.pipeline.loop.optimization import LoopResult, LoopSettings, OptimizationLoop

from tests.support.sim import counted_sim_lms, sim_dataset


def sim_attribution_loop(n_conversations: int, max_iterations: int, patience: int, max_candidates: int) -> LoopResult:
    """The result of the attribution loop on `n_conversations` sim conversations split 50/25/25 (seed 0)."""
    calls = CallLedger()
    lms = counted_sim_lms(calls)
    system = Mem0Memory(HashingEmbedder())
    system.set_lm(lms.task)
    parts = split_by_conversation(sim_dataset(seed=0, n_conversations=n_conversations), (0.5, 0.25, 0.25), seed=0)
    settings = LoopSettings(max_iterations=max_iterations, patience=patience, min_gain=0.02,
                            max_candidates=max_candidates, workers=2)
    loop = OptimizationLoop(system, make_judge(lms.judge), build_optimizer("attribution", lms.rewriter, system=system),
                            parts, settings, calls=calls)
    return loop.run()


class Interrupted(Exception):
    """Raised by `StopAfter`: the test's stand-in for a killed run."""


class StopAfter:
    """A loop observer that interrupts the run when iteration `n` finishes, before its checkpoint is written
    (so a resume starts from the iteration before)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def on_iteration(self, record) -> None:
        if record.iteration == self.n:
            raise Interrupted

    def on_finish(self, result) -> None:
        pass
