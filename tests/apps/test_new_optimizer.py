"""Adding an optimizer is local: its module, one registry line and one config file, nothing else.

In a copy of the tree (the files `git ls-files` lists) a scratch optimizer is added the way a newcomer
would (`optimizers/scratch.py` exporting `SPEC`, one line in `optimizers/registry.py`,
`conf/optimizer/scratch.yaml`), then `memtrace optimize optimizer=scratch` runs in a subprocess on
the copy (its root first on PYTHONPATH: its own `memtrace_loop/` mapping folder is what is imported,
not this checkout's; `tests/support/tree_copy.py`). The run must succeed and its
candidates come from the scratch optimizer; the copy must differ from the tree in those three paths only.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.tree_copy import copy_checkout

pytestmark = pytest.mark.slow

SENTENCE = "Scratch optimizer was here."

SCRATCH_MODULE = f'''"""A scratch optimizer (made by a test): appends one sentence to the most-blamed prompt stage."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memtrace_loop.optimizers.base import Candidate, OptimizationContext, OptimizerSetup, OptimizerSpec


@dataclass(frozen=True)
class Settings:
    sentence: str = "{SENTENCE}"


class ScratchOptimizer:
    name: str = "scratch"

    def __init__(self, sentence: str) -> None:
        self.sentence = sentence

    def propose(self, context: OptimizationContext) -> Sequence[Candidate]:
        blamed = [s for s in context.blame.prompt_stages() if s in context.prompts]
        stage = (blamed or list(context.prompts.stages()))[0]
        prompts = context.prompts.with_instruction(stage, f"{{context.prompts[stage]}} {{self.sentence}}")
        return [Candidate(prompts, (stage,), "scratch: one sentence added")]


def build(setup: OptimizerSetup) -> ScratchOptimizer:
    return ScratchOptimizer(setup.settings.sentence)


SPEC = OptimizerSpec(Settings, build, compare=False)
'''

SCRATCH_CONFIG = """defaults:
  - /schema/optimizer/scratch@_here_
  - _self_

name: scratch
"""

REGISTRY_LINE = '        "none": "memtrace_loop.optimizers.registry:NONE",\n'


def snapshot(root: Path) -> dict[str, str]:
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in root.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }


def add_scratch_optimizer(tree: Path) -> None:
    (tree / "optimizers" / "scratch.py").write_text(SCRATCH_MODULE, encoding="utf-8")
    (tree / "conf" / "optimizer" / "scratch.yaml").write_text(SCRATCH_CONFIG, encoding="utf-8")
    registry = tree / "optimizers" / "registry.py"
    text = registry.read_text(encoding="utf-8")
    assert text.count(REGISTRY_LINE) == 1
    registry.write_text(
        text.replace(REGISTRY_LINE, REGISTRY_LINE + '        "scratch": "memtrace_loop.optimizers.scratch",\n'),
        encoding="utf-8",
    )


def test_a_new_optimizer_is_its_module_one_registry_line_and_one_config(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    copy_checkout(tree)
    before = snapshot(tree)
    add_scratch_optimizer(tree)
    work = tmp_path / "work"
    work.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")])),
        "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlflow.db",
        "COLUMNS": "160",
    }
    done = subprocess.run(
        [str(Path(sys.executable).parent / "memtrace"), "optimize", "optimizer=scratch", "loop.max_iterations=1",
         "dataset.n_conversations=4", "workers=2", f"cache_dir={tmp_path}/cache", f"hydra.run.dir={work}/out"],
        cwd=work, env=env, capture_output=True, text=True, timeout=600, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (work / "out" / "best_prompts.json").exists()  # this checkout has no `scratch`: the copy ran
    checkpoint = (work / "out" / "checkpoint.json").read_text(encoding="utf-8")
    assert "scratch: one sentence added" in checkpoint  # the candidate the scratch optimizer proposed
    after = snapshot(tree)
    changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    assert changed == ["conf/optimizer/scratch.yaml", "optimizers/registry.py", "optimizers/scratch.py"]
