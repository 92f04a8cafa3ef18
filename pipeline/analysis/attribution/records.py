"""The attribution records: `Attribution`, `Fault`, `AttributionCost`, `Check`, `ErrorType`, `Tunable`.

Pure frozen records, no behaviour beyond small accessors.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from memtrace_loop.pipeline.core.records import CaseResult


class Tunable(StrEnum):
    """What an optimizer can change to fix a blamed stage: its prompt, or its non-prompt knobs."""

    PROMPT = "prompt"
    KNOBS = "knobs"


class Check(StrEnum):
    """What a replay check found for a blame (`pipeline.analysis.attribution.replay`):

    - `verified`: repairing the blamed stage's output the way a fixed stage could write it (or the named
      joint set together) turned the answer correct;
    - `refuted`: a repair was made and did not rescue the case;
    - `unchecked`: no replay was tried (verification off);
    - `unverifiable`: no repair exists that is not the gold answer itself (e.g. the answer stage had no
      line carrying the information in its context, or the system cannot rebuild its memory).
    """

    VERIFIED = "verified"
    REFUTED = "refuted"
    UNCHECKED = "unchecked"
    UNVERIFIABLE = "unverifiable"

    @classmethod
    def of(cls, verified: bool | None) -> Check:
        """The check a True / False / None `verified` flag stands for (None: unchecked)."""
        if verified is None:
            return cls.UNCHECKED
        return cls.VERIFIED if verified else cls.REFUTED


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
    """Why one case failed. `op` is the blamed operation's id in the case's conversation graph;
    `stage` the stage whose prompt it used, or — when `tunable` is `Tunable.KNOBS` — the non-LLM stage whose
    settings (e.g. top_k) are to blame. `evidence` lists the turn ids the analysis started from.

    `suspects` are every fault the attributor found on the information's path, earliest first (the
    blamed one among them); a replay check tries them. `joint` is the decisive error set when no single
    repair rescued the case but these together did (in order; the blamed operation is the first); blame
    splits over it. `alternatives` are other single repairs that also rescued the case alone (a knob
    beside a prompt rule), so an optimizer can choose. `check` is what the replay found (`Check`);
    `verified` reads it as True (verified), False (refuted) or None (unchecked or unverifiable)."""

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
        """True when a replay verified the blame, False when it refuted it, None otherwise."""
        return {Check.VERIFIED: True, Check.REFUTED: False}.get(self.check)

    @property
    def question_id(self) -> str:
        return self.case.question.id

    def primary(self) -> Fault:
        """The blamed operation as a `Fault`."""
        return Fault(self.op, self.op_name, self.stage, self.error_type, self.tunable, self.reason)

    def causes(self) -> tuple[Fault, ...]:
        """The operations the blame goes to: the joint set when there is one, else the blamed operation
        and the other single repairs that also rescued the case alone (`alternatives`)."""
        return self.joint or (self.primary(), *self.alternatives)
