"""The one walk skeleton: feed a graph's inputs, visit its nodes in order, collect its outputs.

Every walker (shape inference, the numpy executor, the TensorRT emitter, the ONNX exporter,
the Caffe writer) subclasses ``GraphWalker`` and is itself the ``ctx`` it hands to the op
facet it calls (docs/ops.md): ``visit`` calls ``get_op(node.op).<facet>(self, node, ...)``.
An op holding a subgraph (a Loop) walks its body through ``ctx.run_subgraph``, a method of
the walker that calls ``walk`` again. What travels along the edges (``T``) is the walker's:
shapes, arrays, ITensors, ONNX tensor names, blob names.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar, Generic, TypeVar

from caffe_lstm.ir.graph import Graph, Node

T = TypeVar("T")


class GraphWalker(ABC, Generic[T]):
    """A walk over a graph in node order; subclasses define ``visit`` and ``run_subgraph``."""

    #: The op facet ``visit`` calls with the walker as ``ctx`` ("infer", "numpy", ...).
    facet: ClassVar[str] = ""

    def walk(self, graph: Graph, inputs: Sequence[T]) -> list[T]:
        """Walks ``graph`` given one item per graph input; returns one per graph output."""
        env = self.walk_values(graph, inputs)
        return [env[id(value)] for value in graph.outputs]

    def walk_values(self, graph: Graph, inputs: Sequence[T]) -> dict[int, T]:
        """Walks ``graph`` given one item per graph input; returns the item of every value
        walked, by ``id(value)`` (inputs and node outputs)."""
        env: dict[int, T] = {id(value): item for value, item in zip(graph.inputs, inputs)}
        for node in graph.nodes:
            results = self.visit(node, [env[id(value)] for value in node.inputs])
            if len(results) != len(node.outputs):  # an op's bug: say which, not a KeyError later
                raise TypeError(f"{node.op} node {node.name}: {self.facet or 'visit'} gave "
                                f"{len(results)} result(s) for {len(node.outputs)} top(s)")
            for value, item in zip(node.outputs, results):
                env[id(value)] = item
        return env

    @abstractmethod
    def visit(self, node: Node, inputs: list[T]) -> Sequence[T]:
        """Calls the node's op facet on ``inputs`` (the bottoms' items); one item per top."""
