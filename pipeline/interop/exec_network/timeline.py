"""Timestamps for an ExecNetwork export: one consistent clock over our variables and operations.

`timeline(graph)` gives every record a distinct tick (operations in sequence order, after their inputs and
before their outputs); `Clock(base).stamp(tick)` renders it as smartcomment's `created_at`. It writes no document.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from memtrace_loop.pipeline.core.graph import ExecutionGraph

SECOND_FORMAT = "%Y-%m-%d %H:%M:%S"  # then ".mmm"


@dataclass(frozen=True)
class Timeline:
    """The tick of each variable id and each operation id (distinct, consistent; see the module doc)."""

    tick_by_variable: dict[str, int]
    tick_by_operation: dict[str, int]


def timeline(graph: ExecutionGraph) -> Timeline:
    """Ticks for every variable and operation of `graph` (see the module doc)."""
    tick_by_variable: dict[str, int] = {}
    tick_by_operation: dict[str, int] = {}
    operations = list(graph.operations())
    next_op = 0

    def mark(var_id: str) -> None:
        if var_id not in tick_by_variable:
            tick_by_variable[var_id] = len(tick_by_variable) + len(tick_by_operation)

    def run_operations_through(seq_position: int) -> None:
        nonlocal next_op
        while next_op <= seq_position:
            op = operations[next_op]
            for var_id in (*((op.prompt,) if op.prompt else ()), *op.inputs):
                mark(var_id)
            tick_by_operation[op.id] = len(tick_by_variable) + len(tick_by_operation)
            for var_id in op.outputs:
                mark(var_id)
            next_op += 1

    position_by_op = {op.id: i for i, op in enumerate(operations)}
    for var in graph.variables():
        if var.id in tick_by_variable:
            continue
        producer = graph.producer(var.id)
        if producer is None:
            mark(var.id)
        else:
            run_operations_through(position_by_op[producer.id])
    run_operations_through(len(operations) - 1)
    return Timeline(tick_by_variable, tick_by_operation)


class Clock:
    """Ticks rendered as smartcomment writes `created_at`: `base` plus `tick` milliseconds."""

    def __init__(self, base: datetime) -> None:
        self._base_second = base.replace(microsecond=0)
        self._base_milliseconds = base.microsecond // 1000
        self._text_by_second: dict[int, str] = {}

    def stamp(self, tick: int) -> str:
        second, milliseconds = divmod(self._base_milliseconds + tick, 1000)
        text = self._text_by_second.get(second)
        if text is None:
            text = (self._base_second + timedelta(seconds=second)).strftime(SECOND_FORMAT)
            self._text_by_second[second] = text
        return f"{text}.{milliseconds:03d}"
