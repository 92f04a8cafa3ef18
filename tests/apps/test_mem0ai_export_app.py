"""The export of `memory_system=mem0ai` as a user meets it: `memtrace optimize` (and `memtrace export`)
write our own format and mem0's config fragment side by side (run folder, MLflow `export/`); `memtrace
run prompts=<our file>` reproduces the final test metrics exactly; `prompts=<fragment>` runs the
configured prompt set with only mem0's two hooks replaced."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_module
from memtrace_loop.experiments.export import export
from memtrace_loop.experiments.optimize import optimize
from memtrace_loop.experiments.run import run
from memtrace_loop.memory_systems.mem0ai.hooks import HOOK_BY_STAGE, default_hooks, installed_version
from memtrace_loop.pipeline.core.run_folder import RunFolder
from mlflow.tracking import MlflowClient

from tests.support.paths import REPO
from tests.support.store import fresh_store

pytestmark = pytest.mark.usefixtures("mlflow_db")

DATA = ["memory_system=mem0ai", "dataset.n_conversations=3", "dataset.sessions_per_conversation=2",
        "dataset.turns_per_session=4", "workers=1"]
TINY = ["memory_system=mem0ai", "dataset=locomo", f"dataset.path={REPO / 'tests/fixtures/locomo_tiny.json'}",
        "workers=1"]
FILES = {"best_prompts.json", "best_prompts.yaml", "mem0_config.yaml", "mem0_config.json"}


def composed(app: str, tmp_path: Path, *overrides: str):
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        return compose(app, overrides=[f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", *overrides])


@pytest.fixture(scope="module")
def optimized(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("mem0ai-optimize")
    fresh_store(tmp_path / "mlflow.db")
    before = Path.cwd()
    os.chdir(tmp_path)  # the app writes its run directory below the working directory
    try:
        outcome = optimize(composed("optimize", tmp_path, *DATA, "loop.max_iterations=1", "memory_system.top_k=3",
                                    f"cache_dir={tmp_path}/cache"))
    finally:
        os.chdir(before)
    return tmp_path, outcome


@pytest.mark.slow  # the `optimized` fixture runs a (small) optimization of the real mem0ai library
def test_optimize_writes_our_format_and_the_mem0_fragment_side_by_side_and_logs_both(optimized):
    tmp_path, outcome = optimized
    exported = [Path(p) for p in outcome["exported"]]
    assert {p.name for p in exported} == FILES and {p.parent for p in exported} == {Path(outcome["run_dir"])}
    final = outcome["result"].final_prompts
    ours = json.loads((Path(outcome["run_dir"]) / "best_prompts.json").read_text())
    assert set(ours["prompts"]) == {"fact_extraction", "update_memory", "respond"}
    assert ours["knobs"] == {"top_k": 3}  # ours carries the knob; mem0's fragment has no key for it
    for name in ("mem0_config.json", "mem0_config.yaml"):
        fragment = yaml.safe_load((Path(outcome["run_dir"]) / name).read_text())
        assert fragment["mem0ai_version"] == installed_version()
        assert fragment["source_run"] == outcome["run_id"]
        assert fragment["config"] == {key: final[stage] for stage, key in HOOK_BY_STAGE.items()}
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    assert {f.path for f in client.list_artifacts(outcome["run_id"], "export")} == {f"export/{n}" for n in FILES}


@pytest.mark.slow  # the `optimized` fixture runs a (small) optimization of the real mem0ai library
def test_the_report_of_a_mem0ai_optimization_shows_mem0s_stages(optimized):
    _, outcome = optimized
    page = (Path(outcome["run_dir"]) / "report.html").read_text(encoding="utf-8")
    assert "fact_extraction" in page and "update_memory" in page and "mem0ai" in page


@pytest.mark.slow  # after the module's optimization: one `memtrace run` on its test split (top_k from the file)
def test_our_exported_file_reproduces_the_final_test_metrics_exactly(optimized):
    tmp_path, outcome = optimized
    best = RunFolder(Path(outcome["run_dir"])).best_prompts[0]
    again = run(composed("run", tmp_path, *DATA, "split=test", f"prompts={best}", f"cache_dir={tmp_path}/cache"))
    assert again["judge_accuracy"] == pytest.approx(outcome["test_final"], abs=1e-12)


@pytest.mark.slow  # after the module's optimization
def test_memtrace_export_writes_the_fragment_beside_its_file(optimized, tmp_path, monkeypatch):
    source, outcome = optimized
    monkeypatch.chdir(tmp_path)
    path = export(composed("export", source, f"run_id={outcome['run_id']}", f"out={tmp_path / 'mine.yaml'}"))
    assert path == tmp_path / "mine.yaml"
    assert {"mine.yaml", "mem0_config.yaml", "mem0_config.json"} <= {p.name for p in tmp_path.iterdir()}
    made = json.loads((Path(outcome["run_dir"]) / "mem0_config.json").read_text())
    again = json.loads((tmp_path / "mem0_config.json").read_text())
    assert again == made  # the same fragment, made again from the logged export


@pytest.mark.slow  # two `memtrace run`s of the real mem0ai library on the tiny fixture
def test_a_fragment_loads_with_only_the_hooks_changed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    hooks = default_hooks()
    changed = {key: hooks[stage] + "\n- Keep the speaker's name in every fact." for stage, key in HOOK_BY_STAGE.items()}
    fragment = tmp_path / "mem0_config.yaml"
    fragment.write_text(yaml.safe_dump({"format": "mem0ai-config-fragment", "mem0ai_version": installed_version(),
                                        "config": changed}))
    plain = run(composed("run", tmp_path, *TINY, f"cache_dir={tmp_path}/cache"))
    loaded = run(composed("run", tmp_path, *TINY, f"prompts={fragment}", f"cache_dir={tmp_path}/cache"))

    def used(outcome) -> dict[str, str]:
        return json.loads((RunFolder(Path(outcome["run_dir"])).artifacts / RunFolder.PROMPTS).read_text())

    start, after = used(plain), used(loaded)
    assert after == {**start, **{stage: changed[key] for stage, key in HOOK_BY_STAGE.items()}}
    assert after["respond"] == start["respond"] and after != start
