"""GEPA's reflection requests, answered by the simulated rewriter.

Two shapes reach the reflection LM. dspy 3.4.1's `dspy.GEPA` proposes through its own
`InstructionProposer`: a DSPy request (JSONAdapter) of `ProposeInstruction` with inputs
`current_instruction` and `examples_with_feedback` (a JSON list of {"Inputs", "Generated Outputs",
"Feedback"}) and output `new_instruction`; `new_instruction_handler` answers it (and the rewriter's own
`RewriteInstruction` requests, which it passes to `rewriter.rewrite_instruction`), and
`shorten_instruction` answers its `CompressInstruction` step. gepa's own proposer asks with ONE plain
user prompt, built by gepa's `InstructionProposalSignature` (gepa/strategies/instruction_proposal.py):
the current instruction in a ``` block, then the reflective examples as markdown (`# Example N`,
`## Inputs`, `## Generated Outputs` with one `### <output field>` per output, `## Feedback`); it reads
the new instruction from the ``` block of the reply. `parse_reflection(messages)` recognises such a
prompt (it has no DSPy adapter field markers) and reads out the current instruction, the output field
names and the feedback texts; `reflection_reply` answers it. Both shapes use the rewriter's logic
(`pipeline.sim.rewriter.rewrite` over the failure blocks the feedback holds), for the stage told by the
output field names (`rules.stage_for_outputs`), or else by the rules the instruction already states.

It does not read GEPA's other prompts (e.g. the code proposer's) and never raises on odd text: an
unrecognised stage gets the instruction back unchanged.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from memtrace_loop.pipeline.sim.protocol import StageRequest, decode_list
from memtrace_loop.pipeline.sim.rewriter import rewrite, rewrite_instruction
from memtrace_loop.pipeline.sim.rules import RULES_BY_ID, rules_in
from memtrace_loop.pipeline.sim.stages import stage_for_outputs

FENCE = "```"
MAX_CHARS = 4000  # GEPA sets no length limit; a real model's rewrite stays about this short
_DSPY_FIELD = re.compile(r"\[\[ ## \w+ ## \]\]")
_EXAMPLE = re.compile(r"^# Example \d+\s*$", re.MULTILINE)
_SECTION = re.compile(r"^## (.+?)\s*$", re.MULTILINE)
_FIELD = re.compile(r"^### (\w+)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class ReflectionRequest:
    current: str
    output_fields: tuple[str, ...]
    feedback: tuple[str, ...]

    @property
    def stage(self) -> str | None:
        """The stand-in stage: by output field names, else the one stage whose rules the instruction states."""
        stage = stage_for_outputs(self.output_fields) if self.output_fields else None
        if stage is None:
            stated = {RULES_BY_ID[r].stage for r in rules_in(self.current)}
            stage = next(iter(stated)) if len(stated) == 1 else None
        return stage


def _content(message: dict[str, Any]) -> str:
    content = message.get("content", "")
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content or "")


def _sections(example: str) -> dict[str, str]:
    """`## name` sections of one example, by name."""
    heads = list(_SECTION.finditer(example))
    return {
        head.group(1): example[head.end() : heads[i + 1].start() if i + 1 < len(heads) else len(example)]
        for i, head in enumerate(heads)
    }


def parse_reflection(messages: Iterable[dict[str, Any]]) -> ReflectionRequest | None:
    """The reflection request in `messages`, or None if they are not a GEPA instruction-proposal prompt."""
    text = "\n".join(_content(m) for m in messages if m.get("role") in ("user", "system"))
    if _DSPY_FIELD.search(text) or text.count(FENCE) < 2 or not _EXAMPLE.search(text):
        return None
    start = text.index(FENCE) + len(FENCE)
    end = text.index(FENCE, start)
    current = text[start:end].strip("\n")
    examples = _EXAMPLE.split(text[end + len(FENCE) :])[1:]
    fields: list[str] = []
    feedback: list[str] = []
    for example in examples:
        sections = _sections(example)
        fields.extend(_FIELD.findall(sections.get("Generated Outputs", "")))
        if sections.get("Feedback", "").strip():
            feedback.append(sections["Feedback"].strip())
    return ReflectionRequest(current, tuple(dict.fromkeys(fields)), tuple(feedback))


def reflection_reply(request: ReflectionRequest, max_chars: int = MAX_CHARS) -> str:
    """The reply GEPA parses: the rewritten instruction inside a ``` block."""
    new = rewrite(request.current, "\n\n".join(request.feedback), request.stage, max(max_chars, len(request.current)))
    return f"{FENCE}\n{new}\n{FENCE}"


def from_examples(current: str, examples: Iterable[Any]) -> ReflectionRequest:
    """The request from GEPA's reflective examples as structured records (dspy's proposer)."""
    fields: list[str] = []
    feedback: list[str] = []
    for example in examples:
        if not isinstance(example, Mapping):
            continue
        outputs = example.get("Generated Outputs")
        if isinstance(outputs, Mapping):
            fields.extend(str(name) for name in outputs)
        text = str(example.get("Feedback") or "").strip()
        if text:
            feedback.append(text)
    return ReflectionRequest(current, tuple(dict.fromkeys(fields)), tuple(feedback))


def _examples(raw: str) -> list[Any]:
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        value = decode_list(raw)
    return value if isinstance(value, list) else []


def new_instruction_handler(request: StageRequest) -> dict[str, Any]:
    """The handler for every request whose output is `new_instruction`: dspy GEPA's `ProposeInstruction`
    (has `examples_with_feedback`) or our `RewriteInstruction`."""
    if "examples_with_feedback" not in request.input_types:
        return rewrite_instruction(request)
    current = request.inputs.get("current_instruction", "")
    reflection = from_examples(current, _examples(request.inputs.get("examples_with_feedback", "")))
    limit = re.search(r"at most (\d+) characters", request.inputs.get("length_limit", ""))
    max_chars = int(limit.group(1)) if limit else max(MAX_CHARS, len(current))
    reply = rewrite(current, "\n\n".join(reflection.feedback), reflection.stage, max_chars)
    return {"new_instruction": reply}


def shorten_instruction(request: StageRequest) -> dict[str, Any]:
    """dspy GEPA's `CompressInstruction`: whole sentences from the start while they fit the limit."""
    text = request.inputs.get("instruction", "")
    limit = re.search(r"at most (\d+) characters", request.inputs.get("length_limit", ""))
    if not limit or len(text) <= int(limit.group(1)):
        return {"shortened_instruction": text}
    kept = ""
    for sentence in re.split(r"(?<=[.!?])\s+", text):
        if len(f"{kept} {sentence}".strip()) > int(limit.group(1)):
            break
        kept = f"{kept} {sentence}".strip()
    return {"shortened_instruction": kept or text[: int(limit.group(1))]}
