"""The graph verifier: run after every pass, it catches a rewrite that broke the graph.

A failure here is a bug in a pass, not a user error, so it raises AssertionError-like
``GraphInvariantError`` with the node named.
"""

from __future__ import annotations

from caffe_lstm.ir.graph import Graph
from caffe_lstm.ops import get_op


class GraphInvariantError(RuntimeError):
    """A pass left the graph inconsistent (a bug: it keeps its traceback)."""


def verify(graph: Graph) -> None:
    """Every value has one producer, is defined before use, and every op is registered.

    Loop bodies are verified the same way.
    """
    defined = {id(v) for v in graph.inputs}
    for node in graph.nodes:
        if get_op(node.op) is None:
            raise GraphInvariantError(f"{node.name}: op {node.op!r} is not registered")
        for value in node.inputs:
            if id(value) not in defined and not value.is_weight:
                raise GraphInvariantError(f"{node.name}: input {value.name} used before defined")
        for value in node.outputs:
            if id(value) in defined:
                raise GraphInvariantError(f"{node.name}: output {value.name} defined twice")
            if value.producer is not node:
                raise GraphInvariantError(f"{node.name}: output {value.name} has another producer")
            defined.add(id(value))
        for body in node.subgraphs:
            verify(body)
    for value in graph.outputs:
        if id(value) not in defined:
            raise GraphInvariantError(f"graph output {value.name} is never defined")
