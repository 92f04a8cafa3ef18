"""What the attribution of failures looks like once logged and selected: the attribution table's
verification columns and `attribution.*` shares, and the attributor a config node builds."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from memtrace_loop.experiments.config import Chosen
from memtrace_loop.experiments.factory import attributor_of
from memtrace_loop.memory_systems.registry import build_memory_system
from memtrace_loop.pipeline.analysis.attribution.lineage import LineageAttributor
from memtrace_loop.pipeline.analysis.attribution.records import (
    Attribution,
    AttributionCost,
    Check,
    ErrorType,
    Fault,
    Tunable,
)
from memtrace_loop.pipeline.analysis.attribution.registry import LLMSettings, attributor_settings, build_attributor
from memtrace_loop.pipeline.analysis.attribution.verification import VerifyingAttributor
from memtrace_loop.pipeline.analysis.judge import make_judge
from memtrace_loop.pipeline.backends.embeddings import EmbedderConfig, HashingEmbedder
from memtrace_loop.pipeline.core.config import ConfigError
from memtrace_loop.pipeline.core.records import CaseResult, Question, Scores
from memtrace_loop.pipeline.tracking.run_logging import attribution_columns, attribution_metrics, attribution_rows

from tests.support.sim import sim_lm
from tests.support.tracking import InMemoryTracker

CASE = CaseResult(Question("q1", "c1", "When did Alice hike?", "6 May 2023", 2), "no idea", "WRONG", Scores(0, 0, 0))
EXTRACT = Fault("op1", "extract_facts", "extract", ErrorType.EXTRACTION, Tunable.PROMPT, "lost the date")
DECIDE = Fault("op7", "decide_updates", "decide", ErrorType.UPDATE, Tunable.PROMPT, "overwrote it")


def blamed(verified: bool | None, joint: tuple[Fault, ...] = (), replay_calls: int = 0) -> Attribution:
    return Attribution(
        case=CASE, op="op1", op_name="extract_facts", stage="extract", error_type=ErrorType.EXTRACTION,
        reason="lost the date sk-secret-1234", confidence=0.9, method="lineage", check=Check.of(verified), joint=joint,
        cost=AttributionCost(lm_calls=2, replay_calls=replay_calls),
    )


def test_the_attribution_table_shows_verification_joint_sets_and_cost():
    items = [blamed(True, replay_calls=2), blamed(False, replay_calls=3), blamed(True, (EXTRACT, DECIDE), 6),
             blamed(None)]
    tracker = InMemoryTracker()
    tracker.open_experiment("x")
    with tracker.start_run("r") as run_id:
        tracker.log_table(attribution_columns(items, ["sk-secret-1234"]), "attributions.json")
    columns = json.loads(tracker.runs[run_id].text("attributions.json"))
    assert columns["check"] == ["verified", "refuted", "verified", "unchecked"]
    assert columns["joint"] == ["", "", "op1, op7", ""]
    assert columns["cost_lm_calls"] == ["2"] * 4 and columns["replay_calls"] == ["2", "3", "6", "0"]
    assert all("***" in reason and "sk-secret" not in reason for reason in columns["reason"])
    assert attribution_rows(items)[2]["joint_names"] == ["extract_facts", "decide_updates"]
    metrics = attribution_metrics(items)
    assert metrics["attribution/verified_share"] == 0.5
    assert metrics["attribution/refuted_share"] == 0.25
    assert metrics["attribution/joint_share"] == 0.25
    assert metrics["attribution/replay_calls"] == 11
    assert attribution_metrics([])["attribution/verified_share"] == 0.0


def test_the_config_node_selects_the_attributor_and_its_verification():
    assert type(build_attributor({"name": "lineage"})) is LineageAttributor
    assert type(build_attributor({"name": "lineage", "verify": False})) is LineageAttributor
    lm = sim_lm()
    system = build_memory_system({"name": "mem0"}, HashingEmbedder())
    system.set_lm(lm)
    config = SimpleNamespace(embedder=EmbedderConfig(backend="hashing"), attributor=Chosen(
        "lineage", attributor_settings({"name": "lineage", "verify": True, "replay": {"max_joint": 2}})))
    verifying = attributor_of(config, None, system, make_judge(lm))
    assert isinstance(verifying, VerifyingAttributor) and verifying.name == "lineage+replay"
    assert verifying.verifier.settings.max_joint == 2 and verifying.verifier.settings.max_replays == 8
    with pytest.raises(ConfigError, match=r"attributor\.verify"):
        build_attributor({"name": "lineage", "verify": True})  # no system and judge to replay with
    with pytest.raises(ConfigError, match=r"attributor\.name"):
        build_attributor({"name": "llm"})  # no attributor LM
    with pytest.raises(ConfigError, match=r"attributor\.use_embedder"):
        build_attributor({"name": "lineage", "use_embedder": True})  # no embedder


def test_the_llm_attributor_is_built_with_its_settings():
    from memtrace_loop.pipeline.analysis.attribution import llm
    from memtrace_loop.pipeline.backends.registry import build_lm_set

    roles = ("task", "judge", "attributor", "rewriter")
    lms = build_lm_set({role: {"backend": "sim", "model": "stand-in"} for role in roles})
    built = build_attributor({"name": "llm", "max_steps": 5, "max_chars_per_step": 900}, lms)
    assert isinstance(built, llm.LLMAttributor)
    assert built.settings == LLMSettings(max_steps=5, max_chars_per_step=900)
