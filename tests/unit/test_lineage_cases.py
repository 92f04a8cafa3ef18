"""The lineage attributor case by case, on small execution graphs built by hand.

Each test builds one conversation graph the way a memory system records it (the builders of
tests/support/hand_graphs.py), plants one fault, and checks what `ConversationLineage.attribute`
returns: the error type, the blamed operation (id, name, stage), whether its prompt or its knobs are
tunable, the evidence, and the confidence. Pure and fast: no LLM, no simulated world (the end-to-end
check against planted causes is tests/e2e/test_attribution.py).
"""

from __future__ import annotations

import json

import pytest
from memtrace_loop.pipeline.analysis.attribution.lineage import ConversationLineage
from memtrace_loop.pipeline.analysis.attribution.records import Attribution, ErrorType
from memtrace_loop.pipeline.core.graph import ExecutionGraph, Operation, OpKind
from memtrace_loop.pipeline.core.records import CaseResult, Conversation, Question, Turn

from tests.support.hand_graphs import (
    DATE,
    LIVES,
    MOVED,
    QID,
    TIME,
    Answered,
    answer_side,
    case,
    extract,
    mem0_overwrote_lisbon,
    mem0_stored_lisbon,
    memory_add,
    memory_write,
    new_graph,
    search_and_decide,
    turn,
)


def attribute(graph: ExecutionGraph, case_result: CaseResult, conversation: Conversation | None = None) -> Attribution:
    graph.check()
    found = ConversationLineage(graph, conversation).attribute(case_result)
    assert found is not None
    return found


def blamed(found: Attribution) -> tuple[ErrorType, str, str, str, str]:
    return found.error_type, found.op, found.op_name, found.stage, found.tunable


# --------------------------------------------------------------------------- construction errors (Mem0)


def test_extraction_error_when_the_extract_output_lacks_the_fact() -> None:
    graph = new_graph("extract", "decide")
    turn(graph, "D1:1", "Alice", MOVED)
    facts, extract_op = extract(graph, "D1:1", ["Alice likes coffee"])
    decision, _ = search_and_decide(graph, "D1:1", facts, [], [{"event": "ADD", "text": "Alice likes coffee"}])
    memory_add(graph, decision, "m1", "Alice likes coffee", "D1:1")
    answer_side(graph, LIVES, "Porto", units=["memory:m1@1"])

    found = attribute(graph, case(LIVES, "Porto"))
    assert blamed(found) == (ErrorType.EXTRACTION, extract_op.id, "extract_facts", "extract", "prompt")
    assert (found.evidence, found.pseudo_evidence, found.confidence, found.method) == (("D1:1",), False, 0.9, "lineage")
    assert found.reason.startswith(f"extract_facts ({extract_op.id}) read turn:D1:1@1")
    assert "facts:D1:1@1" in found.reason and 'the answer "Lisbon"' in found.reason


def test_update_error_when_an_update_overwrites_the_stored_fact() -> None:
    graph, wrote = mem0_overwrote_lisbon()
    decide_op, update_op = wrote.decide, wrote.update
    answer_side(graph, LIVES, "Porto", units=[wrote.overwritten])

    found = attribute(graph, case(LIVES, "Porto"))
    # the store write only executed the decision: the decision (its prompt) is blamed
    assert blamed(found) == (ErrorType.UPDATE, decide_op.id, "decide_updates", "decide", "prompt")
    assert found.confidence == 0.9
    assert found.reason.startswith(f"decide_updates ({decide_op.id}) overwrote memory:m1@1")
    assert f"memory_update ({update_op.id}) with memory:m1@2" in found.reason


