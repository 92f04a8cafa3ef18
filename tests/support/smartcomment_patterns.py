"""Execution graphs built with the real smartcomment's own public API, one per documented pattern.

What it does: each function below records a small graph the way smartcomment's docs (zjunlp/smartcomment
docs/: quick_start, concepts, fine_grained_tracing, operation_reuse, in_place_operation, tricks) show
it, plus the shapes those docs imply (operations without inputs or outputs, a node produced by two
operations, several sessions) and `memtracebench_like`, a small Mem0-style trace in MemTraceBench's
naming conventions with its labels under `data.annotations`. Each returns the graph's
`export_graph()` (a plain JSON-ready dict). `PATTERNS` maps a pattern name to its function;
tests/fixtures/smartcomment/make_fixtures.py writes them to JSON.

Only `from smartcomment import ...` (and `smartcomment.runtime.ExecNetwork`, which its docs use for
import) builds the graphs; the one exception is removing the `IdentityRegistry` type registration
`identity_registry` adds (smartcomment 0.1.2 has no public unregister), so patterns do not leak into
each other. Content ids, graph ids and the session ids given here are deterministic; op ids, edge ids,
timestamps and `object_id` node names are smartcomment's own random or time-based values.

What it does not do: no reading of the graphs (tests/interop/test_smartcomment_patterns.py checks
them) and nothing of ours: it never imports `memtrace_loop`. It needs smartcomment installed
(`make test` and `make lint` do; it declares Python >= 3.12 but works on 3.11).
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from smartcomment import (
    IdentityRegistry,
    comment_fn,
    comment_graph,
    comment_link,
    comment_mutation,
    comment_op,
    comment_op_scope,
    comment_session,
    comment_variable,
    current_context,
)
from smartcomment.runtime import ExecNetwork

Doc = dict[str, Any]


def _export(graph: ExecNetwork | None) -> Doc:
    if graph is None:
        raise RuntimeError("smartcomment tracing is disabled: no graph was recorded")
    doc: Doc = graph.export_graph()
    return doc


# ---------------------------------------------------------------------------------------------------
# quick_start.md: comment_fn


def _dummy_openai(messages: list[dict[str, str]]) -> str:
    return "You can use `smartcomment` to record a funcation call."


_OP_METADATA = {"provider": "dummy-openai", "model": "dummy-chat-model", "temperature": 0.0}


def quick_start_sync() -> Doc:
    """`comment_fn` on a sync function: one op, the argument -> the return value, op metadata."""

    @comment_fn(op_name="dummy_openai.generate", comment="Generate a deterministic dummy response from chat messages.",
                category="llm_call", op_metadata=_OP_METADATA)
    def generate_response(messages: list[dict[str, str]]) -> str:
        """Call the synchronous dummy OpenAI client."""
        return _dummy_openai(messages)

    messages = [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "How do I record a function call?"}]
    with comment_graph(graph_id="sc-quick-start-sync") as graph, comment_session(session_id="session-quick-start"):
        generate_response(messages)
    return _export(graph)


def quick_start_async() -> Doc:
    """`comment_fn` on an async function, no op_name/comment: the function's name and docstring are used."""

    @comment_fn(category="llm_call", op_metadata=_OP_METADATA)
    async def async_generate_response(messages: list[dict[str, str]]) -> str:
        """Call the asynchronous dummy OpenAI client."""
        return _dummy_openai(messages)

    async def main() -> ExecNetwork | None:
        messages = [{"role": "system", "content": "You are a helpful assistant."},
                    {"role": "user", "content": "Can smartcomment trace async calls?"}]
        with comment_graph(graph_id="sc-quick-start-async") as graph, comment_session(session_id="session-async"):
            await async_generate_response(messages)
        return graph

    return _export(asyncio.run(main()))


