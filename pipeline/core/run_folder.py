"""The layout of a run's output folder: `RunFolder`, the one place every file name of it is written.

File names are class constants, `RunFolder(root)` gives the paths; a name made from data is
`safe_names.file_stem` of the id. It creates and reads nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from memtrace_loop.pipeline.core.safe_names import file_stem


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed (unreadable, another format, corrupt, another config or run)."""


@dataclass(frozen=True)
class RunFolder:
    """One run's output folder (`root`) and the names of everything in it."""

    ARTIFACTS: ClassVar[str] = "artifacts"  # `memtrace run`: everything logged to MLflow, saved first
    RECORD: ClassVar[str] = "run_record.json"  # `memtrace run`: the run as MLflow gets it (`memtrace upload`)
    CONFIG: ClassVar[str] = "config.json"  # the composed config the run was made with (secrets redacted)
    CHECKPOINT: ClassVar[str] = "checkpoint.json"  # `memtrace optimize`: the loop after each iteration
    RUN_ID: ClassVar[str] = "mlflow_run_id.txt"  # `memtrace optimize`: its MLflow run, written once (first checkpoint)
    CASES: ClassVar[str] = "cases.json"  # every judged case, readable back (`pipeline.core.case_io`)
    GRAPHS: ClassVar[str] = "graphs"  # one execution graph per conversation
    PROMPTS: ClassVar[str] = "prompts.json"  # the prompt set the run used
    RESULTS: ClassVar[str] = "results.json"
    REPORT_METRICS: ClassVar[str] = "report.json"
    RESULTS_TABLE: ClassVar[str] = "results_table.json"
    REPORT: ClassVar[str] = "report.html"
    ATTRIBUTIONS: ClassVar[str] = "attributions.json"
    ATTRIBUTIONS_TABLE: ClassVar[str] = "attributions_table.json"
    BLAME: ClassVar[str] = "blame.json"
    DIAGNOSIS_JSON: ClassVar[str] = "diagnosis.json"
    DIAGNOSIS_MD: ClassVar[str] = "diagnosis.md"
    BEST_PROMPTS: ClassVar[tuple[str, str]] = ("best_prompts.json", "best_prompts.yaml")
    BEST_PROGRAM: ClassVar[str] = "best_program.json"
    OPTIMIZER: ClassVar[str] = "optimizer"  # an optimizer's own work files, one folder per optimizer
    SOURCE: ClassVar[str] = "source"  # `attribute` / `report`: the logged run downloaded
    ATTRIBUTION_RECORD: ClassVar[str] = "attribution_record.json"  # `attribute`: which attribution this folder holds
    LATEST_ATTRIBUTION: ClassVar[str] = "latest_attribution.json"  # a run folder: its latest attribution

    root: Path

    @staticmethod
    def graph_file(conversation_id: str) -> str:
        """The file name of a conversation's graph in `graphs/` (the id itself is the graph's `graph_id`)."""
        return f"{file_stem(conversation_id)}.json"

    @property
    def artifacts(self) -> Path:
        return self.root / self.ARTIFACTS

    @property
    def config(self) -> Path:
        return self.root / self.CONFIG

    @property
    def checkpoint(self) -> Path:
        return self.root / self.CHECKPOINT

    @property
    def best_prompts(self) -> tuple[Path, Path]:
        return self.root / self.BEST_PROMPTS[0], self.root / self.BEST_PROMPTS[1]

    @property
    def best_program(self) -> Path:
        return self.root / self.BEST_PROGRAM

    @property
    def optimizer_tables(self) -> list[Path]:
        """The optimizers' work tables (`optimizer/<name>/*.json`), sorted."""
        return sorted((self.root / self.OPTIMIZER).glob("*/*.json"))

    @property
    def source(self) -> Path:
        return self.root / self.SOURCE

    @property
    def latest_attribution(self) -> Path:
        return self.root / self.LATEST_ATTRIBUTION

    @classmethod
    def holding(cls, folder: Path) -> RunFolder:
        """The run folder whose saved files are in `folder`: its parent when `folder` is the `artifacts/`
        folder of a run (`memtrace run` saves there), else `folder` itself."""
        return cls(folder.parent if folder.name == cls.ARTIFACTS else folder)
