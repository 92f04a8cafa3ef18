"""Knob candidates: values chosen from where the search ranked the evidence, knobs applied to a system,
exported and loaded back (with clear errors for knobs a system does not have)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from memtrace_loop.memory_systems.base import KnobError
from memtrace_loop.memory_systems.long_context.system import LongContextMemory
from memtrace_loop.memory_systems.mem0.system import Mem0Memory
from memtrace_loop.optimizers.knobs import covering_value, propose_knobs
from memtrace_loop.pipeline.analysis.attribution.records import Attribution, ErrorType, Fault, Tunable
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.core.conventions import NEAR_MISSES, OpKind, VarKind
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.prompt_files import (
    ExportedPrompts,
    PromptFileError,
    apply_prompts,
    read_prompts,
    write_prompts,
)
from memtrace_loop.pipeline.core.records import CaseResult, Question, Scores
from memtrace_loop.pipeline.loop.summaries import CandidateSummary


def search_graph(k: int, near: int) -> tuple[ExecutionGraph, list[str]]:
    """A graph with one search (top `k`) that ranked `near` memories just below its cut."""
    graph = ExecutionGraph("c")
    memories = [graph.add_variable(f"memory:{i}", VarKind.MEMORY, f"fact {i}").id for i in range(k + near)]
    query = graph.add_variable("query:c:q", VarKind.QUERY, "Where?").id
    out = graph.add_variable("retrieved:c:q", VarKind.RETRIEVED, "facts").id
    graph.add_operation("search", "retrieve", OpKind.RETRIEVAL, [query, *memories], [out],
                        meta={"k": k, NEAR_MISSES: memories[k:]})
    return graph, memories


def miss(i: int, lost: str, stage: str = "retrieve", error: ErrorType = ErrorType.RETRIEVAL) -> Attribution:
    question = Question(f"c:q{i}", "c", "Where?", "Rome", 1, ())
    fault = Fault("op:0", "search", stage, error, Tunable.KNOBS, "missed", (lost,))
    return Attribution(CaseResult(question, "Paris", "WRONG", Scores(0.0, 0.0, 0.0)), "op:0", "search", stage,
                       error, "missed", 0.85, "lineage", Tunable.KNOBS, suspects=(fault,))


def test_covering_value_is_the_smallest_that_fits_the_share():
    assert covering_value([12, 16, 11, 20]) == 20
    assert covering_value([12, 16, 11, 20], cover=0.5) == 12
    assert covering_value([7]) == 7


def test_top_k_reaches_the_deepest_miss_the_search_ranked():
    graph, memories = search_graph(k=10, near=10)
    misses = [miss(1, memories[12]), miss(2, memories[15]), miss(3, "memory:absent@1")]
    (proposal,) = propose_knobs(misses, {"top_k": 10, "similar_k": 5}, {}, {"c": graph})
    assert proposal.stage == "retrieve" and dict(proposal.changes) == {"top_k": 16}  # rank 6 below the cut
    assert proposal.failures == 3 and "2 of 3" in proposal.reason


def test_without_ranked_misses_top_k_grows_and_construction_knobs_double():
    graph, _ = search_graph(k=10, near=0)
    (widened,) = propose_knobs([miss(1, "memory:absent@1")], {"top_k": 10}, {}, {"c": graph})
    assert dict(widened.changes) == {"top_k": 20}
    trimmed = miss(2, "turn:D1:1@1", stage="trim", error=ErrorType.EXTRACTION)
    knobs = {"window_tokens": 800, "tokenizer": "approx"}
    (window,) = propose_knobs([trimmed], knobs, {"trim": ("window_tokens",)}, {})
    assert dict(window.changes) == {"window_tokens": 1600}


def test_prompt_blames_and_knobs_the_system_lacks_propose_nothing():
    graph, memories = search_graph(k=10, near=5)
    prompt_blame = Attribution(miss(1, memories[11]).case, "op:0", "extract", "extract", ErrorType.EXTRACTION, "x",
                               0.9, "lineage", Tunable.PROMPT)
    assert propose_knobs([prompt_blame], {"top_k": 10}, {}, {"c": graph}) == ()
    assert propose_knobs([miss(1, memories[11])], {"window_tokens": 800}, {}, {"c": graph}) == ()


def test_with_knobs_copies_and_rejects_what_does_not_fit():
    system = Mem0Memory(HashingEmbedder())
    wider = system.with_knobs({"top_k": 20})
    assert wider.knobs.top_k == 20 and system.knobs.top_k == 10 and wider.non_default_knobs() == {"top_k": 20}
    assert system.with_knobs({}) is system
    with pytest.raises(KnobError, match=r"\['window_tokens'\].*its knobs"):
        system.with_knobs({"window_tokens": 10})
    with pytest.raises(KnobError, match=r"'top_k'.*must be a int"):
        system.with_knobs({"top_k": "20"})
    with pytest.raises(KnobError, match="top_k"):
        system.with_knobs({"top_k": 0})


def test_exported_knobs_load_back_and_old_files_still_load(tmp_path: Path):
    prompts = Mem0Memory(HashingEmbedder()).prompt_set()
    exported = ExportedPrompts.create("mem0", prompts, knobs={"top_k": 20})
    for suffix in ("json", "yaml"):
        path = write_prompts(exported, tmp_path / f"best.{suffix}")
        again = read_prompts(path)
        assert again == exported and dict(again.knobs) == {"top_k": 20}
        assert apply_prompts(Mem0Memory(HashingEmbedder()), again).knobs.top_k == 20
    plain = write_prompts(ExportedPrompts.create("mem0", prompts), tmp_path / "plain.json")
    assert "knobs" not in json.loads(plain.read_text())  # a prompt-only export is written as before
    assert apply_prompts(Mem0Memory(HashingEmbedder()), read_prompts(plain)).knobs.top_k == 10


def test_a_knob_the_system_lacks_names_the_file_and_the_knob(tmp_path: Path):
    data = {"format_version": 1, "system": "long_context", "created": "2026-01-01T00:00:00+00:00",
            "source_run": None, "metrics": {}, "prompts": {"respond": "Answer."}, "knobs": {"top_k": 5}}
    path = tmp_path / "lc.json"
    path.write_text(json.dumps(data))
    with pytest.raises(PromptFileError, match=r"lc\.json.*\['top_k'\]"):
        apply_prompts(LongContextMemory(), read_prompts(path))
    path.write_text(json.dumps({**data, "knobs": {"window_tokens": [1]}}))
    with pytest.raises(PromptFileError, match=r"lc\.json.*knobs\['window_tokens'\]"):
        read_prompts(path)


def test_candidate_summaries_keep_knob_changes_through_json():
    summary = CandidateSummary(("retrieve",), 0.9, 0.04, (0.0, 0.1), True, "top_k 10 -> 20", {"top_k": 20})
    assert CandidateSummary.from_dict(json.loads(json.dumps(summary.to_dict()))) == summary
    plain = CandidateSummary(("extract",), 0.9, 0.04, (0.0, 0.1), True, "rewrite")
    assert "knobs" not in plain.to_dict() and CandidateSummary.from_dict(plain.to_dict()) == plain