def test_update_error_when_the_decision_ignores_a_new_fact() -> None:
    graph = new_graph("extract", "decide")
    turn(graph, "D1:1", "Alice", MOVED)
    facts, _ = extract(graph, "D1:1", ["Alice moved to Lisbon in May 2023"])
    _, decide_op = search_and_decide(graph, "D1:1", facts, [], [])  # NONE: nothing stored
    answer_side(graph, LIVES, "Porto", units=[])

    found = attribute(graph, case(LIVES, "Porto"))
    assert blamed(found) == (ErrorType.UPDATE, decide_op.id, "decide_updates", "decide", "prompt")
    assert found.reason.startswith(f"decide_updates ({decide_op.id}) saw the new fact in facts:D1:1@1")
    assert "decision:D1:1@1 \"[]\" did not store it" in found.reason


def test_deletion_error_when_the_memory_holding_the_fact_is_deleted() -> None:
    graph, stored = mem0_stored_lisbon()
    turn(graph, "D1:2", "Alice", "I quit my old job yesterday.")
    facts, _ = extract(graph, "D1:2", ["Alice quit her old job"])
    decision, decide_op = search_and_decide(graph, "D1:2", facts, [stored], [{"event": "DELETE", "id": "m1"}])
    v2, delete_op = memory_write(graph, decision, stored, "", "D1:2")
    answer_side(graph, LIVES, "Porto", units=[])

    found = attribute(graph, case(LIVES, "Porto"))
    assert blamed(found) == (ErrorType.DELETION, decide_op.id, "decide_updates", "decide", "prompt")
    assert found.reason.startswith(f"decide_updates ({decide_op.id}) decided to delete memory:m1@1")
    assert f"memory_delete ({delete_op.id}) removed it ({v2} \"\")" in found.reason


def test_a_failed_extract_call_is_an_extraction_error_on_that_call() -> None:
    """A failed LLM call (Tracer.llm: status "failed", empty result) is attributed like any other drop."""
    graph = new_graph("extract", "decide")
    turn(graph, "D1:1", "Alice", MOVED)
    _, extract_op = extract(graph, "D1:1", [], status="failed", error="TimeoutError: request timed out")
    answer_side(graph, LIVES, "I don't know", units=[], context="")

    found = attribute(graph, case(LIVES, "I don't know"))
    assert extract_op.failed
    assert blamed(found) == (ErrorType.EXTRACTION, extract_op.id, "extract_facts", "extract", "prompt")
    assert "produced facts:D1:1@1 \"[]\"" in found.reason


def test_a_rejected_store_write_blames_the_decision() -> None:
    graph = new_graph("extract", "decide")
    turn(graph, "D1:1", "Alice", MOVED)
    facts, _ = extract(graph, "D1:1", ["Alice moved to Lisbon in May 2023"])
    action = {"event": "UPDATE", "id": "m9", "text": "Alice lives in Lisbon"}
    decision, decide_op = search_and_decide(graph, "D1:1", facts, [], [action])
    graph.add_operation("memory_update", "store", OpKind.OTHER, [decision], [], status="failed",
                        error=f"invalid action {json.dumps(action)}: no live memory with id 'm9'")
    answer_side(graph, LIVES, "Porto", units=[])

    found = attribute(graph, case(LIVES, "Porto"))
    assert blamed(found) == (ErrorType.UPDATE, decide_op.id, "decide_updates", "decide", "prompt")


def test_evermemos_extraction_error_on_the_first_writer_that_lost_the_fact() -> None:
    """EverMemOS: both `write_events` and `write_episode` read the turn and lost the move; the earlier is blamed."""
    graph = new_graph("detect_boundary", "write_events", "write_episode")
    turn_var = turn(graph, "D1:1", "Alice", MOVED)
    event = graph.add_variable("event:1", "event", f"Alice travelled Time: {DATE}", {"time": DATE, "episode": 1}).id
    events_op = graph.add_operation("write_events", "write_events", OpKind.EXTRACTION, [turn_var], [event],
                                    prompt="prompt:write_events@1", meta={"episode": 1})
    episode = graph.add_variable("episode:1", "episode", "A trip\nAlice talked about travelling.",
                                 {"date": DATE, "turns": ["D1:1"], "events": [event]}).id
    graph.add_operation("write_episode", "write_episode", OpKind.EXTRACTION, [turn_var], [episode],
                        prompt="prompt:write_episode@1", meta={"episode": 1})
    answer_side(graph, LIVES, "Porto", units=[episode, event], retrieval_name="retrieve_episodes")

    found = attribute(graph, case(LIVES, "Porto"))
    assert blamed(found) == (ErrorType.EXTRACTION, events_op.id, "write_events", "write_events", "prompt")
    assert found.reason.startswith(f"write_events ({events_op.id}) read turn:D1:1@1")


