"""A finished `memtrace optimize` run's exported system under `dspy.Evaluate`: `run_evaluation(run_dir)`.

It reads the run folder's `config.json` and `best_program.json` (`optimizers.gepa_program.load_program`),
rebuilds the run's task and judge LMs and its split (same dataset, fractions, seed) and gives the
program a `LoopCaseRunner` over that split that leaves out the excluded categories, as the loop does:

    dspy.Evaluate(devset=evaluation.devset, metric=evaluation.metric)(evaluation.program).score

is the run's reported judge accuracy of that split in percent (docs/dspy.md; tested in
tests/apps/test_registry_and_program_app.py). No app: it logs nothing, configures no DSPy cache and
starts no local model server. Relative dataset paths resolve against `base_dir` (default: the cwd).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import dspy
from memtrace_loop.experiments.config import validated_optimize
from memtrace_loop.experiments.factory import splits_of
from memtrace_loop.optimizers.gepa_program import JudgeMetric, MemoryProgram, load_program, question_examples
from memtrace_loop.pipeline.analysis.judge import make_judge
from memtrace_loop.pipeline.backends.embeddings import build_embedder
from memtrace_loop.pipeline.backends.registry import build_lm_set
from memtrace_loop.pipeline.core.config import ConfigError
from memtrace_loop.pipeline.core.run_folder import RunFolder
from memtrace_loop.pipeline.data.splits import SPLIT_NAMES
from memtrace_loop.pipeline.loop.runner import LoopCaseRunner, MemoryCache


@dataclass(frozen=True)
class RunEvaluation:
    """What `dspy.Evaluate` needs to score a run's exported system on one split."""

    program: MemoryProgram  # the exported system (knobs, prompts) with the run's task LM and a case runner
    devset: list[dspy.Example]  # the split's questions (excluded categories left out)
    metric: JudgeMetric  # the run's judge's score of each answer


def run_evaluation(run_dir: str | Path, split: str = "test", base_dir: Path | None = None) -> RunEvaluation:
    """The exported system of the optimize run in `run_dir`, ready for `dspy.Evaluate` on `split`."""
    if split not in SPLIT_NAMES:
        raise ConfigError(f"split must be one of {', '.join(SPLIT_NAMES)}, got {split!r}")
    folder = RunFolder(Path(run_dir))
    try:
        config = validated_optimize(json.loads(folder.config.read_text(encoding="utf-8")))
    except (OSError, ValueError) as error:
        raise ConfigError(f"run folder {folder.root}: cannot read its {RunFolder.CONFIG} ({error})") from None
    data = getattr(splits_of(config, base_dir or Path.cwd()), split)
    lms = build_lm_set(config.lm)
    program = load_program(folder.best_program, build_embedder(config.embedder))
    program.set_lm(lms.task)
    cases = LoopCaseRunner(make_judge(lms.judge), {split: data}, MemoryCache(), config.evaluation.exclude_categories)
    program.cases = cases
    program.split_by_question = {q.id: split for q in data.questions}
    return RunEvaluation(program, question_examples(cases.questions(split)), JudgeMetric())
