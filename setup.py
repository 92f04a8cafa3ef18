"""Packaging of the fixed top-level folders under one import prefix, `memtrace_loop`.

The repository keeps the design's top level (`pipeline/`, `memory_systems/`, `optimizers/`,
`experiments/`, `conf/`), but those names are generic: installed as they are, another distribution's
`pipeline` or `conf` would overwrite ours in site-packages, or ours theirs. So the wheel (and the
editable install) maps each folder under `memtrace_loop.` — `pipeline/core/graph.py` is imported as
`memtrace_loop.pipeline.core.graph` — and no module of ours owns a bare top-level name.
The `memtrace_loop/` folder at the root (one symlink per top-level folder) is the same mapping for
static tools (mypy, editors); it is not packaged. Everything else lives in pyproject.toml; this file
only computes the package list, so a new sub-package needs no packaging edit.
"""

from setuptools import find_packages, setup

PREFIX = "memtrace_loop"
TOP_LEVEL = ("pipeline", "memory_systems", "optimizers", "experiments", "conf")

packages = find_packages(include=[f"{top}*" for top in TOP_LEVEL], exclude=[f"{PREFIX}*"])  # not the mapping folder
setup(
    packages=[f"{PREFIX}.{package}" for package in packages],
    package_dir={f"{PREFIX}.{top}": top for top in TOP_LEVEL},
    package_data={f"{PREFIX}.conf": ["**/*.yaml"]},
)
