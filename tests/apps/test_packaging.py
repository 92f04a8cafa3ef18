"""The wheel installs everything under one prefix, so generic folder names cannot collide.

The repository keeps the design's top level (`pipeline/`, `conf/`, `experiments/`, ...), but the wheel
must not install those generic names into site-packages, where another distribution's `pipeline` or
`conf` would overwrite ours or be overwritten (setup.py maps each folder under `memtrace_loop.`).
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support.paths import REPO


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    build = tmp_path_factory.mktemp("build")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(REPO)],
        check=True,
        cwd=build,
        capture_output=True,
    )
    (path,) = out.glob("memtrace_loop-*.whl")
    return zipfile.ZipFile(path)


def test_the_wheel_installs_one_top_level_package(wheel: zipfile.ZipFile) -> None:
    tops = {Path(name).parts[0] for name in wheel.namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"memtrace_loop"}
    top_level_txt = [n for n in wheel.namelist() if n.endswith("top_level.txt")]
    if top_level_txt:
        assert wheel.read(top_level_txt[0]).decode().split() == ["memtrace_loop"]


def test_the_wheel_carries_configs_and_the_entry_point(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    configs = ("conf/run.yaml", "conf/memory_system/mem0.yaml", "conf/experiment/compare_optimizers.yaml",
               "conf/hydra/launcher/parallel.yaml")
    for config in configs:
        assert f"memtrace_loop/{config}" in names
    (entry_points,) = [n for n in names if n.endswith("entry_points.txt")]
    assert "memtrace = memtrace_loop.experiments.cli:main" in wheel.read(entry_points).decode()
    assert not any(n.startswith("memtrace_loop/tests/") for n in names)
