"""Calibration of the simulated world against the real Mem0-style system (retrieval included).

With the default prompts about half of the category 1-4 questions must be answered correctly, for
the planted reasons; with every rule sentence appended nearly all of them.
"""

from __future__ import annotations

from collections import Counter

import dspy
import pytest
from memtrace_loop.pipeline.sim.engine import SimEngine
from memtrace_loop.pipeline.sim.rules import rules_for_stage, with_rules
from memtrace_loop.pipeline.sim.stages import stage_for_outputs
from memtrace_loop.pipeline.sim.world import generate_locomo

# every test here runs the loop or a whole run (seconds each): out of `make test-fast`
pytestmark = pytest.mark.slow


from memtrace_loop.memory_systems.mem0 import system as mem0  # noqa: E402
from memtrace_loop.pipeline.analysis.judge import make_judge  # noqa: E402
from memtrace_loop.pipeline.backends import embeddings  # noqa: E402
from memtrace_loop.pipeline.core import records  # noqa: E402
from memtrace_loop.pipeline.data import locomo as data  # noqa: E402
from memtrace_loop.pipeline.loop import runner  # noqa: E402


def _all_rules(system):
    prompts = {}
    for name, predictor in system.named_predictors():
        stage = stage_for_outputs(predictor.signature.output_fields)
        rule_ids = [rule.id for rule in rules_for_stage(stage or "")]
        prompts[name] = with_rules(predictor.signature.instructions, rule_ids)
    return system.with_prompts(records.PromptSet(prompts))


@pytest.fixture(scope="module")
def runs() -> dict[str, list[tuple[dict, bool]]]:
    raw = generate_locomo(seed=0, n_conversations=4)
    dataset = data.parse_locomo(raw, "sim")
    planted = {(s["sample_id"], qa["question"]): qa for s in raw for qa in s["qa"]}
    lm = dspy.LM("sim/stand-in", engine=SimEngine(), cache=False)
    default = mem0.Mem0Memory(embeddings.HashingEmbedder())
    out = {}
    for label, system in (("default", default), ("all_rules", _all_rules(default))):
        with dspy.context(lm=lm):
            result = runner.run_dataset(system, make_judge(), dataset, workers=1, exclude_categories=())
        out[label] = [(planted[(r.question.conversation_id, r.question.text)], r.correct) for r in result.results]
    return out


def _accuracy(judged: list[tuple[dict, bool]]) -> float:
    scored = [ok for qa, ok in judged if qa["category"] != 5]
    return sum(scored) / len(scored)


def test_default_prompts_fail_on_about_half_for_the_planted_causes(runs) -> None:
    judged = runs["default"]
    assert 0.40 <= _accuracy(judged) <= 0.60
    causes = Counter(qa["sim"]["cause"] for qa, ok in judged if not ok)
    assert {"ExtractionError", "UpdateError", "DeletionError", "ResponseError"} <= set(causes)
    # failures without a planted cause are retrieval misses: a small minority
    assert causes[None] <= 0.1 * sum(causes.values())
    # questions with a planted cause fail (a retrieval quirk may, rarely, spare a careless deletion)
    planted = [ok for qa, ok in judged if qa["sim"]["cause"] is not None]
    assert sum(planted) <= 0.05 * len(planted)


def test_all_rule_sentences_fix_nearly_everything(runs) -> None:
    assert _accuracy(runs["all_rules"]) >= 0.85
    adversarial = [ok for qa, ok in runs["all_rules"] if qa["category"] == 5]
    assert adversarial and all(adversarial)