def quick_start_param_options() -> Doc:
    """`comment_fn(param_options=...)`: the input and the output (`"-o"`) get their own category/comment."""

    @comment_fn(
        op_name="dummy_openai.generate", comment="Generate a deterministic dummy response from chat messages.",
        category="llm_call", op_metadata=_OP_METADATA,
        param_options={
            "messages": {"category": "chat_messages", "comment": "The chat messages sent to the dummy OpenAI client."},
            "-o": {"category": "chat_completion", "comment": "The completion returned by the dummy OpenAI client."},
        },
    )
    def generate_response(messages: list[dict[str, str]]) -> str:
        """Call the synchronous dummy OpenAI client."""
        return _dummy_openai(messages)

    messages = [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "Can I use `smartcomment` to record a function call?"}]
    with comment_graph(graph_id="sc-quick-start-param-options") as graph, comment_session(session_id="session-po"):
        generate_response(messages)
    return _export(graph)


# ---------------------------------------------------------------------------------------------------
# concepts.md: comment_variable + comment_op, id_strategy="object_id", a named session


def concepts_object_id() -> Doc:
    """Three operands and their sum by object identity (node names `float:<id()>`, not content hashes)."""
    with comment_graph(graph_id="sc-concepts") as graph, comment_session(
        session_id="session-arithmetic", session_name="arithmetic", comment="A tiny arithmetic stage."
    ):
        a = comment_variable(1.0, id_strategy="object_id", comment="Operand a.")
        b = comment_variable(2.0, id_strategy="object_id", comment="Operand b.")
        c = comment_variable(3.0, id_strategy="object_id", comment="Operand c.")
        d = a + b + c
        comment_op(op_name="sum", inputs=[a, b, c], outputs=[d], id_strategy="object_id",
                   comment="Add three numbers into their sum.")
    return _export(graph)


# ---------------------------------------------------------------------------------------------------
# fine_grained_tracing.md: comment_op with value-option tuples; comment_op_scope + comment_link


_REQUEST = {"prompt_template": "Please answer the following question: {user_input}",
            "user_input": "What can smartcomment visualize?"}
_RESPONSE = "`smartcomment` supports visualization."


def fine_grained_comment_op() -> Doc:
    """`comment_variable` for two extracted values, `comment_op` whose output is a value-option tuple."""
    with comment_graph(graph_id="sc-fine-grained-op") as graph, comment_session(session_id="session-fine-op"):
        prompt_template = comment_variable(_REQUEST["prompt_template"], category="prompt_template",
                                           comment="The prompt template extracted from the request.")
        user_input = comment_variable(_REQUEST["user_input"], category="user_input",
                                      comment="The user input extracted from the request.")
        comment_op(
            op_name="demo.get_response", category="llm_response",
            comment="Format a prompt and return a deterministic response.",
            inputs=[prompt_template, user_input],
            outputs=[(_RESPONSE, {"category": "response",
                                  "comment": "The generated response returned by the demo function."})],
        )
    return _export(graph)


def fine_grained_comment_link() -> Doc:
    """One `comment_op_scope`, three `comment_link` edges with their own categories and comments."""
    with (
        comment_graph(graph_id="sc-fine-grained-link") as graph,
        comment_session(session_id="session-fine-link"),
        comment_op_scope(op_name="demo.get_response", category="response_generation",
                         comment="Build a prompt and return a response."),
    ):
        prompt_template = comment_variable(_REQUEST["prompt_template"], category="prompt_template",
                                           comment="The prompt template extracted from the request.")
        user_input = comment_variable(_REQUEST["user_input"], category="user_input",
                                      comment="The user input extracted from the request.")
        prompt = comment_variable(prompt_template.format(user_input=user_input), category="formatted_prompt",
                                  comment="The final prompt after filling the template with user input.")
        comment_link(source=prompt_template, target=prompt, category="prompt_formatting",
                     comment="The prompt template determines the structure of the final prompt.")
        comment_link(source=user_input, target=prompt, category="prompt_formatting",
                     comment="The user input fills the placeholder in the prompt template.")
        response = comment_variable(_RESPONSE, category="response",
                                    comment="The generated response returned by the demo function.")
        comment_link(source=prompt, target=response, category="llm_response",
                     comment="The formatted prompt is used to produce the final response.")
    return _export(graph)


