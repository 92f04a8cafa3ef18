"""The LLM walk on the paths the loop needs, in degraded sim worlds: retrieval misses, knob causes, two-stage cases.

Each world is a real system with one small knob (EverMemOS and RAG `top_k=1`, RAG 24-token chunks, a
Long-Context 800-token window) on the stand-in LM, which answers the walk's `JudgeOperation` requests
from the request text alone. The checks: a retrieval fault restores the units the search MISSED (in
memory at question time, on the evidence's path, not returned) — never what it returned — and names a
near miss that a larger `top_k` reaches; knob causes are knob faults of the retrieval, chunking or
trimming stage; the blamed stage agrees with the lineage attributor's; every suspect comes earliest
first with its restore, the answer stage among them only when its context held the information; and
every step stays under its character bound. The seed is one the other attributor tests do not use.
"""

from __future__ import annotations

from typing import Any

import dspy
import pytest
from dspy.utils.callback import BaseCallback
from memtrace_loop.memory_systems.registry import build_memory_system
from memtrace_loop.pipeline.analysis.attribution.lineage import LineageAttributor
from memtrace_loop.pipeline.analysis.attribution.llm import JudgeOperation, LLMAttributor
from memtrace_loop.pipeline.analysis.attribution.records import Attribution, ErrorType, Tunable
from memtrace_loop.pipeline.analysis.attribution.repairs import needed_top_k
from memtrace_loop.pipeline.analysis.attribution.settings import LLMSettings
from memtrace_loop.pipeline.analysis.attribution.walk_paths import InformationPath
from memtrace_loop.pipeline.analysis.judge import make_judge
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.core.conventions import MEMORY_KINDS, first_version, name_of, turn_name
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.loop.runner import run_dataset
from memtrace_loop.pipeline.sim import attributor_handler
from memtrace_loop.pipeline.sim.protocol import StageRequest

from tests.support.sim import sim_dataset, sim_lm

SEED = 23
# (system, knobs, the stage lineage blames most there, agreement floor). Measured on this seed (2
# conversations) the walk's blamed stage agrees with lineage's on 0.95-1.0 of the failures of each world.
WORLDS = {
    "evermemos-top_k-1": ("evermemos", {"top_k": 1}, "retrieve", 0.9),
    "rag-top_k-1": ("rag", {"top_k": 1}, "retrieve", 0.9),
    "rag-chunk-24": ("rag", {"max_chunk_tokens": 24}, "chunk", 0.9),
    "long_context-window-800": ("long_context", {"window_tokens": 800}, "trim", 0.9),
}


class StepSizes(BaseCallback):
    """The total characters of every walk step's input fields."""

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def on_module_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        if isinstance(instance, dspy.Predict) and instance.signature.__name__ == JudgeOperation.__name__:
            fields = inputs.get("kwargs", inputs)
            self.sizes.append(sum(len(str(v)) for k, v in fields.items() if k in JudgeOperation.input_fields))


@pytest.fixture(scope="module", params=sorted(WORLDS))
def world(request: pytest.FixtureRequest):
    system_name, knobs, stage, floor = WORLDS[request.param]
    lm = sim_lm()
    system = build_memory_system({"name": system_name, **knobs}, HashingEmbedder())
    system.set_lm(lm)
    result = run_dataset(system, make_judge(lm), sim_dataset(seed=SEED, n_conversations=2), workers=1)
    graphs = result.graph_by_conversation
    cases = [c for c in result.results if not c.correct and c.question.category != 5]
    settings = LLMSettings(max_chars_per_step=1600)
    sizes = StepSizes()
    llm, lineage = LLMAttributor(lm, settings), LineageAttributor()
    found: list[tuple[ExecutionGraph, Attribution, Attribution]] = []
    with dspy.context(callbacks=[sizes]):
        for case in cases:
            graph = graphs[case.question.conversation_id]
            found.append((graph, llm.attribute(graph, case), lineage.attribute(graph, case)))
    return request.param, stage, floor, found, settings, sizes.sizes


def evidence_vars(walk: Attribution) -> tuple[str, ...]:
    return tuple(first_version(turn_name(e)) for e in walk.evidence)


