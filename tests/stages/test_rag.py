"""The naive RAG system: token-bounded chunks (bounds, overlap, split turns), the traced chunk and retrieval
operations, and attribution on the simulated world (planted ground truth) and on the real LoCoMo subset."""

from __future__ import annotations

from collections import Counter
from itertools import pairwise

import pytest
from dspy.utils import DummyLM
from memtrace_loop.memory_systems.rag.system import RagKnobs, RagMemory, make_chunks, turn_pieces
from memtrace_loop.memory_systems.registry import build_memory_system
from memtrace_loop.memory_systems.signatures import render_turn
from memtrace_loop.pipeline.analysis.attribution.lineage import attribute_failures
from memtrace_loop.pipeline.analysis.attribution.records import ErrorType
from memtrace_loop.pipeline.analysis.blame import aggregate_blame
from memtrace_loop.pipeline.analysis.judge import make_judge
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.backends.tokens import ApproximateCounter, build_token_counter
from memtrace_loop.pipeline.core.graph import ExecutionGraph, OpKind
from memtrace_loop.pipeline.core.records import Conversation, Question, Turn
from memtrace_loop.pipeline.core.tracing import Tracer
from memtrace_loop.pipeline.data.locomo import load_locomo, parse_locomo
from memtrace_loop.pipeline.loop.runner import run_dataset
from memtrace_loop.pipeline.sim.handlers import NOT_MENTIONED, answer_question
from memtrace_loop.pipeline.sim.rules import RULES, rules_in, with_rules
from memtrace_loop.pipeline.sim.stages import expected_cause
from memtrace_loop.pipeline.sim.world import generate_locomo, planted_questions

from tests.support.paths import LOCOMO
from tests.support.requires import missing_locomo, requires
from tests.support.sim import sim_lm

