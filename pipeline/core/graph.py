"""The execution graph: a bipartite, append-only DAG of versioned variables and operations.

Invariants are enforced on every append (one producer per variable, fresh outputs, so acyclic); indexes make
producer, consumers, versions, ancestors and descendants cost O(answer). It knows no DSPy, memory systems
or files.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from memtrace_loop.pipeline.core.conventions import OpKind, OpStatus, VarKind, as_var_kind

__all__ = [
    "EMPTY", "NO_USAGE", "ExecutionGraph", "GraphError", "OpKind", "OpStatus", "Operation", "Usage",
    "VarKind", "Variable", "variable_id"
]

EMPTY: Mapping[str, Any] = MappingProxyType({})


class GraphError(ValueError):
    """An append would break an invariant, or a query names a node that is not in the graph."""


@dataclass(frozen=True, slots=True)
class Variable:
    """One version of a named value."""

    id: str
    name: str
    version: int
    kind: VarKind | str
    value: str
    previous: str | None = None
    meta: Mapping[str, Any] = field(default_factory=lambda: EMPTY)


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0
    cached_calls: int = 0


@dataclass(frozen=True, slots=True)
class Operation:
    """One execution of a stage. `status` is ok or failed (then `error` says why)."""

    id: str
    seq: int
    name: str
    stage: str
    kind: OpKind
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    prompt: str | None = None
    status: OpStatus = OpStatus.OK
    error: str | None = None
    usage: Usage = field(default_factory=Usage)
    meta: Mapping[str, Any] = field(default_factory=lambda: EMPTY)

    @property
    def failed(self) -> bool:
        return self.status != OpStatus.OK


NO_USAGE = Usage()


def _frozen(meta: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if not meta:
        return EMPTY
    return meta if isinstance(meta, MappingProxyType) else MappingProxyType(dict(meta))


def variable_id(name: str, version: int) -> str:
    return f"{name}@{version}"


class ExecutionGraph:
    """Append-only bipartite DAG with indexes. Not thread-safe: one writer per graph."""

    def __init__(self, graph_id: str = "graph", meta: Mapping[str, Any] | None = None) -> None:
        self.graph_id = graph_id
        self.meta: dict[str, Any] = dict(meta or {})
        self._variable_by_id: dict[str, Variable] = {}
        self._operation_by_id: dict[str, Operation] = {}
        self._operations: list[Operation] = []
        self._versions_by_name: dict[str, list[str]] = {}
        self._producer_by_variable: dict[str, str] = {}
        self._consumers_by_variable: dict[str, list[str]] = {}
        self._next_seq = 0

    # ----------------------------------------------------------------- appending

    def add_variable(
        self, name: str, kind: VarKind | str, value: str, meta: Mapping[str, Any] | None = None
    ) -> Variable:
        """Append the next version of `name` (version 1 if new), linked to the previous version."""
        versions = self._versions_by_name.get(name)
        if versions is None:
            versions = self._versions_by_name[name] = []
            previous = None
        else:
            previous = versions[-1]
        version = len(versions) + 1
        var = Variable(variable_id(name, version), name, version, as_var_kind(kind), value, previous, _frozen(meta))
        versions.append(var.id)
        self._variable_by_id[var.id] = var
        return var

    def add_operation(
        self, name: str, stage: str, kind: OpKind, inputs: Iterable[str], outputs: Iterable[str],
        prompt: str | None = None, status: OpStatus | str = OpStatus.OK, error: str | None = None,
        usage: Usage | None = None, meta: Mapping[str, Any] | None = None,
    ) -> Operation:
        """Append an operation. Inputs must exist; outputs must exist, be unproduced and unconsumed."""
        input_ids = tuple(dict.fromkeys(inputs))
        output_ids = tuple(dict.fromkeys(outputs))
        variables = self._variable_by_id
        for var_id in input_ids:
            if var_id not in variables:
                raise GraphError(f"operation {name!r}: input {var_id!r} is not in graph {self.graph_id!r}")
        if prompt is not None and prompt not in variables:
            raise GraphError(f"operation {name!r}: prompt {prompt!r} is not in graph {self.graph_id!r}")
        producers = self._producer_by_variable
        consumers = self._consumers_by_variable
        for var_id in output_ids:
            if var_id not in variables:
                raise GraphError(f"operation {name!r}: output {var_id!r} is not in graph {self.graph_id!r}")
            if var_id in producers:
                raise GraphError(f"operation {name!r}: output {var_id!r} already has producer {producers[var_id]}")
            if var_id in consumers or var_id in input_ids:
                raise GraphError(f"operation {name!r}: output {var_id!r} is already consumed (would form a cycle)")
        seq = self._next_seq
        self._next_seq += 1
        op = Operation(
            f"op:{seq}", seq, name, stage, OpKind(kind), input_ids, output_ids, prompt, OpStatus(status), error,
            usage or NO_USAGE, _frozen(meta),
        )
        self._store_operation(op)
        return op

    def copy(self) -> ExecutionGraph:
        """An independent graph with the same content (records are immutable, so this is cheap)."""
        twin = ExecutionGraph(self.graph_id, self.meta)
        twin._variable_by_id = dict(self._variable_by_id)
        twin._operation_by_id = dict(self._operation_by_id)
        twin._operations = list(self._operations)
        twin._versions_by_name = {name: list(ids) for name, ids in self._versions_by_name.items()}
        twin._producer_by_variable = dict(self._producer_by_variable)
        twin._consumers_by_variable = {var: list(ops) for var, ops in self._consumers_by_variable.items()}
        twin._next_seq = self._next_seq
        return twin

    def _store_operation(self, op: Operation) -> None:
        self._operation_by_id[op.id] = op
        self._operations.append(op)
        for var_id in op.outputs:
            self._producer_by_variable[var_id] = op.id
        consumers = self._consumers_by_variable
        for var_id in op.inputs:
            consumers.setdefault(var_id, []).append(op.id)
        if op.prompt is not None:
            consumers.setdefault(op.prompt, []).append(op.id)

    # ----------------------------------------------------------------- lookups

    def __contains__(self, node_id: str) -> bool:
        return node_id in self._variable_by_id or node_id in self._operation_by_id

    def variable(self, var_id: str) -> Variable:
        try:
            return self._variable_by_id[var_id]
        except KeyError:
            raise GraphError(f"no variable {var_id!r} in graph {self.graph_id!r}") from None

    def operation(self, op_id: str) -> Operation:
        try:
            return self._operation_by_id[op_id]
        except KeyError:
            raise GraphError(f"no operation {op_id!r} in graph {self.graph_id!r}") from None

    def variables(self) -> Iterator[Variable]:
        return iter(self._variable_by_id.values())

    def operations(self) -> Iterator[Operation]:
        """Operations in sequence order."""
        return iter(self._operations)

    @property
    def n_variables(self) -> int:
        return len(self._variable_by_id)

    @property
    def n_operations(self) -> int:
        return len(self._operations)

    @property
    def n_edges(self) -> int:
        """Data-flow edges: one per (input, operation) and (operation, output), prompts included."""
        return sum(len(op.inputs) + len(op.outputs) + (op.prompt is not None) for op in self._operations)

    def producer(self, var_id: str) -> Operation | None:
        self.variable(var_id)
        op_id = self._producer_by_variable.get(var_id)
        return None if op_id is None else self._operation_by_id[op_id]

    def consumers(self, var_id: str) -> tuple[Operation, ...]:
        self.variable(var_id)
        return tuple(self._operation_by_id[o] for o in self._consumers_by_variable.get(var_id, ()))

    def versions(self, name: str) -> tuple[Variable, ...]:
        """Every version of a named value, oldest first."""
        return tuple(self._variable_by_id[v] for v in self._versions_by_name.get(name, ()))

    def latest(self, name: str) -> Variable | None:
        versions = self._versions_by_name.get(name)
        return self._variable_by_id[versions[-1]] if versions else None

    def names(self, prefix: str = "") -> tuple[str, ...]:
        return tuple(n for n in self._versions_by_name if n.startswith(prefix))

    # ----------------------------------------------------------------- traversals

    def ancestors(self, node_id: str, include_prompts: bool = False) -> frozenset[str]:
        """Every variable and operation id upstream of `node_id` (BFS over producers and inputs)."""

        def upstream(node: str) -> Iterable[str]:
            op = self._operation_by_id.get(node)
            if op is None:
                producer = self._producer_by_variable.get(node)
                return () if producer is None else (producer,)
            return (*op.inputs, op.prompt) if include_prompts and op.prompt is not None else op.inputs

        return self._reach(node_id, upstream)

    def descendants(self, node_id: str) -> frozenset[str]:
        """Every variable and operation id downstream of `node_id` (prompt use counts as input)."""

        def downstream(node: str) -> Iterable[str]:
            op = self._operation_by_id.get(node)
            return op.outputs if op is not None else self._consumers_by_variable.get(node, ())

        return self._reach(node_id, downstream)

    def _reach(self, node_id: str, step: Callable[[str], Iterable[str]]) -> frozenset[str]:
        if node_id not in self:
            raise GraphError(f"no node {node_id!r} in graph {self.graph_id!r}")
        seen: set[str] = set()
        queue = deque([node_id])
        while queue:
            for nxt in step(queue.popleft()):
                if nxt not in seen:
                    seen.add(nxt)
                    queue.append(nxt)
        return frozenset(seen)

    def lineage(self, name: str) -> tuple[Operation, ...]:
        """The operations that produced each version of `name`, oldest first (a memory unit's life)."""
        found = (self._producer_by_variable.get(v) for v in self._versions_by_name.get(name, ()))
        return tuple(self._operation_by_id[o] for o in found if o is not None)

    def check(self) -> None:
        """Re-verify every invariant from scratch (used by tests and after loading)."""
        produced: dict[str, str] = {}
        last_seq = -1
        for op in self._operations:
            if op.seq <= last_seq:
                raise GraphError(f"{op.id}: sequence numbers are not increasing")
            last_seq = op.seq
            for v in (*op.inputs, *((op.prompt,) if op.prompt else ())):
                if v not in self._variable_by_id:
                    raise GraphError(f"{op.id}: unknown input {v}")
                if v in produced and self._operation_by_id[produced[v]].seq >= op.seq:
                    raise GraphError(f"{op.id}: consumes {v} before it is produced")
            for v in op.outputs:
                if v not in self._variable_by_id:
                    raise GraphError(f"{op.id}: unknown output {v}")
                if v in produced:
                    raise GraphError(f"{v} has two producers: {produced[v]} and {op.id}")
                produced[v] = op.id
        for name, versions in self._versions_by_name.items():
            for i, var_id in enumerate(versions):
                var = self._variable_by_id[var_id]
                expected_previous = versions[i - 1] if i else None
                if var.version != i + 1 or var.previous != expected_previous or var.name != name:
                    raise GraphError(f"{var_id}: broken version chain of {name!r}")
