"""The package layering and the other import fences, checked on the source (no module is imported).

Layers, lowest first (docs/ARCHITECTURE.md draws them): core < data, backends < memory_systems <
analysis < optimizers, interop < loop < tracking < report < experiments < experiments.lab (the lab:
benchmarks, benches, figures) < conf. No module
imports one from a layer at or above its own (within a package anything goes). Besides the layers:

- `pipeline.sim` sits beside them: it may import core, backends and data (it generates data in the
  datasets' layouts), and only the LM-backend and dataset registries may import it.
- Nothing imports the bare (un-prefixed) top-level names, and nothing imports relatively
  (`from . import x`): every import names its module as `memtrace_loop.<top>...`, so a reader (and
  this test) sees what depends on what.
- `conf` is the top: it imports the apps' schemas (`experiments.config`) to store them in Hydra, so no
  module imports it. The apps in `experiments` hand it to Hydra by name (`pkg://memtrace_loop.conf`);
  no module below `experiments` names it at all.
- Importing by string (`importlib.import_module`, `__import__`) is what registries do: a registry is
  a module named `registry.py` or one that builds a `Registry(...)`. Elsewhere such a call is a tunnel
  past this test, refused unless listed in `DYNAMIC_IMPORTERS` with its reason. In a registry, every
  literal project-module string (its lines, its `import_module("...")` arguments) is checked as an
  import against the layers.
- The lab (`experiments.lab`: benchmarks, benches, figures, the optimizer comparison) is apart from the
  product: no module outside it imports it, at any depth (function-level imports included), nor names
  one of its modules in a string (a registry line, a `_target_`, an `import_module` argument). A Hydra
  callback named in a YAML file is configuration and is not read here.
- No import cycles between our modules, counting imports inside functions (they are cycles all the
  same, only deferred); an import inside a package's `__init__` of its own submodules is a facade, not
  a cycle, since the graph has no implicit child-to-parent edges.

A memory system's simulated behaviour may live in its own folder (`memory_systems/<name>/sim.py`, named
by its spec's `sim`): such a module belongs to the sim world (it may import `pipeline.sim`, and no module
imports it by name: the sim world reaches it through the memory-system registry). So the sim world may
also import `memory_systems.registry` (and the spec records): the one way from the world to the rows a
system adds, without the world naming any system.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator, Mapping
from functools import cache
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
    "pipeline.tracking": 6,
    "pipeline.report": 7,
    "experiments": 8,
    "experiments.lab": 9,
    "conf": 10,
}
SIM = "pipeline.sim"
SIM_MAY_IMPORT = ("pipeline.core", "pipeline.backends", "pipeline.data")  # it writes the datasets' layouts
SIM_IMPORTERS = ("pipeline.backends.registry", "pipeline.data.registry")
SIM_MAY_REACH = ("memory_systems.registry", "memory_systems.spec")  # the systems' own rows, via the registry
CONF = "conf"
LAB = "experiments.lab"  # imports the product freely; nothing outside it imports it
CONF_NAMERS = ("experiments", "experiments.lab")  # the apps: `@hydra.main(config_path="pkg://memtrace_loop.conf")`
# Modules outside the registries that import by a computed string, and why that is not a dependency.
DYNAMIC_IMPORTERS: Mapping[str, str] = {
    # restores the inner engine whose class path a checkpoint recorded: data, not a code dependency
    "pipeline.backends.guarded_engine": "restores a checkpointed engine by its recorded class path",
    # `memory_system.target`: the user's own code (a plugin path from config), never a module of ours
    "memory_systems.custom.target": "imports the user's memory system named by memory_system.target",
}
STRING_IMPORTERS = ("import_module", "__import__", "resolve_name")
MODULE_STRING = re.compile(r"^(?:pkg://)?memtrace_loop\.(?:" + "|".join(TOP_LEVEL) + r")(?:\.\w+)*(?::[\w.]+)?$")


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


@cache
def _parse(path: Path, text: str) -> ast.Module:
    return ast.parse(text, filename=str(path))


def tree_of(path: Path) -> ast.Module:
    return _parse(path, path.read_text())


def imports_of(path: Path) -> Iterator[str]:
    """Every name an import statement of the module names (module and module.member), at any depth."""
    for node in ast.walk(tree_of(path)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)


def relative_imports_of(path: Path) -> Iterator[str]:
    for node in ast.walk(tree_of(path)):
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            yield "." * node.level + (node.module or "")


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def string_imports_of(path: Path) -> Iterator[ast.Call]:
    """The `importlib.import_module(...)` / `__import__(...)` calls of the module."""
    for node in ast.walk(tree_of(path)):
        if isinstance(node, ast.Call) and _called_name(node) in STRING_IMPORTERS:
            yield node


def module_strings_of(path: Path) -> Iterator[str]:
    """String literals that name one of our modules (`memtrace_loop.x.y`, `pkg://...`, `x.y:Attr`)."""
    for node in ast.walk(tree_of(path)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and MODULE_STRING.match(node.value):
            yield node.value.removeprefix("pkg://").partition(":")[0]


def is_registry(module: str, path: Path) -> bool:
    if module.rsplit(".", 1)[-1] == "registry":
        return True
    return any(isinstance(node, ast.Call) and _called_name(node) == "Registry" for node in ast.walk(tree_of(path)))


def layer_violation(module: str, target: str) -> str | None:
    """Why `module` may not depend on `target` (both without the prefix), or None when it may."""
    mine, theirs = package_of(module), package_of(target)
    if theirs is None or theirs == mine or mine is None:
        return None
    if theirs == SIM:
        if module not in SIM_IMPORTERS:
            return f"{module} imports {target}: only {', '.join(SIM_IMPORTERS)} may reach the sim world"
    elif mine == SIM:
        if theirs not in SIM_MAY_IMPORT and not target.startswith(SIM_MAY_REACH):
            return f"the sim world ({module}) imports {target} ({theirs})"
    elif RANK_BY_PACKAGE[theirs] >= RANK_BY_PACKAGE[mine]:
        return f"{module} ({mine}) imports {target} ({theirs}), which is not below it"
    return None


def _import_violations(module: str, path: Path) -> Iterator[str]:
    for name in imports_of(path):
        if name.split(".")[0] in TOP_LEVEL:
            yield f"{module} imports the bare name {name} (use {PREFIX}{name})"
        elif name.startswith(PREFIX) and (why := layer_violation(module, name.removeprefix(PREFIX))):
            yield why
    for name in relative_imports_of(path):
        yield f"{module} imports relatively (from {name} import ...): use {PREFIX}<top>..."


def _string_violations(module: str, path: Path) -> Iterator[str]:
    registry = is_registry(module, path)
    if not registry and module not in DYNAMIC_IMPORTERS:
        for call in string_imports_of(path):
            yield f"{module} imports by string ({_called_name(call)}, line {call.lineno}) outside a registry"
    for name in module_strings_of(path):
        target = name.removeprefix(PREFIX)
        if package_of(target) == CONF:
            if package_of(module) not in CONF_NAMERS:
                yield f"{module} names the config tree {name}: only {', '.join(CONF_NAMERS)} hand it to Hydra"
        elif registry and (why := layer_violation(module, target)):
            yield f"{why} (a registry line)"


def violations() -> list[str]:
    found: set[str] = set()
    for module, path in project_modules():
        found.update(_import_violations(module, path))
        found.update(_string_violations(module, path))
    return sorted(found)


def in_lab(module: str) -> bool:
    return module == LAB or module.startswith(LAB + ".")


def lab_violations() -> list[str]:
    """Every product module (one outside `experiments.lab`) that imports the lab or names it in a string."""
    found: set[str] = set()
    for module, path in project_modules():
        if in_lab(module):
            continue
        for name in imports_of(path):
            if name.startswith(PREFIX) and in_lab(name.removeprefix(PREFIX)):
                found.add(f"{module} imports {name}: the product never imports the lab")
        for name in module_strings_of(path):
            if in_lab(name.removeprefix(PREFIX)):
                found.add(f"{module} names {name} in a string: the product never reaches the lab")
    return sorted(found)


def resolve(name: str, modules: Iterable[str]) -> str | None:
    """The most specific of our modules that an imported name (`memtrace_loop.a.b.member`) lives in."""
    known = set(modules)
    parts = name.removeprefix(PREFIX).split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in known:
            return ".".join(parts[:end])
    return None


def import_graph() -> dict[str, set[str]]:
    paths = dict(project_modules())
    graph: dict[str, set[str]] = {module: set() for module in paths}
    for module, path in paths.items():
        for name in imports_of(path):
            if name.startswith(PREFIX) and (target := resolve(name, paths)) and target != module:
                graph[module].add(target)
    return graph


def strongly_connected(graph: Mapping[str, set[str]]) -> list[tuple[str, ...]]:
    """Tarjan's components with more than one member (each one a knot of cycles), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[tuple[str, ...]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            members = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                members.append(member)
                if member == node:
                    break
            if len(members) > 1:
                found.append(tuple(sorted(members)))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def cycle_through(component: tuple[str, ...], graph: Mapping[str, set[str]]) -> list[str]:
    """One concrete cycle inside a component, from its first member back to it (for the message)."""
    start, members = component[0], set(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        node = frontier.pop(0)
        for nxt in sorted(graph[node] & members):
            if nxt == start:
                return [*paths[node], start]
            if nxt not in paths:
                paths[nxt] = [*paths[node], nxt]
                frontier.append(nxt)
    return list(component)


def cycles() -> list[str]:
    graph = import_graph()
    return [" -> ".join(cycle_through(c, graph)) for c in strongly_connected(graph)]


def test_every_module_belongs_to_a_layer() -> None:
    unplaced = [m for m, _ in project_modules() if package_of(m) is None]
    assert unplaced == [m for m in unplaced if m in TOP_LEVEL or m == "pipeline"], unplaced


def test_no_package_imports_one_above_it() -> None:
    assert violations() == []


def test_no_import_cycles() -> None:
    assert cycles() == []


def test_no_product_module_reaches_the_lab() -> None:
    assert lab_violations() == []


def _plant(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: Mapping[str, str]) -> None:
    planted = []
    for module, source in files.items():
        path = tmp_path / f"{module.replace('.', '_')}.py"
        path.write_text(source)
        planted.append((module, path))
    monkeypatch.setattr(f"{__name__}.project_modules", lambda: iter(planted))


@pytest.mark.parametrize(
    ("module", "imported", "expected"),
    [
        ("pipeline.core.graph", "memtrace_loop.pipeline.analysis.blame", "not below it"),
        ("memory_systems.rag", "memtrace_loop.optimizers.base", "not below it"),
        ("experiments.factory", "memtrace_loop.pipeline.sim.world", "may reach the sim world"),
        ("pipeline.loop.runner", "pipeline.core.graph", "bare name"),
        ("experiments.run", "memtrace_loop.conf", "not below it"),
    ],
)
def test_the_checker_catches_an_upward_import(tmp_path, monkeypatch, module, imported, expected) -> None:
    _plant(tmp_path, monkeypatch, {module: f"import {imported}\n"})
    assert any(expected in line for line in violations())


@pytest.mark.parametrize("source", ["from . import blame\n", "def f():\n    from ..core import graph\n"])
def test_the_checker_catches_a_relative_import(tmp_path, monkeypatch, source) -> None:
    _plant(tmp_path, monkeypatch, {"pipeline.analysis.diagnosis": source})
    assert any("imports relatively" in line for line in violations())


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        ("pipeline.loop.runner", "import memtrace_loop.conf\n", "not below it"),
        ("pipeline.core.config", 'PATH = "pkg://memtrace_loop.conf"\n', "names the config tree"),
        ("optimizers.gepa", 'from hydra import initialize_config_module as i\ni(config_module="memtrace_loop.conf")\n',
         "names the config tree"),
    ],
)
def test_the_checker_catches_conf_from_below_the_apps(tmp_path, monkeypatch, module, source, expected) -> None:
    _plant(tmp_path, monkeypatch, {module: source})
    assert any(expected in line for line in violations())