APPROX = ApproximateCounter()
ANSWER_RULES = ("use_dates", "abstain")
TURNS = tuple(
    Turn(f"D{1 + i // 6}:{1 + i % 6}", "Alice" if i % 2 else "Bob", " ".join(["word"] * (3 + (7 * i) % 23)),
         1 + i // 6, f"2023-05-{8 + i // 6:02d}T13:56")
    for i in range(30)
)
CONVERSATION = Conversation(
    "c1",
    ("Alice", "Bob"),
    (
        Turn("D1:1", "Alice", "I live in Boston, it's a great place.", 1, "2023-05-08T13:56"),
        Turn("D1:2", "Bob", "The weather has been so strange this week.", 1, "2023-05-08T13:56"),
        Turn("D2:1", "Alice", "I went hiking at Mount Rainier last Saturday!", 2, "2023-06-09T10:00"),
        Turn("D2:2", "Bob", "That sounds like a lot of fun, tell me more about it.", 2, "2023-06-09T10:00"),
    ),
)
WHERE = Question("c1:q0", "c1", "Where does Alice live?", "Boston", 4, ("D1:1",))


def rendered(turn: Turn) -> str:
    return render_turn(turn.speaker, turn.time, turn.text)


def fresh_pieces(chunks):
    """Each chunk's pieces minus the overlap it repeats from the chunk before."""
    out, seen = [], set()
    for chunk in chunks:
        for piece in chunk.pieces:
            key = (piece.turn_id, piece.part)
            if key not in seen:
                seen.add(key)
                out.append(piece)
    return out



# ---------------------------------------------------------------------------------------------- chunking


@pytest.mark.parametrize("counter", [APPROX, build_token_counter("tiktoken")], ids=["approx", "tiktoken"])
def test_chunks_are_token_bounded_end_at_turn_boundaries_and_lose_nothing(counter):
    chunks = make_chunks(TURNS, 60, 0, counter)
    assert len(chunks) > 3 and [c.index for c in chunks] == list(range(1, len(chunks) + 1))
    for chunk in chunks:
        assert counter.count(chunk.text) <= chunk.tokens <= 60
        assert all(piece.part == 0 for piece in chunk.pieces)  # no turn of TURNS needs splitting
    assert "\n".join(c.text for c in chunks) == "\n".join(rendered(t) for t in TURNS)
    # a chunk closes only when the next turn would not fit
    for chunk, following in pairwise(chunks):
        assert chunk.tokens + 1 + following.pieces[0].tokens > 60


def test_overlap_repeats_the_last_turns_of_the_previous_chunk_within_the_overlap_budget():
    chunks = make_chunks(TURNS, 60, 20, APPROX)
    assert [p.text for p in fresh_pieces(chunks)] == [rendered(t) for t in TURNS]
    repeated = 0
    for previous, chunk in pairwise(chunks):
        assert chunk.tokens <= 60
        shared = [p for p in chunk.pieces if p in previous.pieces]
        assert chunk.pieces[: len(shared)] == tuple(shared) == previous.pieces[len(previous.pieces) - len(shared):]
        assert sum(p.tokens for p in shared) + max(len(shared) - 1, 0) <= 20
        repeated += len(shared)
    assert repeated > 0
    assert len(chunks) > len(make_chunks(TURNS, 60, 0, APPROX))


@pytest.mark.parametrize("counter", [APPROX, build_token_counter("tiktoken")], ids=["approx", "tiktoken"])
def test_a_turn_longer_than_a_chunk_is_split_into_prefixed_pieces_without_loss(counter):
    words = [f"w{i}" for i in range(400)] + ["x" * 300]  # and one word longer than a piece
    long_turn = Turn("D9:1", "Alice", " ".join(words), 9, "2023-07-01T10:00")
    pieces = turn_pieces(long_turn, 50, counter)
    prefix = render_turn("Alice", long_turn.time, "")
    assert len(pieces) > 5 and [p.part for p in pieces] == list(range(1, len(pieces) + 1))
    assert all(p.text.startswith(prefix) and counter.count(p.text) == p.tokens <= 50 for p in pieces)
    assert "".join(p.text.removeprefix(prefix).replace(" ", "") for p in pieces) == "".join(words)
    chunks = make_chunks((TURNS[0], long_turn, TURNS[1]), 50, 0, counter)
    assert all(c.tokens <= 50 for c in chunks)
    assert [p.text for p in fresh_pieces(chunks)] == [rendered(TURNS[0]), *(p.text for p in pieces), rendered(TURNS[1])]


def test_knobs_are_validated_and_read_from_the_config():
    built = build_memory_system({"name": "rag", "max_chunk_tokens": 300, "overlap_tokens": 40, "top_k": 3,
                         "tokenizer": "approx"}, HashingEmbedder())
    assert built.knobs == RagKnobs(300, 40, 3, "approx")
    assert built.stage_names() == ("respond",) and built.construction_stages == ()
    assert "max_chunk_tokens=300;overlap_tokens=40;embedder=" in built.construction_knobs()
    assert "tokenizer=approx-chars/4" in built.construction_knobs() and set(built.non_llm_stages()) == {
        "chunk", "retrieve"}
    assert isinstance(build_memory_system({"name": "rag"}, HashingEmbedder()), RagMemory)
    other = build_memory_system({"name": "rag", "max_chunk_tokens": 200, "tokenizer": "approx"}, HashingEmbedder())
    assert built.memory_key(CONVERSATION) != other.memory_key(CONVERSATION)
    with pytest.raises(ValueError, match="overlap_tokens"):
        RagKnobs(max_chunk_tokens=100, overlap_tokens=100)


# ---------------------------------------------------------------------------------------------- trace


def test_chunks_and_retrieval_are_traced_from_the_turns_to_the_answer():
    built = RagMemory(HashingEmbedder(), RagKnobs(max_chunk_tokens=40, top_k=2, tokenizer="approx"))
    built.set_lm(DummyLM([{"answer": "Boston"}]))
    graph = ExecutionGraph("c1")
    state = built.ingest(CONVERSATION, Tracer(graph))
    assert len(state.chunks) >= 2
    for chunk in state.chunks:
        var = graph.variable(f"chunk:{chunk.index}@1")
        assert var.kind == "chunk" and var.value == chunk.text and var.meta["turns"] == list(chunk.turn_ids)
        op = graph.producer(var.id)
        assert (op.name, op.stage, op.kind, op.prompt) == ("chunk_turns", "chunk", OpKind.EXTRACTION, None)
        assert op.inputs == tuple(f"turn:{t}@1" for t in chunk.turn_ids)
    tracer = Tracer(graph, buffered=True)
    outcome = built.answer(WHERE, state, tracer)
    tracer.commit()
    graph.check()
    assert outcome.text == "Boston"
    retrieve = graph.producer("retrieved:c1:q0@1")
    assert (retrieve.name, retrieve.stage, retrieve.kind) == ("retrieve_chunks", "retrieve", OpKind.RETRIEVAL)
    assert retrieve.meta["k"] == 2 and len(retrieve.meta["scores"]) == 2 and retrieve.inputs[0] == "query:c1:q0@1"
    chunk_inputs = retrieve.inputs[1:]
    assert "chunk:1@1" in chunk_inputs  # the chunk holding D1:1 ranks first for "Where does Alice live?"
    context = graph.variable("retrieved:c1:q0@1").value
    assert context == "\n\n".join(graph.variable(v).value for v in chunk_inputs)
    answer_op = graph.producer(outcome.answer_var)
    assert answer_op.stage == "respond" and answer_op.inputs == (outcome.query_var, "retrieved:c1:q0@1")
    assert "turn:D1:1@1" in graph.ancestors(outcome.answer_var)


def test_the_stand_in_reads_raw_turn_lines_in_chunks():
    context = "\n".join(rendered(t) for t in CONVERSATION.turns)
    question = "When did Alice go hiking?"
    assert answer_question(context, question, frozenset()) == "Alice went hiking at Mount Rainier."
    assert answer_question(context, question, frozenset({"use_dates"})) == "3 June 2023"
    assert answer_question(context, "Where does Bob live?", frozenset({"abstain"})) == NOT_MENTIONED


# ---------------------------------------------------------------------------------------------- simulated world


def sim_run(knobs: RagKnobs, rules: tuple[str, ...] = (), n_conversations: int = 3):
    samples = generate_locomo(seed=0, n_conversations=n_conversations)
    dataset = parse_locomo(samples, "sim")
    lm = sim_lm()
    built = RagMemory(HashingEmbedder(), knobs)
    built = built.with_prompts(built.prompt_set().replace(respond=with_rules(built.prompt_set()["respond"], rules)))
    built.set_lm(lm)
    result = run_dataset(built, make_judge(lm), dataset, workers=2)
    present = {r.id for r in RULES if r.stage != "answer"} | rules_in(built.prompt_set()["respond"])
    attributions = attribute_failures(result.results, result.graph_by_conversation,
                                      {c.id: c for c in dataset.conversations})
    return result, attributions, planted_questions(samples), present


def accuracy(result) -> float:
    scored = [r.correct for r in result.results if r.question.category != 5]
    return sum(scored) / len(scored)


@pytest.fixture(scope="module")
def default_run():
    return sim_run(RagKnobs(tokenizer="approx"))


def test_default_prompts_fail_the_planted_answer_rules_and_stating_them_fixes_it(default_run):
    result, _, planted, _ = default_run
    fixed, _, _, _ = sim_run(RagKnobs(tokenizer="approx"), rules=ANSWER_RULES)
    assert accuracy(result) <= accuracy(fixed) - 0.08 and accuracy(fixed) >= 0.95
    assert not any(r.correct for r in result.results if r.question.category == 5)
    assert all(r.correct for r in fixed.results if r.question.category == 5)
    assert {planted[r.question.id].kind for r in result.results if not r.correct} == {"event_date", "adversarial"}


def test_failures_with_everything_retrieved_are_response_errors(default_run):
    _, attributions, planted, present = default_run
    checked = list(attributions)
    assert len(checked) >= 10
    assert all(expected_cause(planted[a.question_id].needs, present)[0] == "ResponseError" for a in checked)
    assert all(a.error_type == ErrorType.RESPONSE and a.stage == "respond" for a in checked)


def test_temporal_failures_with_everything_retrieved_are_response_errors(default_run):
    _, attributions, planted, _ = default_run
    temporal = [a for a in attributions if planted[a.question_id].kind == "event_date"]
    assert temporal and all(a.error_type == ErrorType.RESPONSE and a.stage == "respond" for a in temporal)


def test_small_chunks_and_a_tiny_top_k_make_retrieval_errors_of_the_search_knobs():
    result, attributions, planted, present = sim_run(
        RagKnobs(max_chunk_tokens=120, top_k=2, tokenizer="approx"), rules=ANSWER_RULES
    )
    assert accuracy(result) < 0.6 and len(attributions) >= 20
    assert all(expected_cause(planted[a.question_id].needs, present)[0] is None for a in attributions)
    types = Counter(a.error_type for a in attributions)
    assert set(types) <= {ErrorType.RETRIEVAL, ErrorType.RESPONSE}
    assert types[ErrorType.RETRIEVAL] / len(attributions) >= 0.9
    retrieval = [a for a in attributions if a.error_type == ErrorType.RETRIEVAL]
    assert all(a.stage == "retrieve" and a.tunable == "knobs" and "k=2" in a.reason for a in retrieval)
    table = aggregate_blame(attributions)
    assert table.rows[0].stage == "retrieve" and "retrieve" not in table.prompt_stages()


# ---------------------------------------------------------------------------------------------- real data


@pytest.mark.slow
@requires(missing_locomo())
def test_a_run_on_the_real_locomo_subset_completes():
    dataset = load_locomo(LOCOMO)
    one = dataset.subset((dataset.conversations[0].id,))
    lm = sim_lm()
    built = build_memory_system({"name": "rag", "max_chunk_tokens": 300, "overlap_tokens": 60}, HashingEmbedder())
    built.set_lm(lm)
    result = run_dataset(built, make_judge(lm), one, workers=4)
    graph = result.graph_by_conversation[one.conversations[0].id]
    graph.check()
    assert len(result.results) == len(one.questions) and result.counts.failed_operations == 0
    chunks = [graph.latest(n) for n in graph.names("chunk:")]
    assert len(chunks) > 10 and all(built.counter.count(c.value) <= 300 for c in chunks)
    attributions = attribute_failures(result.results, result.graph_by_conversation,
                                      {c.id: c for c in one.conversations})
    assert attributions and {a.stage for a in attributions} <= {"chunk", "retrieve", "respond"}
    assert {a.error_type for a in attributions} >= {ErrorType.RETRIEVAL, ErrorType.RESPONSE}