def test_blame_agrees_with_lineage_and_lands_on_the_knob_stage(world) -> None:
    name, stage, floor, found, _, _ = world
    assert len(found) >= 5, f"{name}: the degraded world should plant failures"
    agree = sum(walk.stage == lineage.stage for _, walk, lineage in found)
    assert agree / len(found) >= floor, f"{name}: {agree}/{len(found)} agree with lineage"
    on_stage = [walk for _, walk, lineage in found if lineage.stage == stage and walk.stage == stage]
    assert on_stage, f"{name}: the walk should blame {stage} where lineage does"
    assert all(walk.tunable == Tunable.KNOBS for walk in on_stage), "a knob cause is a knob fault"


def test_a_retrieval_fault_restores_the_units_the_search_missed(world) -> None:
    name, _, _, found, _, _ = world
    checked = near = 0
    for graph, walk, _ in found:
        for fault in walk.suspects:
            if fault.error_type != ErrorType.RETRIEVAL or fault.op not in graph:
                continue
            search = graph.operation(fault.op)
            path = InformationPath(graph, walk.case.question, evidence_vars(walk))
            missed = path.missed(search)
            if not missed:
                continue
            checked += 1
            assert fault.restore == missed, f"{name} {walk.question_id}: restore {fault.restore} != {missed}"
            for unit_id in fault.restore:
                unit = graph.variable(unit_id)
                assert unit_id not in search.inputs, "never what the search returned"
                assert unit.kind in MEMORY_KINDS and graph.latest(name_of(unit_id)).id == unit_id
                assert not unit.meta.get("deleted") and unit_id in path.carriers
            top_k = needed_top_k(graph, fault)
            if top_k is not None:
                near += 1
                assert top_k > search.meta["k"], "the near miss lies below the cut"
    if name.endswith("top_k-1"):
        assert checked >= 3 and near >= 1, f"{name}: {checked} retrieval faults, {near} near misses"


def test_suspects_come_earliest_first_each_with_a_restore(world) -> None:
    name, _, _, found, _, _ = world
    for graph, walk, _ in found:
        seqs = [f.seq for f in walk.suspects]
        assert seqs == sorted(seqs) and len({f.op for f in walk.suspects}) == len(seqs)
        assert walk.op in {f.op for f in walk.suspects}
        assert all(f.restore for f in walk.suspects), f"{name} {walk.question_id}: a suspect restores nothing"
        for fault in walk.suspects:
            if fault.stage == "respond" and fault.op != walk.op:  # a second suspect only with the information
                answer = graph.operation(fault.op)
                path = InformationPath(graph, walk.case.question, evidence_vars(walk))
                assert path.context_holders(answer), f"{name} {walk.question_id}: the context held nothing"


def test_construction_blames_carry_the_search_as_a_second_suspect(world) -> None:
    name, _, _, found, _, _ = world
    construction = [
        walk for _, walk, _ in found
        if walk.error_type in (ErrorType.EXTRACTION, ErrorType.UPDATE, ErrorType.DELETION)
        and walk.stage not in ("chunk", "trim")
    ]
    for walk in construction:
        assert any(f.error_type == ErrorType.RETRIEVAL for f in walk.suspects) or name.startswith("long_context")


def test_every_step_stays_under_its_bound(world) -> None:
    _, _, _, found, settings, sizes = world
    assert sizes and max(sizes) <= settings.max_chars_per_step
    assert all(0 < walk.cost.lm_calls <= settings.max_steps for _, walk, _ in found)


# ------------------------------------------------------------------------------------ the stand-in's verdicts


def request(kind: str, inputs: str, outputs: str, question: str = "What pets does Nora have?",
            gold: str = "a cat named Max and a dog named Rex",
            needed: str = "[turn:D1:1@1] I have a cat named Max.\n[turn:D2:3@1] We adopted a dog named Rex!",
            ) -> StageRequest:
    fields = {
        "question": question, "gold_answer": gold, "needed_information": needed,
        "operation": f"op (stage s, kind {kind}, op:1)", "operation_inputs": inputs, "operation_outputs": outputs,
        "operation_prompt": "none",
    }
    return StageRequest("audit", inputs=fields)


