"""`literal_eval`: `ast.literal_eval`, one call at a time in the process.

CPython 3.11 shares the AST validator's recursion depth between threads, so concurrent calls can raise
`SystemError: AST constructor recursion depth mismatch` (gh-106905); every literal we parse takes this lock.
It does not guard other libraries' `ast` calls.
"""

from __future__ import annotations

import ast
import threading
from typing import Any

_AST_LOCK = threading.Lock()  # a process-wide guard around CPython's shared AST-validator state (see above)


def literal_eval(text: str) -> Any:
    """`ast.literal_eval(text)` under the process's AST lock (same result, same exceptions)."""
    with _AST_LOCK:
        return ast.literal_eval(text)
