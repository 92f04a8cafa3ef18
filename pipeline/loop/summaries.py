"""The typed digests of an optimization run: one `IterationSummary` per iteration, one `CandidateSummary`
per candidate the gate saw — what a checkpoint keeps and what tables, plots and `history.json` show.

`to_dict`/`from_dict` give exactly the checkpoint's JSON layout (format v1; blame rows as
`BlameTable.as_rows` writes them); a summary built from a live iteration equals the one read back.
This module does not run, log or render anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from memtrace_loop.pipeline.analysis.blame import BlameTable


@dataclass(frozen=True)
class CandidateSummary:
    """One candidate the gate judged (screened out: accuracy and gain are the screen's estimate;
    `audit_gain`: with `loop.screen.audit`, a screened-out candidate's real dev gain)."""

    stages: tuple[str, ...]
    dev_accuracy: float
    gain: float
    gain_ci: tuple[float, float]
    accepted: bool
    rationale: str
    knobs: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))  # knob changes, if any
    screened_out: bool = False
    screen_calls: int = 0
    full_calls: int = 0
    audit_gain: float | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "stages": list(self.stages), "dev_accuracy": self.dev_accuracy, "gain": self.gain,
            "gain_ci": list(self.gain_ci), "accepted": self.accepted, "rationale": self.rationale,
            "screened_out": self.screened_out, "screen_calls": self.screen_calls, "full_calls": self.full_calls,
        }
        if self.audit_gain is not None:
            data["audit_gain"] = self.audit_gain
        return {**data, "knobs": dict(self.knobs)} if self.knobs else data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CandidateSummary:
        return cls(
            tuple(str(s) for s in data["stages"]), float(data["dev_accuracy"]), float(data["gain"]),
            (float(data["gain_ci"][0]), float(data["gain_ci"][1])), bool(data["accepted"]), str(data["rationale"]),
            MappingProxyType(dict(data.get("knobs", {}))), bool(data.get("screened_out", False)),
            int(data.get("screen_calls", 0)), int(data.get("full_calls", 0)),
            None if data.get("audit_gain") is None else float(data["audit_gain"]),
        )


@dataclass(frozen=True)
class IterationSummary:
    """The serializable digest of an iteration: accuracies, the blame table and every candidate."""

    iteration: int
    train_accuracy: float
    dev_accuracy: float
    dev_ci: tuple[float, float]
    blame: BlameTable
    candidates: tuple[CandidateSummary, ...]
    budget_spent: int = 0  # LM calls of the loop's budget spent by the end of the iteration (cumulative)

    @property
    def accepted(self) -> CandidateSummary | None:
        return next((c for c in self.candidates if c.accepted), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "iteration": self.iteration, "train_accuracy": self.train_accuracy, "dev_accuracy": self.dev_accuracy,
            "dev_ci": list(self.dev_ci), "blame": self.blame.as_rows(),
            "candidates": [c.to_dict() for c in self.candidates], "budget_spent": self.budget_spent,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> IterationSummary:
        return cls(
            int(data["iteration"]), float(data["train_accuracy"]), float(data["dev_accuracy"]),
            (float(data["dev_ci"][0]), float(data["dev_ci"][1])), BlameTable.from_rows(data["blame"]),
            tuple(CandidateSummary.from_dict(c) for c in data["candidates"]), int(data.get("budget_spent", 0)),
        )
