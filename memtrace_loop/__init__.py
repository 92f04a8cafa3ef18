"""The `memtrace_loop` prefix mapped onto the repository's top-level folders, for static tools.

The project keeps its design's top level (`pipeline/`, `memory_systems/`, `optimizers/`,
`experiments/`, `conf/`) and imports every module under the prefix (`memtrace_loop.pipeline.core.graph`)
so that no generic name lands in site-packages (setup.py). The editable install resolves the prefix
with an import hook, which static tools (mypy, editors, structure tools) cannot see; this folder holds
one directory symlink per top-level folder so they can follow `memtrace_loop.<top>...` to the source
files. At run time from the repository root it is an ordinary package whose submodules are those same
files (one module object per name either way); the wheel does not contain this folder (setup.py maps
the top-level folders itself). It holds no code: add nothing here but a symlink for a new top-level folder.
"""