def test_the_stand_in_reads_only_the_request() -> None:
    missed = request("retrieval", "[chunk:2@1] Nora: We adopted a dog named Rex!\n[chunk:1@1] Nora: I have a cat "
                     "named Max.", "[retrieved:q@1] Nora: I have a cat named Max.")
    verdict = attributor_handler.judge_operation(missed)
    assert verdict["kept_information"] is False and verdict["error_type"] == "RetrievalError"
    assert "rex" in verdict["reason"]
    whole = request("retrieval", "[chunk:1@1] Nora: I have a cat named Max. We adopted a dog named Rex!",
                    "[retrieved:q@1] Nora: I have a cat named Max. We adopted a dog named Rex!")
    assert attributor_handler.judge_operation(whole)["kept_information"] is True
    nothing = request("response", "[retrieved:q@1] Nora: I love hiking.", "[answer:q@1] hiking")
    assert attributor_handler.judge_operation(nothing)["kept_information"] is True, "no information to mishandle"
    half = request("response", "[retrieved:q@1] Nora: I have a cat named Max. We adopted a dog named Rex!",
                   "[answer:q@1] a cat named Max")
    assert attributor_handler.judge_operation(half)["error_type"] == "ResponseError", "a partial answer is wrong"
    inflected = request("extraction", "[turn:D2:11@1] [7 January 2022] Aaron: Last Sunday I volunteered.",
                        "[facts:D2:11@1] Aaron volunteered.", question="When did Aaron volunteer?",
                        gold="2 January 2022", needed="[turn:D2:11@1] Last Sunday I volunteered.")
    assert attributor_handler.judge_operation(inflected)["kept_information"] is False, "the date was lost"


def test_a_step_that_drops_the_answer_word_lost_the_information_even_when_the_rest_is_kept() -> None:
    """EverMemOS's writer kept "best friend Priya" but not "nurse": most of the needed words survive, yet a
    reader shown the gold answer sees its only word go missing. A view clipped for display proves nothing."""
    needed = "[turn:D4:13@1] My best friend Priya just got a job as a nurse."
    question, gold = "What kind of work does Farid's best friend Priya do?", "nurse"
    turn = "[turn:D4:13@1] [13 August 2022] Farid: My best friend Priya just got a job as a nurse."
    dropped = request("extraction", turn, "[event:16@1] Farid has a best friend named Priya. Time: 13 August 2022",
                      question=question, gold=gold, needed=needed)
    verdict = attributor_handler.judge_operation(dropped)
    assert verdict["kept_information"] is False and verdict["error_type"] == "ExtractionError"
    assert "nurse" in verdict["reason"]
    kept = request("extraction", turn, "[event:16@1] Priya, Farid's best friend, now works in nursing: a nurse.",
                   question=question, gold=gold, needed=needed)
    assert attributor_handler.judge_operation(kept)["kept_information"] is True
    clipped = request("extraction", turn, "[chunk:1@1] ... Farid: My best friend Priya just got a ...",
                      question=question, gold=gold, needed=needed)
    assert attributor_handler.judge_operation(clipped)["kept_information"] is True, "the word may be clipped"
    pets = "a rabbit named Pickles and a cat named Pepper"
    kept_fact = "[facts:D4:11@1] [\"Marco has a pet rabbit named Pickles.\"]"
    beside = request(  # "cat" is in another memory shown beside the fact, not in what the step was given to keep
        "update", f"{kept_fact}\n[similar:D4:11@1] [0] Lena has a pet cat named Nugget.",
        "[decision:D4:11@1] [{\"id\": \"5\", \"text\": \"Marco has a pet rabbit named Pickles.\", \"event\": \"ADD\"}]",
        question="What pets does Marco have?", gold=pets,
        needed="[turn:D4:11@1] My rabbit Pickles is the best company.\n[turn:D6:7@1] We adopted a cat named Pepper!")
    assert attributor_handler.judge_operation(beside)["kept_information"] is True


def test_a_word_of_another_turn_in_the_same_buffer_is_not_the_information() -> None:
    """EverMemOS writes an event from a buffer of turns: "Work" in Quinn's turn beside Nora's is not the
    needed information, so an event keeping all of Nora's turn kept it (the job was in another turn)."""
    needed = ("[turn:D2:2@1] My aunt's name is Marco, we talk every day.\n"
              "[turn:D6:9@1] Marco started working as a nurse.")
    buffer = ("[turn:D2:2@1] [13 June 2023] Nora: My aunt's name is Marco, we talk every day.\n"
              "[turn:D2:1@1] [13 June 2023] Quinn: Work has been pretty hectic, but it's fine.")
    asked = {"question": "What kind of work does Nora's aunt do?", "gold": "nurse", "needed": needed}
    kept = request("extraction", buffer, "[event:5@1] Nora has an aunt named Marco. Time: 13 June 2023", **asked)
    assert attributor_handler.judge_operation(kept)["kept_information"] is True
    lost = request("extraction", buffer, "[event:5@1] Nora talks every day. Time: 13 June 2023", **asked)
    assert attributor_handler.judge_operation(lost)["kept_information"] is False, "the aunt was dropped"
