"""The command lines we print run as printed: each word survives the shell (`shlex`) and Hydra's
override grammar (`OverridesParser`) and comes back as the exact value, whatever the path holds."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import OverrideParseException
from memtrace_loop.pipeline.core.command_line import command_line, override, program, program_path
from omegaconf import OmegaConf

PATHS = [
    "/tmp/plain/best_prompts.json",
    "/tmp/multirun/memory_system=rag,optimizer=none,seed=0/best_prompts.json",
    "/tmp/a folder/it's \"quoted\"/x.json",
    "/tmp/back\\slash\\/x\\",
    "/tmp/$HOME/*/x?.json",
    "relative/dir=1,2",
]


def parsed(line: str) -> tuple[list[str], dict[str, object]]:
    words = shlex.split(line)
    overrides = OverridesParser.create().parse_overrides([w for w in words if "=" in w])
    return [w for w in words if "=" not in w], {o.key_or_group: o.value() for o in overrides}


@pytest.mark.parametrize("path", PATHS)
def test_a_printed_path_comes_back_exactly_through_the_shell_and_hydra(path):
    words, values = parsed(command_line("memtrace", "run", memory_system="rag", prompts=path))
    assert words == [program("memtrace"), "run"]
    assert values == {"memory_system": "rag", "prompts": path}


def test_a_plain_value_stays_bare_and_a_sweep_folder_is_quoted():
    assert override("resume", "outputs/optimize/2026-01-01_00-00-00-abc123") == (
        "resume=outputs/optimize/2026-01-01_00-00-00-abc123")
    quoted = override("resume", "multirun/x/optimizer=none,seed=0")
    assert quoted == "'resume=\"multirun/x/optimizer=none,seed=0\"'"
    with pytest.raises(OverrideParseException):  # what was printed before: `,` and `=` break Hydra's grammar
        OverridesParser.create().parse_overrides(["resume=multirun/x/optimizer=none,seed=0"])


def test_an_interpolation_like_path_is_not_resolved_by_omegaconf():
    _, values = parsed(command_line("memtrace", "run", prompts="/tmp/${oc.env:HOME}/x.json"))
    assert OmegaConf.create({"prompts": values["prompts"]}).prompts == "/tmp/${oc.env:HOME}/x.json"


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    """A project folder with `.venv/bin/{python,memtrace,mlflow}` as `make install` leaves it."""
    bin_dir = tmp_path / "project" / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("python", "memtrace", "mlflow"):
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    return bin_dir


@pytest.mark.parametrize("name", ["memtrace", "mlflow"])
def test_a_program_off_path_is_named_by_its_path_relative_inside_the_project_else_absolute(venv, tmp_path, name):
    python, project, elsewhere = str(venv / "python"), venv.parent.parent, tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert program_path(name, path="/usr/bin:/bin", executable=python, cwd=project) == f".venv/bin/{name}"
    assert program_path(name, path="/usr/bin:/bin", executable=python, cwd=elsewhere) == str(venv / name)
    assert program_path(name, path="/usr/bin:/bin", executable=python, cwd=venv) == f"./{name}"


def test_a_program_on_path_keeps_its_bare_name_unless_path_finds_another(venv, tmp_path):
    python, project = str(venv / "python"), venv.parent.parent
    assert program_path("memtrace", path=f"/usr/bin:{venv}", executable=python, cwd=project) == "memtrace"
    other = tmp_path / "other"
    other.mkdir()
    (other / "memtrace").write_text("#!/bin/sh\n")
    (other / "memtrace").chmod(0o755)  # an older install earlier on PATH: the bare name would run it
    assert program_path("memtrace", path=f"{other}:{venv}", executable=python, cwd=project) == ".venv/bin/memtrace"
    assert program_path("nothere", path="/usr/bin", executable=python, cwd=project) == "nothere"


def test_command_line_names_our_programs_as_this_process_would_run_them(monkeypatch, venv):
    monkeypatch.setattr("sys.executable", str(venv / "python"))
    monkeypatch.chdir(venv.parent.parent)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert command_line("memtrace", "run", prompts="p.json") == ".venv/bin/memtrace run prompts=p.json"
    assert command_line("mlflow", "ui").startswith(".venv/bin/mlflow ui")
    monkeypatch.setenv("PATH", f"{venv}{os.pathsep}/usr/bin")
    assert command_line("memtrace", "run") == "memtrace run"
