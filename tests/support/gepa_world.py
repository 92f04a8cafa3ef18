"""The GEPA tests' world (tests/stages/test_gepa.py, tests/e2e/test_gepa_loop.py): a mem0 system on the sim
stand-in whose LMs count into a `CallLedger`, its train/dev split and a case runner; `SMALL`, GEPA settings for a
quick search."""

from __future__ import annotations

from memtrace_loop.memory_systems.mem0.system import Mem0Memory
from memtrace_loop.optimizers.base import OptimizationContext
from memtrace_loop.optimizers.gepa import Settings
from memtrace_loop.optimizers.gepa_program import MemoryProgram
from memtrace_loop.pipeline.analysis.blame import BlameTable
from memtrace_loop.pipeline.analysis.judge import make_judge
from memtrace_loop.pipeline.backends.call_count import CallLedger
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.backends.registry import backend_test_world
from memtrace_loop.pipeline.data.splits import split_by_conversation
from memtrace_loop.pipeline.loop.runner import LoopCaseRunner, MemoryCache

from tests.support.sim import counted_sim_lms, sim_dataset

SMALL = Settings(max_metric_calls=100, num_threads=2, reflection_minibatch_size=3)


class CaseEvaluator:
    """The per-question half of the loop's `Evaluator` over a world (GEPA scores only per question)."""

    def __init__(self, world: World) -> None:
        self.world = world

    def evaluate(self, prompts, split="train", question_ids=None):
        raise NotImplementedError("GEPA scores per question")

    def questions(self, split):
        return self.world.cases.questions(split)

    def system(self, prompts):
        return self.world.system.with_prompts(prompts)

    def run_case(self, system, split, question_id):
        return self.world.cases.run_case(system, split, question_id)


class World:
    """A mem0 system on the stand-in (task and judge LMs counting into `ledger`), its train/dev split, and
    a case runner."""

    def __init__(self, n_conversations: int = 4) -> None:
        self.ledger = CallLedger()
        lms = counted_sim_lms(self.ledger)
        self.lm = lms.task
        self.system = Mem0Memory(HashingEmbedder())
        self.system.set_lm(self.lm)
        self.judge = make_judge(lms.judge)
        parts = split_by_conversation(sim_dataset(seed=0, n_conversations=n_conversations), (0.5, 0.25, 0.25), seed=0)
        self.train, self.dev = parts.train, parts.dev
        self.cache = MemoryCache()
        self.cases = LoopCaseRunner(self.judge, {"train": self.train, "dev": self.dev}, self.cache, (5,))

    @property
    def calls(self) -> int:
        """The task and judge LM calls made so far (the ledger's count)."""
        return self.ledger.tally().made()

    def program(self, system=None) -> MemoryProgram:
        split = {q.id: "train" for q in self.train.questions} | {q.id: "dev" for q in self.dev.questions}
        return MemoryProgram(system or self.system, self.cases, split)

    def perfect(self, stage: str) -> str:
        predictor = dict(self.system.named_predictors())[stage]
        signature = predictor.signature
        return backend_test_world().perfect_instruction(signature.instructions, signature.output_fields)

    def context(self, iteration: int = 1, budget=None) -> OptimizationContext:
        return OptimizationContext(
            iteration, self.system.prompt_set(), BlameTable(), (), (), evaluator=CaseEvaluator(self), budget=budget
        )

    def stage_rewrite(self):
        """A reflection that completes whichever stage's default instruction it is shown with its sim rules."""
        predictors = self.system.named_predictors()
        perfect_by_default = {p.signature.instructions.strip(): self.perfect(n) for n, p in predictors}
        return lambda current, _prompt: perfect_by_default.get(current.strip(), current + " Be precise.")
