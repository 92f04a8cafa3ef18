"""The package layering: no package imports one above it, only registries reach the simulated world,
and nothing imports the bare (un-prefixed) top-level names.

Layers, lowest first (docs/ARCHITECTURE.md draws them): core < data, backends < memory_systems <
analysis < optimizers, interop < loop < benchmark, tracking < report < experiments. `pipeline.sim` sits beside them: it
may import core, backends and data (it generates data in the datasets' layouts), and only the
LM-backend and dataset registries may import it.

A memory system's simulated behaviour lives in its own folder (`memory_systems/<name>/sim.py`, named by
its spec's `sim`): such a module belongs to the sim world (it may import `pipeline.sim`, and no module
imports it by name: the sim world reaches it through the memory-system registry). So the sim world may
also import `memory_systems.registry` (and the spec records): the one way from the world to the rows a
system adds, without the world naming any system.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.paths import REPO

PREFIX = "memtrace_loop."
TOP_LEVEL = ("pipeline", "memory_systems", "optimizers", "experiments", "conf")
RANK_BY_PACKAGE = {
    "pipeline.core": 0,
    "pipeline.data": 1,
    "pipeline.backends": 1,
    "memory_systems": 2,
    "pipeline.analysis": 3,
    "optimizers": 4,
    "pipeline.interop": 4,
    "pipeline.loop": 5,
    "pipeline.benchmark": 6,
    "pipeline.tracking": 6,
    "pipeline.report": 7,
    "experiments": 8,
}
SIM = "pipeline.sim"
SIM_MAY_IMPORT = ("pipeline.core", "pipeline.backends", "pipeline.data")  # it writes the datasets' layouts
SIM_IMPORTERS = ("pipeline.backends.registry", "pipeline.data.registry")
SIM_MAY_REACH = ("memory_systems.registry", "memory_systems.spec")  # the systems' own rows, via the registry


def package_of(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) == 3 and parts[0] == "memory_systems" and parts[2] == "sim":
        return SIM  # a system's own rows of the sim world's stage table
    for package in sorted([*RANK_BY_PACKAGE, SIM], key=len, reverse=True):
        if module == package or module.startswith(package + "."):
            return package
    return None


def project_modules() -> Iterator[tuple[str, Path]]:
    for top in TOP_LEVEL:
        for path in sorted((REPO / top).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


def imports_of(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)


def violations() -> list[str]:
    found = []
    for module, path in project_modules():
        mine = package_of(module)
        for name in imports_of(path):
            if name.split(".")[0] in TOP_LEVEL:
                found.append(f"{module} imports the bare name {name} (use {PREFIX}{name})")
                continue
            if not name.startswith(PREFIX):
                continue
            target = name.removeprefix(PREFIX)
            theirs = package_of(target)
            if theirs is None or theirs == mine or mine is None:
                continue
            if theirs == SIM:
                if not any(module == importer for importer in SIM_IMPORTERS):
                    found.append(f"{module} imports {target}: only {', '.join(SIM_IMPORTERS)} may reach the sim world")
            elif mine == SIM:
                if theirs not in SIM_MAY_IMPORT and not target.startswith(SIM_MAY_REACH):
                    found.append(f"the sim world ({module}) imports {target} ({theirs})")
            elif RANK_BY_PACKAGE[theirs] >= RANK_BY_PACKAGE[mine]:
                found.append(f"{module} ({mine}) imports {target} ({theirs}), which is not below it")
    return sorted(set(found))


def test_every_module_belongs_to_a_layer() -> None:
    unplaced = [m for m, _ in project_modules() if package_of(m) is None and m.split(".")[0] != "conf"]
    assert unplaced == [m for m in unplaced if m in TOP_LEVEL or m == "pipeline"], unplaced


def test_no_package_imports_one_above_it() -> None:
    assert violations() == []


@pytest.mark.parametrize(
    ("module", "imported", "expected"),
    [
        ("pipeline.core.graph", "memtrace_loop.pipeline.analysis.blame", "not below it"),
        ("memory_systems.rag", "memtrace_loop.optimizers.base", "not below it"),
        ("experiments.factory", "memtrace_loop.pipeline.sim.world", "may reach the sim world"),
        ("pipeline.loop.runner", "pipeline.core.graph", "bare name"),
    ],
)
def test_the_checker_catches_an_upward_import(tmp_path, monkeypatch, module, imported, expected) -> None:
    fake = tmp_path / "fake.py"
    fake.write_text(f"import {imported}\n")
    monkeypatch.setattr(f"{__name__}.project_modules", lambda: iter([(module, fake)]))
    assert any(expected in line for line in violations())