def test_the_apps_may_hand_conf_to_hydra(tmp_path, monkeypatch) -> None:
    source = '@hydra.main(config_path="pkg://memtrace_loop.conf")\ndef f(): ...\n'
    _plant(tmp_path, monkeypatch, {"experiments.run": source})
    assert violations() == []


@pytest.mark.parametrize(
    "source",
    [
        'import importlib\nm = importlib.import_module("memtrace_loop.pipeline.sim.world")\n',
        'from importlib import import_module\ndef f(name):\n    return import_module(name)\n',
        'm = __import__("memtrace_loop.optimizers.gepa")\n',
    ],
)
def test_the_checker_catches_a_string_import_outside_registries(tmp_path, monkeypatch, source) -> None:
    _plant(tmp_path, monkeypatch, {"pipeline.loop.runner": source})
    assert any("imports by string" in line for line in violations())


def test_a_registry_line_is_checked_against_the_layers(tmp_path, monkeypatch) -> None:
    source = 'MODULES = {"x": "memtrace_loop.optimizers.gepa"}\n'
    _plant(tmp_path, monkeypatch, {"memory_systems.registry": source})
    assert any("not below it (a registry line)" in line for line in violations())


def test_a_module_that_builds_a_registry_is_one(tmp_path, monkeypatch) -> None:
    source = (
        'import importlib\nR = Registry("x", "x.name", {})\n'
        'm = importlib.import_module("memtrace_loop.optimizers.gepa")\n'
    )
    _plant(tmp_path, monkeypatch, {"optimizers.catalogue": source})
    assert violations() == []


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("experiments.cli", "from memtrace_loop.experiments.lab import docs_results\n"),
        ("experiments", "from memtrace_loop.experiments import lab\n"),
        ("conf", "import memtrace_loop.experiments.lab.compare\n"),  # above the lab's rank, still refused
        ("experiments.run", "def f():\n    from memtrace_loop.experiments.lab.bench import graph_bench\n"),
        ("optimizers.registry", 'MODULES = {"x": "memtrace_loop.experiments.lab.benchmark.scoring"}\n'),
        ("experiments.optimize", 'CB = {"_target_": "memtrace_loop.experiments.lab.compare.ComparisonCallback"}\n'),
        ("pipeline.core.registry", 'import importlib\nm = importlib.import_module("memtrace_loop.experiments.lab")\n'),
    ],
)
def test_the_checker_catches_the_product_reaching_the_lab(tmp_path, monkeypatch, module, source) -> None:
    _plant(tmp_path, monkeypatch, {module: source})
    found = lab_violations()
    assert found and all(line.startswith(f"{module} ") for line in found), found


