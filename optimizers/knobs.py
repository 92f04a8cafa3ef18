"""Knob candidates: new settings for the non-LLM stages blame lands on.

`propose_knobs`: the `top_k` reaching the ranked near misses in `COVER` of cases, else `top_k` grown by
`GROWTH`; a construction stage's first knob grown by `GROWTH`. `knob_candidates` wraps them. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from memtrace_loop.optimizers.base import Candidate, OptimizationContext
from memtrace_loop.pipeline.analysis.attribution.records import Attribution, ErrorType, Fault, Tunable
from memtrace_loop.pipeline.analysis.attribution.repairs import needed_top_k
from memtrace_loop.pipeline.core.graph import ExecutionGraph

COVER = 1.0  # share of the ranked misses the proposed top_k must reach
GROWTH = 2  # factor for a knob whose needed value the traces do not show
TOP_K = "top_k"


@dataclass(frozen=True)
class KnobProposal:
    """New values for the knobs of one blamed stage, and why."""

    stage: str
    changes: Mapping[str, Any]
    failures: int  # blamed failures this stage's knobs were blamed for
    reason: str


def knob_faults(attributions: Sequence[Attribution]) -> dict[str, list[tuple[Attribution, Fault]]]:
    """stage -> (attribution, fault) for every cause blamed on a stage's knobs (joint causes included),
    stages in order of first blame. The fault carries what it lost (`restore`) when a suspect does."""
    found: dict[str, list[tuple[Attribution, Fault]]] = {}
    for attribution in attributions:
        restore_by_op = {s.op: s for s in attribution.suspects}
        for cause in attribution.causes():
            if cause.tunable == Tunable.KNOBS:
                found.setdefault(cause.stage, []).append((attribution, restore_by_op.get(cause.op, cause)))
    return found


def covering_value(needed: Sequence[int], cover: float = COVER) -> int:
    """The smallest value at least `cover` of `needed` fit under (needed must not be empty)."""
    ordered = sorted(needed)
    return ordered[max(math.ceil(cover * len(ordered)) - 1, 0)]


def _top_k_proposal(
    stage: str, faults: Sequence[tuple[Attribution, Fault]], top_k: int,
    graph_by_conversation: Mapping[str, ExecutionGraph],
) -> KnobProposal | None:
    needed = []
    for attribution, fault in faults:
        graph = graph_by_conversation.get(attribution.case.question.conversation_id)
        if graph is not None and (value := needed_top_k(graph, fault)) is not None:
            needed.append(value)
    if needed:
        value = covering_value(needed)
        reason = (f"{len(needed)} of {len(faults)} misses were ranked just below the cut; top_k {top_k} -> "
                  f"{value} reaches the evidence in {sum(n <= value for n in needed)} of them")
    else:
        value = top_k * GROWTH
        reason = f"no miss was ranked below the cut in the traces; top_k {top_k} -> {value} (x{GROWTH})"
    if value <= top_k:
        return None
    return KnobProposal(stage, MappingProxyType({TOP_K: value}), len(faults), reason)


def propose_knobs(
    attributions: Sequence[Attribution], knobs: Mapping[str, Any], knob_fields_by_stage: Mapping[str, tuple[str, ...]],
    graph_by_conversation: Mapping[str, ExecutionGraph],
) -> tuple[KnobProposal, ...]:
    """One proposal per stage blamed through its knobs (most blamed first) whose knobs this system has."""
    proposals = []
    by_stage = knob_faults(attributions)
    for stage, faults in sorted(by_stage.items(), key=lambda item: -len(item[1])):
        fields = [f for f in knob_fields_by_stage.get(stage, ()) if isinstance(knobs.get(f), int)]
        if fields:
            current = knobs[fields[0]]
            proposals.append(KnobProposal(
                stage, MappingProxyType({fields[0]: current * GROWTH}), len(faults),
                f"{fields[0]} {current} -> {current * GROWTH} (x{GROWTH})",
            ))
        elif isinstance(knobs.get(TOP_K), int) and any(f.error_type == ErrorType.RETRIEVAL for _, f in faults):
            proposal = _top_k_proposal(stage, faults, knobs[TOP_K], graph_by_conversation)
            if proposal is not None:
                proposals.append(proposal)
    return tuple(proposals)


def knob_candidates(
    context: OptimizationContext, knob_fields_by_stage: Mapping[str, tuple[str, ...]]
) -> tuple[Candidate, ...]:
    """The proposals as candidates: the current prompts with only the blamed stage's knobs changed
    (`knob_fields_by_stage`: the system's, fixed at build)."""
    candidates = []
    for proposal in propose_knobs(
        context.attributions, context.knobs, knob_fields_by_stage, context.graph_by_conversation
    ):
        rationale = (
            f"Stage {proposal.stage} was blamed through its knobs for {proposal.failures} failures; "
            f"{proposal.reason}."
        )
        candidates.append(Candidate(context.prompts, (proposal.stage,), rationale, knobs=proposal.changes))
    return tuple(candidates)