# ---------------------------------------------------------------------------------------------------
# operation_reuse.md: comment_op_scope + comment_op(reuse_op=True): one op_id on a chain of edges


def operation_reuse() -> Doc:
    """prompt -> raw LLM response -> parsed dict, both edges on the one `llm_json_extraction` op."""
    raw = r'{"answer": "smartcomment can trace LLM output with \\frac{a}{b}."}'
    with comment_graph(graph_id="sc-operation-reuse") as graph, comment_session(session_id="session-reuse"):
        prompt = comment_variable("Return a JSON object with an answer that may contain a LaTeX formula.",
                                  category="prompt", comment="The prompt sent to the dummy LLM.")
        with comment_op_scope(
            op_name="llm_json_extraction", category="llm_json_extraction",
            comment="Generate a JSON-like LLM response and parse it into a structured Python object.",
        ):
            raw_response = comment_variable(raw, category="llm_response",
                                            comment="The raw JSON-like response returned by the dummy LLM.")
            comment_op(inputs=[prompt], outputs=[raw_response], category="llm_generation",
                       comment="Generate a JSON-like response from the prompt.", reuse_op=True)
            parsed = comment_variable(json.loads(raw_response), category="parsed_response",
                                      comment="The parsed Python dictionary from the raw LLM response.")
            comment_op(inputs=[raw_response], outputs=[parsed], category="json_parsing",
                       comment="Parse the raw LLM response into a Python dictionary.", reuse_op=True)
    return _export(graph)


# ---------------------------------------------------------------------------------------------------
# in_place_operation.md: comment_mutation, a version chain of a deque with extra inputs


def in_place_mutation() -> Doc:
    """Three appends to one deque (`object_id`): versions @1..@4, each with the appended message as input."""
    messages = ["Hello, smartcomment.", "Please trace this queue update.", "Show me the final message queue."]
    queue: deque[str] = deque()
    with comment_graph(graph_id="sc-in-place") as graph, comment_session(session_id="session-in-place"):
        for index, message in enumerate(messages, start=1):
            with comment_mutation(
                target=queue,
                inputs=[(message, {"id_strategy": "content", "category": "message",
                                   "comment": f"The message appended at step {index}."})],
                id_strategy="object_id", category="message_queue",
                comment="The message queue before and after an append operation.",
                mutation_name="message_queue.append", mutation_category="queue_update",
                mutation_comment=f"Append message {index} to the message queue.",
                mutation_metadata={"step": index},
            ):
                queue.append(message)
    return _export(graph)


# ---------------------------------------------------------------------------------------------------
# tricks.md: a MemoryEntry with a custom identity, encoding, runtime handles, links outside operations,
# identity_only, export/import, class_name


@dataclass
class MemoryEntry:
    id: str
    content: str
    timestamp: str
    run_id: str


@dataclass
class RegisteredMemoryEntry(MemoryEntry):
    """The type `identity_registry` registers with `IdentityRegistry` (only for that pattern's run)."""


_MEMORY_V1 = MemoryEntry(id="mem-001", content="The user likes graph visualization.",
                         timestamp="2026-06-01T10:00:00", run_id="run-a")
_ANSWER = "The user likes graph visualization."


def _memory_id(memory: MemoryEntry) -> str:
    return memory.id


def encode_memory_entry(memory: MemoryEntry) -> str:
    """The snapshot of a memory entry without its run-specific `run_id` (tricks.md section 3)."""
    return json.dumps({"id": memory.id, "content": memory.content, "timestamp": memory.timestamp},
                      ensure_ascii=False, indent=4, sort_keys=True)


def _unregister_type(key: type) -> None:
    # smartcomment 0.1.2 has register(..., exist_ok=True) but no unregister: drop our entry by hand
    type_to_fn = getattr(IdentityRegistry, "_type_to_fn", None)
    if isinstance(type_to_fn, dict):
        type_to_fn.pop(key, None)


