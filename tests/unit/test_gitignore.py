"""`.gitignore` ignores everything our commands create in the repository root: the MLflow store of the
default tracking URI, its lock and its artifact folder, the apps' run and sweep folders, DSPy's cache,
MLflow's default file store (`mlruns/`) and whatever `make clean` removes. The names are read from where
they are decided (the conf tree, the tracker, the store lock, the Makefile), so a new one is checked too.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from memtrace_loop.pipeline.tracking.mlflow_tracker import _artifact_root
from memtrace_loop.pipeline.tracking.store_access import LOCK_SUFFIX
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[2]
ENV_DEFAULT = re.compile(r"^\$\{oc\.env:[A-Z_]+,(?P<default>[^}]*)\}$")


def _default(value: str) -> str:
    """`${oc.env:NAME,default}` -> default; anything else as it is."""
    found = ENV_DEFAULT.match(value)
    return found["default"] if found else value


def _top(path: str) -> str:
    return Path(path).parts[0]


def created_in_root() -> set[str]:
    names: set[str] = {"mlruns"}  # MLflow's own default store (`mlflow ui`, a client without a URI)
    for app in sorted((ROOT / "conf").glob("*.yaml")):
        node = OmegaConf.to_container(OmegaConf.load(app), resolve=False)
        assert isinstance(node, dict)
        hydra = node.get("hydra") or {}
        for key in ("run", "sweep"):
            if isinstance(hydra.get(key), dict) and "dir" in hydra[key]:
                names.add(_top(hydra[key]["dir"]))
        if "cache_dir" in node:
            names.add(_top(_default(node["cache_dir"])))
    for tracking in sorted((ROOT / "conf" / "tracking").glob("*.yaml")):
        node = OmegaConf.to_container(OmegaConf.load(tracking), resolve=False)
        assert isinstance(node, dict)
        uri = _default(str(node.get("uri", "")))
        if uri.startswith("sqlite:///"):
            db = uri.removeprefix("sqlite:///")
            names |= {db, db + LOCK_SUFFIX}
            artifacts = _artifact_root(uri)
            assert artifacts is not None
            names.add(Path(artifacts.removeprefix("file://")).name)
    clean = re.search(r"^clean:.*\n\trm -rf (?P<names>.*)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert clean is not None, "Makefile has no `clean: rm -rf ...` target"
    names |= {name.removeprefix("$(VENV)").strip("/") or ".venv" for name in clean["names"].split()}
    return names


def _ignored(path: str) -> bool:
    """Whether git ignores `path` (a trailing slash: as a folder; it need not exist)."""
    return subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=ROOT).returncode == 0


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout")
def test_gitignore_ignores_every_file_and_folder_our_commands_create_in_the_root():
    names = created_in_root()
    assert {"mlruns", "mlartifacts", "outputs", "multirun", "mlflow.db", ".cache"} <= names  # the readers work
    not_ignored = [name for name in sorted(names) if not (_ignored(name) or _ignored(name + "/"))]
    assert not not_ignored, f".gitignore does not ignore {not_ignored}"