# --------------------------------------------------------------------------- question time


def test_retrieval_error_blames_the_knobs_of_a_search_without_prompt() -> None:
    graph, stored = mem0_stored_lisbon()
    turn(graph, "D1:2", "Alice", "I love coffee.")
    facts, _ = extract(graph, "D1:2", ["Alice loves coffee"])
    decision, _ = search_and_decide(graph, "D1:2", facts, [stored], [{"event": "ADD", "text": "Alice loves coffee"}])
    coffee = memory_add(graph, decision, "m2", "Alice loves coffee", "D1:2")
    answered = answer_side(graph, LIVES, "a coffee shop", units=[coffee], meta={"k": 1})
    assert answered.retrieval is not None

    found = attribute(graph, case(LIVES, "a coffee shop"))
    assert blamed(found) == (ErrorType.RETRIEVAL, answered.retrieval.id, "retrieve_memories", "retrieve", "knobs")
    assert found.confidence == 0.85
    assert found.reason == (
        f"memory:m1@1 \"Alice lives in Lisbon\" holds the answer \"Lisbon\" and was in the store when {QID} was "
        f"asked, but retrieve_memories ({answered.retrieval.id}, k=1) did not retrieve it into retrieved:{QID}@1."
    )


def evermemos_graph(*, sufficient: bool) -> tuple[ExecutionGraph, dict[str, Operation]]:
    """EverMemOS (evermemos/system.py): two episodes with their events; at question time the first round
    is checked (`check_sufficiency`) and, when insufficient, expanded (`expand_queries`), and the final
    retrieval returns only the coffee episode."""
    graph = new_graph("detect_boundary", "write_events", "write_episode", "check_sufficiency", "expand_queries")
    ops: dict[str, Operation] = {}
    for number, (dia_id, text, event) in enumerate(
        [("D1:1", MOVED, "Alice moved to Lisbon"), ("D2:1", "I love coffee.", "Alice loves coffee")], start=1
    ):
        turn_var = turn(graph, dia_id, "Alice", text)
        event_var = graph.add_variable(f"event:{number}", "event", f"{event} Time: {DATE}",
                                       {"time": DATE, "episode": number}).id
        graph.add_operation("write_events", "write_events", OpKind.EXTRACTION, [turn_var], [event_var],
                            prompt="prompt:write_events@1", meta={"episode": number})
        episode = graph.add_variable(f"episode:{number}", "episode", f"{event}\nAlice said: {text}",
                                     {"date": DATE, "turns": [dia_id], "events": [event_var]}).id
        graph.add_operation("write_episode", "write_episode", OpKind.EXTRACTION, [turn_var], [episode],
                            prompt="prompt:write_episode@1", meta={"episode": number})
    query = graph.add_variable(f"query:{QID}", "query", LIVES.text).id
    first = ["episode:2@1", "event:2@1"]
    sufficiency = graph.add_variable(f"sufficiency:{QID}", "sufficiency",
                                     "sufficient" if sufficient else "insufficient").id
    ops["check"] = graph.add_operation("check_sufficiency", "check_sufficiency", OpKind.RETRIEVAL, [query, *first],
                                       [sufficiency], prompt="prompt:check_sufficiency@1")
    extra = [sufficiency]
    if not sufficient:
        expanded = graph.add_variable(f"expanded:{QID}", "query", json.dumps(["Alice favourite drink"])).id
        ops["expand"] = graph.add_operation("expand_queries", "expand_queries", OpKind.RETRIEVAL,
                                            [query, sufficiency], [expanded], prompt="prompt:expand_queries@1")
        extra.append(expanded)
    answered = answer_side(graph, LIVES, "a coffee shop", units=first, extra_inputs=extra,
                           retrieval_name="retrieve_episodes", query_var=query, meta={"k": 1, "rounds": 2})
    assert answered.retrieval is not None
    ops["retrieve"] = answered.retrieval
    return graph, ops


