"""The attribution records: why one case failed (`Attribution`), each faulty operation found on the
information's path (`Fault`), what finding it cost (`AttributionCost`), and the two vocabularies they
use (`ErrorType`, `Tunable`).

Pure frozen records, no behaviour beyond small accessors: the attributors beside this module produce
them, `pipeline.analysis.blame` folds them into a blame table, reports and optimizers read them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from memtrace_loop.pipeline.core.records import CaseResult


class Tunable(StrEnum):
    """What an optimizer can change to fix a blamed stage: its prompt, or its non-prompt knobs."""

    PROMPT = "prompt"
    KNOBS = "knobs"


class ErrorType(StrEnum):
    EXTRACTION = "ExtractionError"
    UPDATE = "UpdateError"
    DELETION = "DeletionError"
    RETRIEVAL = "RetrievalError"
    RESPONSE = "ResponseError"


@dataclass(frozen=True)
class Fault:
    """One operation found faulty on the path of the information a case needed. `restore` names the
    graph variables that hold what it lost (an evidence turn, a unit's old version, a memory the search
    missed): what a replay puts back to test whether repairing this operation alone rescues the case."""

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
    splits over it. `verified` is True when a replay with the blamed operation(s) repaired answered
    correctly, False when it did not, None when not checked."""

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
    verified: bool | None = None  # set by a replay check; None when not checked
    suspects: tuple[Fault, ...] = ()
    joint: tuple[Fault, ...] = ()
    cost: AttributionCost = AttributionCost()

    @property
    def question_id(self) -> str:
        return self.case.question.id

    def primary(self) -> Fault:
        """The blamed operation as a `Fault`."""
        return Fault(self.op, self.op_name, self.stage, self.error_type, self.tunable, self.reason)

    def causes(self) -> tuple[Fault, ...]:
        """The operations the blame goes to: the joint set when there is one, else the blamed operation."""
        return self.joint or (self.primary(),)
