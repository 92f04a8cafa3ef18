"""`make compare`: the experiment config composes into the whole sweep (every job a valid optimize
config), and a tiny real multirun (2 optimizers x 1 system x 2 seeds) ends with the Markdown table, the
plot and the `comparison` MLflow run; the lab's entry point (`python -m memtrace_loop.experiments.lab.compare`)
rebuilds the same table from the directory or from the experiment. The full sweep is never run here."""

from __future__ import annotations

import itertools
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.utils import instantiate
from memtrace_loop.experiments.config import validated_optimize
from memtrace_loop.experiments.lab.compare import (
    REPORT_NAMES,
    ComparisonCallback,
    ComparisonError,
    compare,
    run_compare,
)
from memtrace_loop.memory_systems.registry import SYSTEMS
from memtrace_loop.optimizers.registry import OPTIMIZERS
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from tests.support.store import fresh_store

# every test starts with a fresh, migrated MLflow store at tmp_path/mlflow.db (a copy of a template: tests/conftest.py)
pytestmark = pytest.mark.usefixtures("mlflow_db")

EXPERIMENT = "experiment=compare_optimizers"


def compose_optimize(*overrides: str, hydra: bool = False):
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        return compose("optimize", overrides=[EXPERIMENT, *overrides], return_hydra_config=hydra)


def sweep_values() -> dict[str, list[str]]:
    params = compose_optimize(hydra=True).hydra.sweeper.params
    parsed = OverridesParser.create().parse_overrides([f"{key}={value}" for key, value in params.items()])
    return {o.get_key_element(): [str(v) for v in o.sweep_string_iterator()] for o in parsed}


def test_the_sweep_is_every_optimizer_on_every_system_over_three_seeds():
    values = sweep_values()
    assert set(values) == {"optimizer", "memory_system", "seed"}
    # generated from the registry: every optimizer whose SPEC sets compare (all of today's)
    assert values["optimizer"] == list(OPTIMIZERS.compared()) == list(OPTIMIZERS.names)
    assert {"attribution", "uniform", "none"} <= set(values["optimizer"])
    # every system whose SPEC sets compare: not mem0ai (the real library: slower, and not ours to tune), not custom
    # (a user's own)
    compared = {name for name, spec in SYSTEMS.items() if spec.compare}
    assert set(values["memory_system"]) == set(SYSTEMS.compared()) == compared
    assert {"long_context", "rag", "mem0", "evermemos"} <= compared and not {"custom", "mem0ai"} & compared
    assert len(set(values["seed"])) >= 3


@pytest.mark.slow  # seconds each (measured): out of `make test-fast`
def test_every_job_of_the_sweep_composes_into_a_valid_config_with_the_same_budget():
    values = sweep_values()
    loops = set()
    for optimizer, system, seed in itertools.product(values["optimizer"], values["memory_system"], values["seed"]):
        cfg = compose_optimize(f"optimizer={optimizer}", f"memory_system={system}", f"seed={seed}")
        config = validated_optimize(OmegaConf.to_container(cfg, resolve=True))
        assert (config.optimizer.name, config.memory_system.name, config.seed) == (optimizer, system, int(seed))
        assert config.tracking.experiment == "compare-optimizers"
        assert config.lm.task.cache is False and config.lm.rewriter.cache is False
        assert config.workers <= 2
        loops.add(config.loop)
    assert len(loops) == 1  # every optimizer runs under the same loop settings (budget)


def test_the_comparison_callback_is_registered_as_a_hydra_callback():
    callbacks = compose_optimize(hydra=True).hydra.callbacks
    callback = instantiate(callbacks.comparison)
    assert isinstance(callback, ComparisonCallback) and callback.reference == "attribution"


def test_comparing_nothing_fails_clearly(tmp_path):
    with pytest.raises(ComparisonError, match="no `memtrace optimize` runs"):
        compare(f"sqlite:///{tmp_path}/mlflow.db", "nothing-here", tmp_path / "out", log=False)
    with pytest.raises(ComparisonError, match="multirun directory"):
        compare(f"sqlite:///{tmp_path}/mlflow.db", "nothing-here", tmp_path / "out", sweep_dir=tmp_path, log=False)