def test_retrieval_error_blames_the_query_expansion_that_steered_the_search() -> None:
    graph, ops = evermemos_graph(sufficient=False)
    found = attribute(graph, case(LIVES, "a coffee shop"))
    expand = ops["expand"]
    assert blamed(found) == (ErrorType.RETRIEVAL, expand.id, "expand_queries", "expand_queries", "prompt")
    assert found.reason.startswith(f"event:1@1 \"Alice moved to Lisbon Time: {DATE}\" holds the answer \"Lisbon\"")
    assert (f"retrieve_episodes ({ops['retrieve'].id}, k=1) did not retrieve it" in found.reason
            and f"steered by expand_queries ({expand.id})" in found.reason)


def test_retrieval_error_blames_the_sufficiency_check_that_stopped_the_search() -> None:
    graph, ops = evermemos_graph(sufficient=True)
    found = attribute(graph, case(LIVES, "a coffee shop"))
    check = ops["check"]
    assert blamed(found) == (ErrorType.RETRIEVAL, check.id, "check_sufficiency", "check_sufficiency", "prompt")
    assert f"steered by check_sufficiency ({check.id}), whose output \"sufficient\"" in found.reason


def test_response_error_when_the_context_held_the_answer() -> None:
    graph, stored = mem0_stored_lisbon()
    answered = answer_side(graph, LIVES, "Porto", units=[stored])
    found = attribute(graph, case(LIVES, "Porto"))
    assert blamed(found) == (ErrorType.RESPONSE, answered.respond.id, "question_answering", "respond", "prompt")
    assert found.confidence == 0.8
    assert found.reason == (
        f"the context retrieved:{QID}@1 given to question_answering ({answered.respond.id}) held the answer "
        f"\"Lisbon\", yet it answered answer:{QID}@1 \"Porto\" (gold \"Lisbon\")."
    )


def test_a_failed_answer_call_with_the_answer_in_context_is_a_response_error() -> None:
    graph, stored = mem0_stored_lisbon()
    answered = answer_side(graph, LIVES, "", units=[stored], respond_status="failed")
    found = attribute(graph, case(LIVES, ""))
    assert answered.respond.failed
    assert blamed(found) == (ErrorType.RESPONSE, answered.respond.id, "question_answering", "respond", "prompt")


def test_an_unanswerable_question_is_a_response_error_directly() -> None:
    graph, stored = mem0_stored_lisbon()
    question = Question("c1:q1", "c1", "Where does Alice's sister live?", "Not mentioned in the conversation", 5,
                        ("D1:1",))
    answered = answer_side(graph, question, "Lisbon", units=[stored])
    found = attribute(graph, case(question, "Lisbon"))
    assert blamed(found) == (ErrorType.RESPONSE, answered.respond.id, "question_answering", "respond", "prompt")
    assert (found.confidence, found.evidence) == (0.9, ("D1:1",))
    assert "does not say" in found.reason


# --------------------------------------------------------------------------- Long-Context and RAG