def identity_registry() -> Doc:
    """`IdentityRegistry.register(type, fn)`: the node is named by the entry's `id` (`mem-001@1`), strict mode."""
    IdentityRegistry.register(RegisteredMemoryEntry, _memory_id, exist_ok=True)
    try:
        memory = RegisteredMemoryEntry(id="mem-001", content=_MEMORY_V1.content, timestamp=_MEMORY_V1.timestamp,
                                       run_id="run-a")
        with comment_graph(graph_id="sc-identity-registry", strict=True) as graph:
            comment_variable(memory, category="memory_entry", comment="The original memory entry.")
        return _export(graph)
    finally:
        _unregister_type(RegisteredMemoryEntry)


def encoding_fn() -> Doc:
    """`encoding_fn`: the stored value is a JSON snapshot (no `run_id`), not `repr()`."""
    with comment_graph(graph_id="sc-encoding-fn", strict=True) as graph:
        comment_variable(_MEMORY_V1, id_strategy=_memory_id, encoding_fn=encode_memory_entry, category="memory_entry",
                         comment="The original memory entry without run-specific metadata.")
    return _export(graph)


def to_runtime_reuse() -> Doc:
    """`comment_variable(to_runtime=True)`: the runtime handle is passed straight to `comment_op`."""
    with comment_graph(graph_id="sc-to-runtime") as graph:
        memory_var = comment_variable(_MEMORY_V1, to_runtime=True, id_strategy=_memory_id,
                                      encoding_fn=encode_memory_entry, category="memory_entry",
                                      comment="A memory entry retrieved from the memory store.")
        comment_op(op_name="answer_generation", category="generation",
                   comment="Generate an answer using a retrieved memory entry.", inputs=[memory_var],
                   outputs=[(_ANSWER, {"category": "answer", "comment": "The generated answer."})])
    return _export(graph)


def link_outside_op() -> Doc:
    """A context-registered variable (`variable_name`) linked by `comment_link` outside any op: `__none_op__`."""
    with comment_graph(graph_id="sc-link-outside-op") as graph:
        comment_variable(_MEMORY_V1, variable_name="retrieved_memory", id_strategy=_memory_id,
                         encoding_fn=encode_memory_entry, category="memory_entry",
                         comment="The memory entry retrieved for the current request.")
        context = current_context()
        memory_var = context.get_variable("retrieved_memory")
        comment_link(source=memory_var, target=(_ANSWER, {"category": "answer", "comment": "The generated answer."}),
                     category="generation", comment="The answer is generated from the retrieved memory entry.")
        context.remove_variable("retrieved_memory")
    return _export(graph)


def chained_links_outside_op() -> Doc:
    """Two chained `comment_link`s outside any operation: a -> b -> c, both edges on `__none_op__`."""
    with comment_graph(graph_id="sc-chained-links") as graph:
        question = comment_variable("Where does the user live?", category="question", to_runtime=True)
        memory = comment_variable("The user lives in Rome.", category="memory", to_runtime=True)
        comment_link(source=question, target=memory, comment="The question retrieves the memory.")
        comment_link(source=memory, target=("Rome", {"category": "answer"}), comment="The memory gives the answer.")
    return _export(graph)


def identity_only() -> Doc:
    """`identity_only=True`: a lightweight dict resolves to the existing `mem-001@1` (no new version), then is used."""
    retrieved = {"id": "mem-001", "content": "The user likes graph visualization. Recorded at 2026-06-01T10:00:00."}
    with comment_graph(graph_id="sc-identity-only", strict=True) as graph:
        comment_variable(_MEMORY_V1, id_strategy=_memory_id, category="memory_entry", encoding_fn=encode_memory_entry,
                         comment="The original memory entry with the full structured snapshot.")
        memory_var = comment_variable(retrieved, to_runtime=True, id_strategy=lambda memory: memory["id"],
                                      identity_only=True,
                                      comment="A lightweight retrieval result that refers to the existing "
                                              "memory entry by id.")
        comment_op(op_name="answer_generation", category="generation", comment="Answer from the retrieved entry.",
                   inputs=[memory_var], outputs=[(_ANSWER, {"category": "answer"})])
    return _export(graph)


