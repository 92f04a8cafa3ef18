"""`literal_eval`: `ast.literal_eval`, one call at a time in the process.

CPython 3.11 keeps the AST validator's recursion depth in interpreter state that threads share, so two
threads inside `ast.literal_eval` (or `ast.parse`) at once can raise `SystemError: AST constructor
recursion depth mismatch` (seen here on 3.11.7, CPython gh-106905): in the simulated world that was one
mem0ai decision call failing at random under load (the stand-in parses mem0's Python-literal blocks from
several ingesting threads). Every literal we parse goes through this lock. It does not guard other
libraries' own `ast` calls and does not change what a literal evaluates to.

>>> literal_eval("[{'id': '0', 'text': 'Ada likes tea'}]")
[{'id': '0', 'text': 'Ada likes tea'}]
"""

from __future__ import annotations

import ast
import threading
from typing import Any

__all__ = ["literal_eval"]

_AST_LOCK = threading.Lock()  # a process-wide guard around CPython's shared AST-validator state (see above)


def literal_eval(text: str) -> Any:
    """`ast.literal_eval(text)` under the process's AST lock (same result, same exceptions)."""
    with _AST_LOCK:
        return ast.literal_eval(text)