def test_the_lab_may_import_itself_and_the_product(tmp_path, monkeypatch) -> None:
    _plant(tmp_path, monkeypatch, {
        "experiments.lab.compare": "from memtrace_loop.experiments.lab.comparison import compare_runs\n"
                                   "from memtrace_loop.experiments.config import validated_compare\n",
        "experiments.lab.bench.graph_bench": 'M = "memtrace_loop.experiments.lab.benchmark.injection"\n',
    })
    assert lab_violations() == []


def test_the_checker_catches_a_cycle_through_a_function_level_import(tmp_path, monkeypatch) -> None:
    _plant(tmp_path, monkeypatch, {
        "pipeline.loop.a": "from memtrace_loop.pipeline.loop.b import g\n",
        "pipeline.loop.b": "def g():\n    from memtrace_loop.pipeline.loop import a\n",
    })
    assert cycles() == ["pipeline.loop.a -> pipeline.loop.b -> pipeline.loop.a"]


def test_the_mapping_folder_maps_each_top_level_folder() -> None:
    """`memtrace_loop/` (what static tools follow for the prefix): one symlink per top-level folder,
    pointing at it, and no code of its own."""
    mapping = REPO / "memtrace_loop"
    entries = {p.name for p in mapping.iterdir() if p.name != "__pycache__"}
    assert entries == {*TOP_LEVEL, "__init__.py"}
    for top in TOP_LEVEL:
        link = mapping / top
        assert link.is_symlink() and link.resolve() == (REPO / top).resolve(), top
    init = tree_of(mapping / "__init__.py")
    assert all(isinstance(node, ast.Expr) for node in init.body), "the mapping's __init__ holds only its docstring"