def export_import_continue() -> Doc:
    """A graph exported as JSON, imported with `ExecNetwork.import_graph` ("another process"), then traced on."""
    with comment_graph(graph_id="sc-export-import") as first:
        comment_variable(_MEMORY_V1, id_strategy=_memory_id, encoding_fn=encode_memory_entry, category="memory_entry",
                         comment="The memory entry traced in the first process.")
    imported = ExecNetwork.import_graph(json.loads(json.dumps(_export(first), ensure_ascii=False)))
    with comment_graph(graph=imported) as graph:
        memory_var = comment_variable(_MEMORY_V1, to_runtime=True, id_strategy=_memory_id,
                                      encoding_fn=encode_memory_entry, identity_only=True)
        comment_op(op_name="answer_generation", category="generation",
                   comment="Generate an answer using the imported memory trace.", inputs=[memory_var],
                   outputs=[(_ANSWER, {"category": "answer", "comment": "The generated answer."})])
    return _export(graph)


def class_name_namespaces() -> Doc:
    """`class_name` separates the same string as input and output: `user_input:str:<h>@1` vs `model_output:...`."""
    prompt_template = "Repeat the user input exactly: {user_input}"
    user_input = "The user likes graph visualization."
    model_output = user_input
    with comment_graph(graph_id="sc-class-name") as graph:
        comment_op(
            op_name="llm_generation", category="llm_generation", comment="An LLM responds to a user's question.",
            inputs=[(prompt_template, {"class_name": "prompt_template", "category": "prompt_template",
                                       "comment": "The prompt template that asks the model to repeat the input."}),
                    (user_input, {"class_name": "user_input", "category": "user_input",
                                  "comment": "The original user input."})],
            outputs=[(model_output, {"class_name": "model_output", "category": "model_output",
                                     "comment": "The model output."})],
        )
    return _export(graph)


# ---------------------------------------------------------------------------------------------------
# shapes the docs imply: no inputs / no outputs (the COMMENT:NONE@1 placeholder), two producers of one
# node, several sessions


def op_without_inputs() -> Doc:
    """`comment_op(inputs=[])`: the edge runs from the placeholder `COMMENT:NONE@1` to the output."""
    with comment_graph(graph_id="sc-op-without-inputs") as graph, comment_session(session_id="session-source"):
        comment_op(op_name="clock.now", category="source", comment="Read the current date (no traced input).",
                   inputs=[], outputs=[("2026-06-01", {"category": "date"})])
    return _export(graph)


def op_without_outputs() -> Doc:
    """`comment_op(outputs=[])`: the edge runs from the input to the placeholder `COMMENT:NONE@1`."""
    with comment_graph(graph_id="sc-op-without-outputs") as graph, comment_session(session_id="session-sink"):
        comment_op(op_name="log.write", category="sink", comment="Write the answer to a log (no traced output).",
                   inputs=[("Rome", {"category": "answer"})], outputs=[])
    return _export(graph)


def multi_producer() -> Doc:
    """One node (same content id) produced by two operations: `summarize` and `translate` both yield it."""
    with comment_graph(graph_id="sc-multi-producer") as graph, comment_session(session_id="session-multi"):
        comment_op(op_name="summarize", category="llm_call", comment="Summarize the English note.",
                   inputs=[("The user moved to Rome in 2020 and still lives there.", {"category": "note"})],
                   outputs=[("The user lives in Rome.", {"category": "summary"})])
        comment_op(op_name="translate", category="llm_call", comment="Translate the Italian note.",
                   inputs=[("L'utente vive a Roma.", {"category": "note"})],
                   outputs=[("The user lives in Rome.", {"category": "summary"})])
    return _export(graph)