# --------------------------------------------------------------------------- a tiny real multirun


@pytest.fixture(scope="module")
def tiny_sweep(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("compare")
    uri = fresh_store(tmp_path / "mlflow.db")  # migrated already: the sweep's jobs do not race to create it
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "COLUMNS": "200", "DSPY_CACHEDIR": str(tmp_path / "dspy")}
    memtrace = Path(sys.executable).parent / "memtrace"
    launcher = subprocess.Popen(  # the experiment's default launcher: joblib, 2 processes
        [str(memtrace), "optimize", "-m", EXPERIMENT, "optimizer=attribution,none", "memory_system=rag", "seed=0,1",
         "dataset.n_conversations=4", "loop.max_iterations=1", f"cache_dir={tmp_path}/cache",
         f"hydra.sweep.dir={tmp_path}/multirun"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    stdout, stderr = launcher.communicate(timeout=900)
    assert launcher.returncode == 0, stderr[-3000:]
    return tmp_path, uri, stdout, launcher.pid, stderr


@pytest.mark.slow  # four optimization runs in two processes and the comparison (~20 s)
def test_a_multirun_ends_with_the_table_the_plot_and_the_comparison_run(tiny_sweep):
    tmp_path, uri, stdout, _, _ = tiny_sweep
    report_dir = tmp_path / "multirun" / "comparison"
    markdown, plot, data = (report_dir / name for name in REPORT_NAMES)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = [line for line in markdown.read_text().splitlines() if line.startswith("| ")]
    assert [line.split(" | ")[:3] for line in table[1:]] == [["| attribution", "rag", "2"], ["| none", "rag", "2"]]
    rows = {row["optimizer"]: row for row in json.loads(data.read_text())["rows"]}
    assert rows["attribution"]["gain"]["mean"] > 0 and rows["attribution"]["gain"]["n"] > 10
    assert rows["none"]["gain"]["mean"] == 0 and rows["none"]["vs_reference"]["mean"] < 0
    assert all(rows[name]["lm_calls"] > 0 and rows[name]["tokens"] > 0 for name in rows)  # cache off: all made
    assert "comparison.md" in stdout

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("compare-optimizers")
    parents = client.search_runs([experiment.experiment_id], "tags.`memtrace.command` = 'optimize'")
    (comparison,) = client.search_runs([experiment.experiment_id], "tags.`memtrace.command` = 'compare'")
    assert comparison.info.run_name == "comparison"
    assert set(comparison.data.tags["memtrace.compared_runs"].split(",")) == {p.info.run_id for p in parents}
    assert len(parents) == 4
    assert {a.path for a in client.list_artifacts(comparison.info.run_id)} == set(REPORT_NAMES)
    assert comparison.data.metrics["gain/attribution/rag/mean"] == pytest.approx(rows["attribution"]["gain"]["mean"])
    for parent in parents:  # what the comparison paired
        assert "test_questions.json" in {a.path for a in client.list_artifacts(parent.info.run_id)}
        assert parent.data.metrics["prompt_chars/final"] > 0 and parent.data.metrics["lm_tokens/made"] > 0


@pytest.mark.slow  # reuses the multirun above
def test_the_jobs_ran_in_parallel_processes_into_one_experiment(tiny_sweep):
    tmp_path, uri, _, launcher_pid, _ = tiny_sweep
    client = MlflowClient(tracking_uri=uri)
    experiments = client.search_experiments()
    runs = client.search_runs([e.experiment_id for e in experiments], "tags.`memtrace.command` = 'optimize'")
    assert len(runs) == 4 and {r.info.experiment_id for r in runs} == {
        client.get_experiment_by_name("compare-optimizers").experiment_id}
    pids = {r.data.tags["memtrace.pid"] for r in runs}
    assert len(pids) == 2 and str(launcher_pid) not in pids  # hydra.launcher.n_jobs=2 worker processes
    job_logs = sorted((tmp_path / "multirun").glob("*/optimize.log"))
    assert len(job_logs) == 4 and all("loop stopped" in log.read_text() for log in job_logs)


@pytest.mark.slow  # reuses the multirun above
def test_each_parallel_job_s_console_log_lines_carry_its_label(tiny_sweep):
    tmp_path, _, stdout, _, _ = tiny_sweep  # the jobs' processes share the launcher's terminal
    jobs = sorted(log.parent.name for log in (tmp_path / "multirun").glob("*/optimize.log"))
    assert len(jobs) == 4 and all("optimizer=" in job and "seed=" in job for job in jobs)
    stopped = [line for line in stdout.splitlines() if "loop stopped" in line]
    assert len(stopped) == 4  # the label is the job's folder name: its overrides
    assert sorted(job for job in jobs for line in stopped if f"[{job}] loop stopped" in line) == jobs


@pytest.mark.slow  # reuses the multirun above
def test_the_comparison_in_the_launcher_process_draws_no_download_bars(tiny_sweep):
    """The jobs run in worker processes; the comparison runs in the launcher's, which never ran a job's
    setup: it quiets MLflow's artifact-download bars itself (one per compared run before)."""
    *_, stderr = tiny_sweep
    assert "Downloading artifacts" not in stderr


def printed_after(label: str, stdout: str) -> list[str]:
    """What follows `label` on its line, or on the next line when the console put the command there
    (a command to copy is never broken, so a long one starts a line of its own in an 80-column log)."""
    lines = stdout.splitlines()
    found = []
    for index, line in enumerate(lines):
        if line.startswith(label):
            rest = line.removeprefix(label).strip()
            found.append(rest or lines[index + 1].strip())
    return found


@pytest.mark.slow  # reuses the multirun above; one small `memtrace run`
def test_the_printed_load_command_runs_as_printed(tiny_sweep):
    tmp_path, uri, stdout, _, _ = tiny_sweep
    lines = printed_after("Load them with:", stdout)
    assert len(lines) == 4
    words = shlex.split(lines[0])
    assert [Path(words[0]).name, words[1]] == ["memtrace", "run"]  # `.venv/bin/memtrace` off PATH
    values = {o.key_or_group: o.value() for o in OverridesParser.create().parse_overrides(words[2:])}
    prompts = Path(values["prompts"])
    assert values["memory_system"] == "rag" and prompts.name == "best_prompts.json" and prompts.is_file()
    assert {"=", ","} <= set(prompts.parent.name)  # the job folder: memory_system=rag,optimizer=...,seed=...
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "MEMTRACE_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run(  # as printed, through a shell; one conversation to stay small
        ["bash", "-c", f"{lines[0]} dataset.n_conversations=1 run_name=loaded"], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    client = MlflowClient(tracking_uri=uri)
    (loaded,) = client.search_runs([client.get_experiment_by_name("memtrace").experiment_id],
                                   "attributes.run_name = 'loaded'")
    assert loaded.data.tags["memtrace.system"] == "rag"


@pytest.mark.slow  # reuses the multirun above
def test_the_lab_compare_rebuilds_the_same_table_from_the_directory_or_the_experiment(tiny_sweep, monkeypatch):
    tmp_path, uri, _, _, _ = tiny_sweep
    monkeypatch.chdir(tmp_path)
    expected = (tmp_path / "multirun" / "comparison" / "comparison.md").read_text()
    for source in ([f"sweep_dir={tmp_path}/multirun"], []):  # the directory, then the whole experiment
        with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
            cfg = compose("compare", overrides=[f"tracking.uri={uri}", f"out={tmp_path}/again", "log=false", *source])
        report = run_compare(cfg)
        assert report.run_id is None and len(report.runs) == 4
        assert report.paths[0].read_text() == expected


def test_a_failing_comparison_fails_the_multirun(tmp_path):
    # Hydra turns a callback's exception into a warning; the callback exits non-zero instead
    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}},
                               "tracking": {"uri": f"sqlite:///{tmp_path}/mlflow.db", "experiment": "empty"}})
    with pytest.raises(SystemExit) as exit_info:
        ComparisonCallback().on_multirun_end(config)
    assert exit_info.value.code == 1
