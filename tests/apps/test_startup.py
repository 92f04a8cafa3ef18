"""`memtrace <command> --help` and `memtrace <command> --cfg job` start at once: Hydra answers them from the
composed config through the dispatcher's config-only app, so neither DSPy, MLflow nor litellm (nor the
apps' work) is imported. Each command runs in a fresh subprocess whose `sys.modules` is read at exit.

Hydra's config tree (`conf/__init__.py`) and the validation (`experiments/config.py`) read every registry
entry's schema record through its `SPEC`, so every SPEC module and schema record is DSPy-free (a system's
`schema.py`, `optimizers/registry.py`, `attribution/specs.py`, the LM records; builders import the
implementation when called). An eager import planted in a SPEC module is seen (the last test).

`memtrace report run_dir=<a finished run>` imports none of them either: the page is drawn from the
run's folder, no LM is called and no MLflow run is read (the last tests, with a planted import that is seen).

The output stays what the app's own Hydra main prints (help text and composed config alike); timings live
in `experiments/lab/bench/startup_bench.py`, never here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from memtrace_loop.experiments.cli import COMMAND_NAMES

from tests.support.paths import REPO

HEAVY = ("dspy", "mlflow", "litellm")
MARK = "memtrace-loaded:"
# `memtrace <args>` in this process, then which heavy packages it imported (also after Hydra's sys.exit)
PROBE = f"""
import sys
{{prelude}}
from memtrace_loop.experiments.cli import main
try:
    main(sys.argv[1:])
finally:
    sys.stderr.write("\\n{MARK}" + ",".join(m for m in {HEAVY!r} if m in sys.modules) + "\\n")
"""


def loaded_by(args: list[str], cwd: Path, prelude: str = "") -> tuple[set[str], str]:
    """The heavy packages `memtrace <args>` imported, and what it printed."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))}
    done = subprocess.run([sys.executable, "-c", PROBE.format(prelude=prelude), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [line for line in done.stderr.splitlines() if line.startswith(MARK)]
    return {name for name in line.removeprefix(MARK).split(",") if name}, done.stdout


@pytest.mark.parametrize("flags", [["--help"], ["--cfg", "job"]], ids=["help", "cfg-job"])
@pytest.mark.parametrize("command", COMMAND_NAMES)
def test_help_and_the_composed_config_import_neither_dspy_mlflow_nor_litellm(command, flags, tmp_path):
    loaded, out = loaded_by([command, *flags], tmp_path)
    assert out.strip()  # Hydra did answer: the help text or the config
    assert not loaded, f"memtrace {command} {' '.join(flags)} imported {sorted(loaded)}"


def test_the_probe_sees_an_eager_import(tmp_path):
    """The check can fail: an import of MLflow before the command (as an eager import in the dispatcher,
    the config tree or an app's module would be) is seen."""
    loaded, _ = loaded_by(["stages", "--cfg", "job"], tmp_path, prelude="import mlflow")
    assert "mlflow" in loaded


# imports DSPy the moment the `none` optimizer's settings record is imported, as an `import dspy` at the
# top of that SPEC-side module would
PLANT = """
import importlib.abc
class _Plant(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "memtrace_loop.optimizers.settings":
            import dspy
        return None
sys.meta_path.insert(0, _Plant())
"""


def test_the_probe_sees_dspy_planted_in_a_spec_module(tmp_path):
    """The DSPy check can fail: DSPy imported by a module the config tree reads for `--cfg job` (the
    optimizers' settings records, read through their SPECs) is seen."""
    loaded, _ = loaded_by(["run", "--cfg", "job"], tmp_path, prelude=PLANT)
    assert "dspy" in loaded


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> tuple[Path, Path]:
    """A `memtrace run` of the simulated world, saved in its folder (run in this process)."""
    from memtrace_loop.experiments.run import run

    from tests.support.compose import hydra_plain
    from tests.support.store import fresh_store

    cwd = tmp_path_factory.mktemp("finished")
    fresh_store(cwd / "mlflow.db")
    outcome = run(hydra_plain("run", f"tracking.uri=sqlite:///{cwd}/mlflow.db", f"cache_dir={cwd}/cache",
                              "dataset.n_conversations=2", "workers=2"))
    return cwd, Path(outcome["run_dir"])


@pytest.mark.parametrize("attributions", ["saved", "attributed here"])
def test_the_report_of_a_saved_run_imports_neither_dspy_mlflow_nor_litellm(finished_run, attributions, tmp_path):
    """With the run's own attributions, or without (the default lineage attributor makes them: no LM)."""
    cwd, run_dir = finished_run
    if attributions != "saved":
        run_dir = Path(shutil.copytree(run_dir, tmp_path / "bare"))
        (run_dir / "artifacts" / "attributions.json").unlink()
    loaded, out = loaded_by(["report", f"run_dir={run_dir}", "log=false"], cwd)
    assert "report.html" in out and f"by memtrace {'run' if attributions == 'saved' else 'report'}" in " ".join(
        out.split())
    assert not loaded, f"memtrace report run_dir=... imported {sorted(loaded)}"


def test_the_probe_sees_mlflow_planted_in_the_report_path(finished_run):
    """The report check can fail: MLflow imported by a module the report of a saved run reads (the
    report's data records) is seen."""
    cwd, run_dir = finished_run
    plant = PLANT.replace("memtrace_loop.optimizers.settings", "memtrace_loop.pipeline.report.data").replace(
        "import dspy", "import mlflow")
    loaded, _ = loaded_by(["report", f"run_dir={run_dir}", "log=false"], cwd, prelude=plant)
    assert "mlflow" in loaded