def test_long_context_trimming_is_an_update_error_on_the_trim_knobs() -> None:
    """Long-Context (long_context.py): each turn appended as a buffer entry; the window trimmed the oldest."""
    graph = new_graph()
    entries = []
    for dia_id, speaker, text in [("D1:1", "Alice", MOVED), ("D1:2", "Bob", "Nice weather today.")]:
        turn_var = turn(graph, dia_id, speaker, text)
        entry = graph.add_variable(f"entry:{dia_id}", "buffer", f"{speaker} says: {text} Timestamp: {DATE}",
                                   {"turn": dia_id, "tokens": 14}).id
        graph.add_operation("append_turn", "append", OpKind.EXTRACTION, [turn_var], [entry], meta={"tokens": 14})
        entries.append(entry)
    trimmed = graph.add_variable("entry:D1:1", "buffer", "", {"turn": "D1:1", "deleted": True, "trimmed_at": "D1:2"})
    trim = graph.add_operation("trim_buffer", "trim", OpKind.UPDATE, [entries[0]], [trimmed.id],
                               meta={"window_tokens": 20, "tokens_before": 28, "tokens_after": 14,
                                     "trimmed": ["D1:1"], "tokenizer": "approx"})
    context = graph.add_variable("context:buffer", "context", graph.variable(entries[1]).value,
                                 {"entries": 1, "tokens": 14}).id
    graph.add_operation("build_context", "context", OpKind.RETRIEVAL, [entries[1]], [context],
                        meta={"entries": 1, "tokens": 14, "window_tokens": 20})
    answered = answer_side(graph, LIVES, "Porto", context_var=context)
    assert answered.retrieval is None

    found = attribute(graph, case(LIVES, "Porto"))
    assert blamed(found) == (ErrorType.UPDATE, trim.id, "trim_buffer", "trim", "knobs")
    assert found.reason.startswith(f"trim_buffer ({trim.id}) overwrote entry:D1:1@1 \"Alice says: {MOVED}")
    assert "with entry:D1:1@2 \"\"" in found.reason


def rag_graph(retrieved_chunk: int) -> tuple[ExecutionGraph, Answered]:
    """RAG (rag.py): four turns packed two per chunk (`chunk:1`, `chunk:2`), top-1 retrieval of one chunk."""
    graph = new_graph()
    lines = [("D1:1", "Alice", MOVED), ("D1:2", "Bob", "Nice weather today."),
             ("D1:3", "Bob", "I bought a bike."), ("D1:4", "Alice", "I love coffee.")]
    turn_vars = [turn(graph, dia_id, speaker, text) for dia_id, speaker, text in lines]
    for index in (1, 2):
        members = turn_vars[2 * index - 2: 2 * index]
        dia_ids = [graph.variable(v).name.removeprefix("turn:") for v in members]
        chunk = graph.add_variable(f"chunk:{index}", "chunk", "\n".join(graph.variable(v).value for v in members),
                                   {"turns": dia_ids, "tokens": 30, "time": TIME}).id
        graph.add_operation("chunk_turns", "chunk", OpKind.EXTRACTION, members, [chunk],
                            meta={"tokens": 30, "max_chunk_tokens": 32, "overlap_tokens": 0})
    chunk_var = f"chunk:{retrieved_chunk}@1"
    answered = answer_side(graph, LIVES, "Porto" if retrieved_chunk == 1 else "a coffee shop", units=[chunk_var],
                           context=graph.variable(chunk_var).value, retrieval_name="retrieve_chunks",
                           meta={"k": 1, "scores": [0.4]})
    return graph, answered


def test_rag_chunk_not_retrieved_is_a_retrieval_error_on_the_knobs() -> None:
    graph, answered = rag_graph(retrieved_chunk=2)
    assert answered.retrieval is not None
    found = attribute(graph, case(LIVES, "a coffee shop"))
    assert blamed(found) == (ErrorType.RETRIEVAL, answered.retrieval.id, "retrieve_chunks", "retrieve", "knobs")
    assert found.reason.startswith(f"chunk:1@1 \"[{DATE}] Alice: {MOVED}")


