"""Loading the user's memory system from `memory_system.target=pkg.module:build`.

`load_target` imports, calls `build()` and checks the contract's methods; every problem is one
`ConfigError` line naming `memory_system.target`. It does not adapt the object.
"""

from __future__ import annotations

import pkgutil
from typing import Any

from memtrace_loop.memory_systems.custom.contract import UserMemorySystem
from memtrace_loop.pipeline.core.config import ConfigError

KEY = "memory_system.target"
METHODS = ("stages", "knobs", "with_knobs", "new_memory", "add_turn", "answer")


def _fail(target: str, problem: str) -> ConfigError:
    return ConfigError(f"{KEY}={target!r}: {problem}")


def resolve(target: str) -> Any:
    """The object `target` (`pkg.module:attribute`) names, imported (the user's code: a plugin path)."""
    module, sep, attribute = target.partition(":")
    if not sep or not module or not attribute:
        raise _fail(target, "expected `package.module:function` (e.g. my_pkg.my_memory:build)")
    try:
        return pkgutil.resolve_name(target)
    except ImportError as error:
        raise _fail(target, f"cannot import module {module!r} ({type(error).__name__}: {error}); "
                            "is its folder on PYTHONPATH?") from error
    except AttributeError as error:
        raise _fail(target, f"module {module!r} has no attribute {attribute!r}") from error
    except Exception as error:  # the user's module failed while being imported
        raise _fail(target, f"importing {module!r} raised {type(error).__name__}: {error}") from error


def load_target(target: str) -> UserMemorySystem:
    """`build()` of the user's module, checked against the contract."""
    build = resolve(target)
    if not callable(build):
        raise _fail(target, f"{type(build).__name__} is not callable (expected a function returning the system)")
    try:
        system = build()
    except Exception as error:
        raise _fail(target, f"build() raised {type(error).__name__}: {error}") from error
    missing = [m for m in METHODS if not callable(getattr(system, m, None))]
    if missing or not isinstance(system, UserMemorySystem):
        raise _fail(target, f"build() returned a {type(system).__name__} without the methods {missing} "
                            "of the custom memory-system contract (docs/custom_system.md)")
    return system
