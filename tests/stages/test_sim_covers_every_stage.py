"""The simulated world answers every LLM stage of every registered memory system, the judge and the
rewriter, the LLM attributor's step and the diagnostic summary. (That
a stage it does not know fails loudly is tested in test_sim_stand_in.py.)"""

from __future__ import annotations

import dspy
import pytest
from memtrace_loop.memory_systems.registry import SYSTEMS, build_memory_system
from memtrace_loop.optimizers.rewrite import RewriteInstruction
from memtrace_loop.pipeline.analysis.attribution.llm import JudgeOperation
from memtrace_loop.pipeline.analysis.diagnosis import DiagnoseFailures
from memtrace_loop.pipeline.analysis.judge import JudgeAnswer
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.sim import stand_in
from memtrace_loop.pipeline.sim.system_stages import system_stages


def handler_key(signature: type[dspy.Signature]) -> frozenset[str]:
    return frozenset(signature.output_fields) - {stand_in.REASONING_FIELD}


@pytest.mark.parametrize("system", sorted(SYSTEMS))
def test_every_stage_of_every_system_has_a_handler(system: str) -> None:
    program = build_memory_system({"name": system}, HashingEmbedder())
    handlers = stand_in.world_handlers(system_stages())  # the world's table plus the systems' own rows
    missing = [
        name for name, predictor in program.named_predictors()
        if handler_key(predictor.signature) not in handlers
    ]
    assert program.named_predictors(), f"{system} has no LLM stage at all"
    assert missing == []


@pytest.mark.parametrize("signature", [JudgeAnswer, RewriteInstruction, JudgeOperation, DiagnoseFailures])
def test_the_judge_the_rewriter_and_the_analysis_stages_have_handlers(signature: type[dspy.Signature]) -> None:
    assert handler_key(signature) in stand_in.HANDLER_BY_OUTPUTS
