"""mem0's reply shapes as JSON schemas (memory_systems/mem0ai/schemas.py): every example reply the
installed mem0 prompts show validates against the stage's schema and the shapes mem0 cannot read do not;
the schema goes out only to an LM that asks for JSON-schema output, mem0's own format otherwise."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest
from memtrace_loop.memory_systems.mem0ai.hooks import HOOK_BY_STAGE, import_mem0
from memtrace_loop.memory_systems.mem0ai.schemas import (
    SCHEMA_BY_STAGE,
    is_parse_failure,
    response_format_for,
)
from memtrace_loop.pipeline.backends.lm import LMConfig
from memtrace_loop.pipeline.backends.registry import build_lm

MEM0_FORMAT = {"type": "json_object"}  # what mem0 1.0.x passes to generate_response


def examples(text: str, key: str) -> list[dict]:
    """The JSON objects under `key` that a mem0 prompt shows as example replies."""
    decoder = json.JSONDecoder()
    return [decoder.raw_decode(text[m.start():])[0] for m in re.finditer(r'\{\s*"' + key + '"', text)]


def schema(stage: str) -> dict:
    structured = build_lm(LMConfig(backend="sim", model="stand-in", structured_output="json_schema"))
    return response_format_for(stage, structured, MEM0_FORMAT)["json_schema"]["schema"]


def test_one_schema_per_mem0_hook():
    assert set(SCHEMA_BY_STAGE) == set(HOOK_BY_STAGE)


@pytest.mark.parametrize(("stage", "prompt", "key"), [
    ("fact_extraction", "USER_MEMORY_EXTRACTION_PROMPT", "facts"),
    ("update_memory", "DEFAULT_UPDATE_MEMORY_PROMPT", "memory"),
])
def test_mem0s_own_example_replies_fit_the_schema(stage, prompt, key):
    shown = examples(getattr(import_mem0().configs.prompts, prompt), key)
    assert len(shown) >= 4
    for reply in shown:
        jsonschema.validate(reply, schema(stage))


@pytest.mark.parametrize(("stage", "reply"), [
    ("fact_extraction", {"fact": ["Ada paints"]}),  # another key: mem0 reads no facts
    ("fact_extraction", {"facts": [{"text": "Ada paints"}]}),
    ("update_memory", {"memory": [{"id": "0", "text": "Ada paints", "event": "CHANGE"}]}),
    ("update_memory", {"memory": [{"text": "Ada paints", "event": "ADD"}]}),  # no id
    ("update_memory", {"facts": []}),
])
def test_shapes_mem0_cannot_use_are_outside_the_schema(stage, reply):
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(reply, schema(stage))


def test_the_schema_goes_only_to_an_lm_that_asks_for_it():
    structured = build_lm(LMConfig(backend="sim", model="stand-in", structured_output="json_schema"))
    plain = build_lm(LMConfig(backend="sim", model="stand-in", structured_output="off"))
    sent = response_format_for("update_memory", structured, MEM0_FORMAT)
    assert sent["type"] == "json_schema" and sent["json_schema"]["name"] == "mem0_memory_actions"
    json.dumps(sent)  # plain JSON on the wire
    assert response_format_for("update_memory", plain, MEM0_FORMAT) is MEM0_FORMAT
    assert response_format_for("fact_extraction", plain, None) is None


@pytest.mark.parametrize(("error", "parse"), [
    ("empty reply: mem0 read nothing from it", True),
    ("reply is not JSON: Expecting value: line 1 column 1 (char 0)", True),
    ('reply is not a JSON object with a "facts" list', True),
    ("Error in new_retrieved_facts: Expecting value", True),
    ("Invalid JSON response: Expecting ',' delimiter", True),
    ("ConnectionError: endpoint went away", False),
    ("mem0 made no call for this stage", False),
    (None, False),
])
def test_parse_failures_are_told_from_other_failures(error, parse):
    assert is_parse_failure(error) is parse
