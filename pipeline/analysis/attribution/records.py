"""The attribution records: `Attribution`, `Fault`, `AttributionCost`, `Check`, `ErrorType`, `Tunable`.
Pure frozen records, no behaviour beyond small accessors."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from memtrace_loop.pipeline.core.records import CaseResult


class Tunable(StrEnum):
    """What an optimizer can change to fix a blamed stage: its prompt, or its non-prompt knobs."""

    PROMPT = "prompt"
    KNOBS = "knobs"


class Check(StrEnum):
    """What a replay check found: the repair (or joint set) rescued the case, did not, was not tried, or
    does not exist short of the gold answer itself (or the system cannot rebuild its memory)."""

    VERIFIED = "verified"
    REFUTED = "refuted"
    UNCHECKED = "unchecked"
    UNVERIFIABLE = "unverifiable"

    @classmethod
    def of(cls, verified: bool | None) -> Check:
        """The check a True / False / None `verified` flag stands for (None: unchecked)."""
        return cls.UNCHECKED if verified is None else cls.VERIFIED if verified else cls.REFUTED


class ErrorType(StrEnum):
    EXTRACTION = "ExtractionError"
    UPDATE = "UpdateError"
    DELETION = "DeletionError"
    RETRIEVAL = "RetrievalError"
    RESPONSE = "ResponseError"


@dataclass(frozen=True)
class Fault:
    """One operation found faulty on the path of the information a case needed."""

    op: str
    op_name: str
    stage: str
    error_type: ErrorType
    tunable: Tunable
    reason: str
    restore: tuple[str, ...] = ()
    seq: int = 0


@dataclass(frozen=True)
class AttributionCost:
    """What finding (and checking) one attribution spent: LM calls and tokens, replayed calls, time."""

    lm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    replay_calls: int = 0
    seconds: float = 0.0


@dataclass(frozen=True)
class Attribution:
    """Why one case failed: the blamed operation `op` and its `stage` (a prompt, or knobs when `tunable` is
    `KNOBS`), from the `evidence` turn ids. `suspects`: every fault found on the information's path, earliest
    first; `joint`: the set that rescued the case together when no single repair did (blame splits over
    it); `alternatives`: other single repairs that also rescued it alone; `check`: what the replay found."""

    case: CaseResult
    op: str
    op_name: str
    stage: str
    error_type: ErrorType
    reason: str
    confidence: float
    method: str
    tunable: Tunable = Tunable.PROMPT
    evidence: tuple[str, ...] = ()
    pseudo_evidence: bool = False
    check: Check = Check.UNCHECKED  # set by a replay check
    suspects: tuple[Fault, ...] = ()
    joint: tuple[Fault, ...] = ()
    alternatives: tuple[Fault, ...] = ()
    cost: AttributionCost = AttributionCost()

    @property
    def verified(self) -> bool | None:
        return {Check.VERIFIED: True, Check.REFUTED: False}.get(self.check)

    @property
    def question_id(self) -> str:
        return self.case.question.id

    def primary(self) -> Fault:
        return Fault(self.op, self.op_name, self.stage, self.error_type, self.tunable, self.reason)

    def causes(self) -> tuple[Fault, ...]:
        """The operations the blame goes to: the joint set when there is one, else the blamed operation
        and the other single repairs that also rescued the case alone (`alternatives`)."""
        return self.joint or (self.primary(), *self.alternatives)