def test_a_search_that_missed_two_evidence_turns_restores_both() -> None:
    # two hops: who the uncle is, and where he lives; each turn in its own chunk, the search returned neither
    graph = new_graph()
    lines = [("D1:1", "Alice", "My uncle's name is Carlos."), ("D1:2", "Bob", "Nice weather today."),
             ("D1:3", "Alice", "Carlos lives in Montreal now.")]
    chunks = []
    for dia_id, speaker, text in lines:
        source = turn(graph, dia_id, speaker, text)
        chunk = graph.add_variable(f"chunk:{dia_id}", "chunk", graph.variable(source).value,
                                   {"turns": [dia_id], "tokens": 10, "time": TIME}).id
        graph.add_operation("chunk_turns", "chunk", OpKind.EXTRACTION, [source], [chunk],
                            meta={"tokens": 10, "max_chunk_tokens": 12, "overlap_tokens": 0})
        chunks.append(chunk)
    question = Question("c1:q9", "c1", "Where does Alice's uncle live?", "Montreal", 1, ("D1:1", "D1:3"))
    answered = answer_side(graph, question, "Lisbon", units=[chunks[1]], retrieval_name="retrieve_chunks",
                           meta={"k": 1, "scores": [0.4]})
    found = attribute(graph, case(question, "Lisbon"))
    assert answered.retrieval is not None and found.op == answered.retrieval.id
    search = next(f for f in found.suspects if f.op == answered.retrieval.id)
    assert set(search.restore) == {chunks[0], chunks[2]}  # not only the unit that holds the answer


def test_rag_chunk_retrieved_is_a_response_error() -> None:
    graph, answered = rag_graph(retrieved_chunk=1)
    found = attribute(graph, case(LIVES, "Porto"))
    assert blamed(found) == (ErrorType.RESPONSE, answered.respond.id, "question_answering", "respond", "prompt")


# --------------------------------------------------------------------------- evidence


def test_without_gold_evidence_the_bm25_pseudo_evidence_is_used_and_discounted() -> None:
    graph = new_graph("extract", "decide")
    turns = (Turn("D1:1", "Alice", MOVED, 1, TIME), Turn("D1:2", "Bob", "Nice weather today.", 1, TIME),
             Turn("D1:3", "Bob", "I bought a bike.", 1, TIME))
    extract_op_by_turn = {}
    for t in turns:
        turn(graph, t.id, t.speaker, t.text)
        extract_op_by_turn[t.id] = extract(graph, t.id, [])[1]  # nothing extracted from any turn
    answer_side(graph, LIVES, "Porto", units=[], context="")
    question = Question(QID, "c1", LIVES.text, LIVES.gold, 1, ())  # no gold evidence ids

    found = attribute(graph, case(question, "Porto"), Conversation("c1", ("Alice", "Bob"), turns))
    first = extract_op_by_turn["D1:1"]
    assert blamed(found) == (ErrorType.EXTRACTION, first.id, "extract_facts", "extract", "prompt")
    assert (found.evidence, found.pseudo_evidence) == (("D1:1",), True)
    assert found.confidence == pytest.approx(0.9 * 0.7)


def test_without_any_turn_the_answer_step_is_blamed_with_low_confidence() -> None:
    graph = new_graph()
    answered = answer_side(graph, Question(QID, "c1", LIVES.text, LIVES.gold, 1, ()), "Porto", units=[], context="")
    found = attribute(graph, case(Question(QID, "c1", LIVES.text, LIVES.gold, 1, ()), "Porto"))
    assert blamed(found) == (ErrorType.RESPONSE, answered.respond.id, "question_answering", "respond", "prompt")
    assert (found.evidence, found.pseudo_evidence) == ((), True)
    assert found.confidence == pytest.approx(0.3 * 0.7)


def test_a_question_the_graph_did_not_answer_gets_no_attribution() -> None:
    graph, _ = mem0_stored_lisbon()
    assert ConversationLineage(graph).attribute(case(LIVES, "Porto")) is None