def several_sessions() -> Doc:
    """Three sessions (ingest, retrieve, answer), data flowing from one session's op into the next."""
    with comment_graph(graph_id="sc-several-sessions", metadata={"experiment": "sessions"}) as graph:
        with comment_session(session_id="session-ingest", session_name="ingest", category="construction",
                             comment="Write the conversation into memory."):
            turn = comment_variable("I moved to Rome in 2020.", category="turn", to_runtime=True)
            comment_op(op_name="extract", category="extraction", inputs=[turn],
                                outputs=[("User lives in Rome (since 2020).", {"category": "memory"})])
        with comment_session(session_id="session-retrieve", session_name="retrieve", category="retrieval"):
            comment_op(op_name="search", category="retrieval",
                       inputs=[("Where does the user live?", {"category": "query"}),
                               ("User lives in Rome (since 2020).", {"category": "memory"})],
                       outputs=[("[User lives in Rome (since 2020).]", {"category": "context"})])
        with comment_session(session_id="session-answer", session_name="answer", category="answering"):
            comment_op(op_name="respond", category="response",
                       inputs=[("[User lives in Rome (since 2020).]", {"category": "context"}),
                               ("Where does the user live?", {"category": "query"})],
                       outputs=[("Rome", {"category": "answer"})])
    return _export(graph)


# ---------------------------------------------------------------------------------------------------
# MemTraceBench-like: a Mem0-style trace in MemTraceBench's names, labels under data.annotations


@dataclass
class MemoryUnit:
    """A Mem0 memory unit; its graph node is `memory-unit-<id>`, one version per write."""

    id: int
    text: str


SAMPLE = "0"
QUESTION_ID = "conv-0-q0"
_TURNS = (
    {"dia_id": "D1:1", "speaker": "Ada", "text": "I moved to Rome in 2020."},
    {"dia_id": "D1:2", "speaker": "Ada", "text": "We just moved again, to Milan, last month."},
    {"dia_id": "D1:3", "speaker": "Ada", "text": "My sister Anna visits me next week."},
)
_PROMPTS = {
    "fact-extraction-system-prompt": "Extract the personal facts stated in the message as a JSON list.",
    "memory-update-decision-prompt": "Given new facts and similar memories, decide ADD, UPDATE, DELETE or NONE.",
    "question-answering-prompt": "Answer the question from the memories only.",
}


def _turn_id(turn: dict[str, str]) -> str:
    return f"U{SAMPLE}:{turn['dia_id']}"


def _unit_id(unit: MemoryUnit) -> str:
    return f"memory-unit-{unit.id}"


def _encode_unit(unit: MemoryUnit) -> str:
    return unit.text


def _named(name: str) -> Callable[[Any], str]:
    return lambda _value: name


