"""One answering signature over the OpenAI path, shared by the HTTP tests of the LM layer.

`answering_responder` is a local server's responder that answers any single-`answer` signature with
`ANSWER` in the format the adapter asked for (chat markers, or JSON for DSPy's JSON fallback);
`ask` runs `AnswerQuestion` on an LM; `openai_config` is the `LMConfig` mapping of an `openai` LM
pointed at a local server (no cache, 5 s timeout, 3 retries unless overridden); `answering_server`
runs a local server with that responder and `chat_calls` lists the chat requests it received.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import dspy
from memtrace_loop.memory_systems.signatures import AnswerQuestion

from tests.support.openai_server import OpenAIStubServer, running_server

ANSWER = "7 May 2023"
QUESTION = "When did Caroline go to the support group?"


def answering_responder(messages: list[dict]) -> str:
    """Answers any single-`answer` signature in the format the adapter asked for."""
    if "Respond with a JSON object" in messages[-1]["content"]:
        return json.dumps({"answer": ANSWER})
    return f"[[ ## answer ## ]]\n{ANSWER}\n\n[[ ## completed ## ]]"


def answering_server() -> Iterator[OpenAIStubServer]:
    """A running local server that answers with `answering_responder` (use as `yield from`)."""
    yield from running_server(responder=answering_responder)


def chat_calls(server: OpenAIStubServer) -> list:
    """The chat-completions requests the server received, in order."""
    return server.requests_to("/chat/completions")


def ask(lm: dspy.LM, question: str = QUESTION) -> dspy.Prediction:
    with dspy.context(lm=lm):
        return dspy.Predict(AnswerQuestion)(
            context="Memory: Caroline went to a group. Time: 7 May 2023", question=question
        )


def openai_config(server: OpenAIStubServer, key_env: str, **overrides: Any) -> dict[str, Any]:
    return {
        "backend": "openai",
        "model": "stub-model",
        "api_base": server.base_url,
        "api_key_env": key_env,
        "timeout_s": 5,
        "num_retries": 3,
        "cache": False,
        **overrides,
    }
