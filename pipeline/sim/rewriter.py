"""The simulated rewriter: the stand-in's handler for instruction-rewrite requests.

It answers requests whose only output field is `new_instruction` (`optimizers.rewrite.
RewriteInstruction`). The stage to rewrite is the stand-in stage of `stage_signature`'s output fields
(`rules.stage_for_outputs`; `stage_name` is used only when the signature is missing or unknown). Like a
generic LLM rewriter it reads every failure block of `feedback` (`pipeline.sim.symptoms`): from each
block's question, gold answer, system answer and category it guesses the rules that could explain the
failure, narrowed by the block's attribution when there is one, and appends the sentences of the
guessed rules of the stage being rewritten that the instruction does not state yet, most suggested
first, skipping any whose sentence would push the instruction over `max_chars`. Guesses include the
misfires and noise of the catalog (`rules.RuleEffect`), so an unguided rewrite can hurt as well as help.

Deterministic and pure; it never removes or rewords what the instruction already says and does not
pretend to be a model. GEPA's reflection prompt is answered by `pipeline.sim.reflection` with `rewrite`.
"""

from __future__ import annotations

from typing import Any

from memtrace_loop.pipeline.sim.protocol import StageRequest
from memtrace_loop.pipeline.sim.rules import rules_in, with_rules
from memtrace_loop.pipeline.sim.stages import STAGE_ORDER, stage_for_outputs
from memtrace_loop.pipeline.sim.symptoms import guesses_for_stage, parse_blocks

NO_LIMIT = 1_000_000


def signature_outputs(signature: str) -> tuple[str, ...]:
    """Output field names of 'a, b -> c, d' (types after ':' are ignored)."""
    if "->" not in signature:
        return ()
    outputs = signature.split("->", 1)[1]
    return tuple(name.split(":")[0].strip() for name in outputs.split(",") if name.split(":")[0].strip())


def target_stage(signature: str, stage_name: str = "") -> str | None:
    """The stand-in stage a rewrite request is about (None if it cannot be told)."""
    outputs = signature_outputs(signature)
    stage = stage_for_outputs(outputs) if outputs else None
    if stage is None and stage_name.strip() in STAGE_ORDER:
        stage = stage_name.strip()
    return stage


def _limit(raw: str) -> int:
    try:
        return int(str(raw).strip())
    except ValueError:
        return NO_LIMIT


def rewrite(current: str, feedback: str, stage: str | None, max_chars: int) -> str:
    """`current` plus the sentences of the not-yet-stated rules of `stage` guessed from the failure
    blocks of `feedback` (most suggested first), each only if the result stays within `max_chars`."""
    if stage is None:
        return current
    present = rules_in(current)
    guessed = guesses_for_stage(parse_blocks(feedback), stage)
    pointed = [rule_id for rule_id, _ in guessed if rule_id not in present]
    added: list[str] = []
    for rule_id in pointed:
        if len(with_rules(current, [*added, rule_id])) <= max_chars:
            added.append(rule_id)
    return with_rules(current, added) if added else current


def rewrite_instruction(request: StageRequest) -> dict[str, Any]:
    """The handler: `{"new_instruction": ...}` for one parsed RewriteInstruction request."""
    inputs = request.inputs
    stage = target_stage(inputs.get("stage_signature", ""), inputs.get("stage_name", ""))
    current = inputs.get("current_instruction", "")
    new = rewrite(current, inputs.get("feedback", ""), stage, _limit(inputs.get("max_chars", "")))
    return {"new_instruction": new}
