"""The stage table of the simulated world: per stage its output fields, handler, rules, pipeline order.

`STAGES` is the one declaration of how the stand-in LM behaves at each memory-system stage: a row
(`SimStage`) names the stage, the output fields a request for it has (how the stand-in dispatches), its
handler, its rules (the competences it shows only when its instruction states them, from the rule
catalog `pipeline.sim.rules`, fixes first) and whether it writes memory (`construction`: the
paraphrasing world rewrites those outputs). The rows are in pipeline order, which is what
`expected_cause` reads ("the earliest stage with a needed rule missing"). A memory system whose stages
the table lacks adds rows of its own from its folder (`memory_systems/<name>/sim.py`, reached through
the registry: `pipeline.sim.system_stages`). A row may answer a request that is not in DSPy's adapter
format (a library's own prompt, e.g. the real mem0's): its `foreign` (`ForeignFormat`) recognizes such a
request by its structure, reads it into a `StageRequest` for the row's handler and writes the handler's
values as the reply the library parses; such a row is never chosen by output fields. Requests that are
not memory-system stages (the judge, the rewriters, the LLM attributor's step, the diagnosis) are the
stand-in's services. It does not dispatch (`pipeline.sim.stand_in`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from memtrace_loop.pipeline.sim import episode_handlers as episodes
from memtrace_loop.pipeline.sim import handlers
from memtrace_loop.pipeline.sim.protocol import StageRequest
from memtrace_loop.pipeline.sim.rules import RULES, RULES_BY_ID, RuleEffect, SimRule, with_rules

__all__ = [
    "STAGES", "STAGE_ORDER", "STAGE_OUTPUTS", "ForeignFormat", "Handler", "SimStage", "expected_cause",
    "perfect_instruction", "stage_for_outputs",
]

Handler = Callable[[StageRequest], dict[str, Any]]
ALL_EFFECTS = tuple(RuleEffect)


@dataclass(frozen=True)
class ForeignFormat:
    """How a row meets a request that is not in DSPy's adapter format: `read` recognizes the chat
    messages by their structure and turns them into the row's `StageRequest` (None: not its kind);
    `write` formats the handler's values as the reply text the library expects."""

    read: Callable[[list[dict[str, Any]]], StageRequest | None]
    write: Callable[[StageRequest, dict[str, Any]], str]


@dataclass(frozen=True)
class SimStage:
    """One stage of the simulated world (see the module docstring)."""

    name: str
    outputs: frozenset[str]
    handler: Handler
    rules: tuple[SimRule, ...] = ()
    construction: bool = False
    foreign: ForeignFormat | None = None

    def fixes(self) -> tuple[SimRule, ...]:
        """The rules that are real fixes (misfires and noise left out)."""
        return tuple(r for r in self.rules if r.effect == RuleEffect.FIX)


def _rules(stage: str) -> tuple[SimRule, ...]:
    return tuple(r for r in RULES if r.stage == stage)


STAGES: tuple[SimStage, ...] = (
    SimStage("extract", frozenset({"facts"}), handlers.extract_handler, _rules("extract"), construction=True),
    SimStage("decide", frozenset({"actions"}), handlers.decide_handler, _rules("decide"), construction=True),
    SimStage("answer", frozenset({"answer"}), handlers.answer_handler, _rules("answer")),
    SimStage("detect_boundary", frozenset({"starts_new_episode"}), episodes.boundary_handler),
    SimStage("write_events", frozenset({"events"}), episodes.events_handler, _rules("write_events"),
             construction=True),
    SimStage("write_episode", frozenset({"title", "narrative"}), episodes.episode_handler, construction=True),
    SimStage("check_sufficiency", frozenset({"sufficient"}), episodes.sufficiency_handler),
    SimStage("expand_queries", frozenset({"queries"}), episodes.expand_handler, _rules("expand_queries")),
)
STAGE_ORDER: tuple[str, ...] = tuple(s.name for s in STAGES)
STAGE_OUTPUTS: Mapping[str, frozenset[str]] = MappingProxyType(
    {**{s.name: s.outputs for s in STAGES}, "judge": frozenset({"label"})}
)


def stage_for_outputs(output_fields: Iterable[str], stages: Iterable[SimStage] = STAGES) -> str | None:
    """The stage a signature with these output fields is dispatched to (None if unknown)."""
    row = _row(output_fields, (*stages, _JUDGE))
    return row.name if row is not None else None


def _row(output_fields: Iterable[str], stages: Iterable[SimStage]) -> SimStage | None:
    key = frozenset(output_fields) - {"reasoning"}
    return next((s for s in stages if s.outputs == key and s.foreign is None), None)


def perfect_instruction(instruction: str, output_fields: Iterable[str], stages: Iterable[SimStage] = STAGES) -> str:
    """`instruction` with the sentence of every fix of the stage `output_fields` dispatch to appended: the
    prompt under which that stage makes no planted mistake (unchanged for a stage the world lacks)."""
    row = _row(output_fields, stages)
    fixes = row.fixes() if row is not None else ()
    return with_rules(instruction, [r.id for r in fixes], fixes)


def expected_cause(needs: Iterable[str], present: Iterable[str] = ()) -> tuple[str | None, str | None]:
    """(error type, stage) a question needing `needs` is expected to fail with when only the rules in
    `present` are stated: the earliest stage, in pipeline order, with a needed rule missing; within
    that stage the first missing rule in catalog order. (None, None) if nothing is missing."""
    missing = [RULES_BY_ID[r] for r in needs if r not in set(present)]
    if not missing:
        return None, None
    first = min(missing, key=lambda r: (STAGE_ORDER.index(r.stage), RULES.index(r)))
    return first.fixes_error_type, first.stage


_JUDGE = SimStage("judge", frozenset({"label"}), handlers.judge_handler)