def memtracebench_like() -> Doc:
    """Mem0-style: extract facts per turn, decide and write `memory-unit-1` (@1 by `comment_op`, @2 by
    `comment_mutation`, both named `memory-update-decision`), answer and judge one question; the fact of
    turn `U0:D1:3` is never extracted, so the label blames that extraction (kept small: < 30 KB as JSON)."""
    extraction_op_by_turn: dict[str, str] = {}
    graph_meta = {"dataset": "locomo", "system": "mem0"}
    with comment_graph(graph_id=f"memtracebench-like-{SAMPLE}", metadata=graph_meta) as graph:
        prompts = {name: comment_variable(text, to_runtime=True, id_strategy=_named(name), category="prompt",
                                          comment="A prompt of the memory system.")
                   for name, text in _PROMPTS.items()}
        unit = MemoryUnit(id=1, text="")
        facts_by_turn = {"D1:1": ["Ada lives in Rome (since 2020)."], "D1:2": ["Ada moved to Milan last month."],
                         "D1:3": []}
        with comment_session(session_id="session-memory-construction", session_name="memory-construction",
                             category="construction"):
            for turn in _TURNS:
                turn_var = comment_variable(turn, to_runtime=True, id_strategy=_turn_id,
                                            encoding_fn=lambda t: f"{t['speaker']}: {t['text']}", category="turn",
                                            comment=f"Dialogue turn {turn['dia_id']}.")
                facts = facts_by_turn[turn["dia_id"]]
                extraction = comment_op(
                    op_name="fact-extraction", category="extraction", comment="Extract facts from the turn.",
                    inputs=[prompts["fact-extraction-system-prompt"], turn_var],
                    outputs=[(json.dumps(facts), {"class_name": "facts", "id_strategy": _named(_turn_id(turn)),
                                                  "category": "facts"})],
                )
                extraction_op_by_turn[_turn_id(turn)] = extraction.op_id
                if not facts:
                    continue
                facts_var = graph.get_variable(f"facts:{_turn_id(turn)}@1")
                decide = dict(category="update", comment="Mem0 ADD/UPDATE decision.")
                if not unit.text:  # ADD: the unit's first version
                    unit.text = facts[0]
                    comment_op(op_name="memory-update-decision", **decide,
                               inputs=[prompts["memory-update-decision-prompt"], facts_var],
                               outputs=[(unit, {"id_strategy": _unit_id, "encoding_fn": _encode_unit,
                                                "category": "memory"})])
                    continue
                with comment_mutation(target=unit, inputs=[prompts["memory-update-decision-prompt"], facts_var],
                                      id_strategy=_unit_id, encoding_fn=_encode_unit, category="memory",
                                      mutation_name="memory-update-decision", mutation_category=decide["category"],
                                      mutation_comment=decide["comment"]):  # UPDATE: the next version
                    unit.text = facts[0]
        with comment_session(session_id="session-question-answering", session_name="question-answering",
                             category="answering"):
            query = comment_variable("Who visits Ada next week?", to_runtime=True, class_name="query",
                                     id_strategy=_named(QUESTION_ID), category="query", comment="The question.")
            comment_op(op_name="memory-search", category="retrieval", comment="Search the memory.",
                       inputs=[query, graph.get_latest_variable(_unit_id(unit))],
                       outputs=[("[memory-unit-1] Ada moved to Milan last month.",
                                 {"class_name": "retrieved", "id_strategy": _named(QUESTION_ID),
                                  "category": "context"})])
            comment_op(
                op_name="question-answering", category="response", comment="Answer from the memories.",
                inputs=[prompts["question-answering-prompt"], query,
                        graph.get_variable(f"retrieved:{QUESTION_ID}@1")],
                outputs=[("I don't know.", {"class_name": "prediction", "id_strategy": _named(QUESTION_ID),
                                            "category": "prediction"})],
            )
        with comment_session(session_id="session-evaluation", session_name="evaluation", category="evaluation"):
            golden = comment_variable(json.dumps(["Anna, her sister"]), to_runtime=True, class_name="golden_answers",
                                      id_strategy=_named(QUESTION_ID), category="golden_answers")
            comment_op(op_name="llm-judge", category="judge", comment="Judge the prediction.",
                       inputs=[query, graph.get_variable(f"prediction:{QUESTION_ID}@1"), golden],
                       outputs=[("WRONG", {"class_name": "judge_verdict", "id_strategy": _named(QUESTION_ID),
                                           "category": "judge_verdict"})])
    doc = _export(graph)
    evidence = _turn_id(_TURNS[2])
    doc["data"]["annotations"] = [{
        "query_id": f"query:{QUESTION_ID}@1",
        "query": "Who visits Ada next week?",
        "golden_answers": ["Anna, her sister"],
        "prediction": "I don't know.",
        "source_evidence_ids": [f"{evidence}@1"],
        "final_error_type": "ExtractionError",
        "final_op_id": extraction_op_by_turn[evidence],
        "reason": "The fact-extraction of turn U0:D1:3 returned no facts, so the visit of Anna never reached memory.",
    }]
    return doc


PATTERNS: dict[str, Callable[[], Doc]] = {
    fn.__name__: fn
    for fn in (
        quick_start_sync, quick_start_async, quick_start_param_options, concepts_object_id,
        fine_grained_comment_op, fine_grained_comment_link, operation_reuse, in_place_mutation,
        identity_registry, encoding_fn, to_runtime_reuse, link_outside_op, chained_links_outside_op,
        identity_only, export_import_continue, class_name_namespaces, op_without_inputs, op_without_outputs,
        multi_producer, several_sessions, memtracebench_like,
    )
}
