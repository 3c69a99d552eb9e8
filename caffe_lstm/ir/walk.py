"""The one walk skeleton: feed a graph's inputs, visit its nodes in order, collect its outputs.

Every walker (shape inference, the numpy executor, the TensorRT emitter, the ONNX exporter,
the Caffe writer) subclasses ``GraphWalker`` and is itself the ``ctx`` it hands to the op
facet it calls (docs/ops.md): ``visit`` calls ``get_op(node.op).<facet>(self, node, ...)``.
An op holding a subgraph (a Loop) walks its body through ``ctx.run_subgraph``, a method of
the walker that calls ``walk`` again. What travels along the edges (``T``) is the walker's:
shapes, arrays, ITensors, ONNX tensor names, blob names. A walker given a ``progress`` callback
reports each node of the outermost graph as it is done (a loop body's nodes are part of their
loop's node).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import ClassVar, Generic, TypeVar

from caffe_lstm.ir.graph import Graph, Node

T = TypeVar("T")

#: ``progress(phase, done, total)``: ``done`` of the ``total`` units of ``phase`` are finished
#: (a library never prints: the caller shows it, e.g. the CLI's progress bar on a terminal).
Progress = Callable[[str, int, int], None]


def labelled(progress: Progress | None, label: str) -> Progress | None:
    """``progress`` telling its phases as ``<label>: <phase>`` (one of several runs); None
    stays None."""
    if progress is None:
        return None
    return lambda phase, done, total: progress(f"{label}: {phase}", done, total)


class GraphWalker(ABC, Generic[T]):
    """A walk over a graph in node order; subclasses define ``visit`` and ``run_subgraph``."""

    #: The op facet ``visit`` calls with the walker as ``ctx`` ("infer", "numpy", ...).
    facet: ClassVar[str] = ""
    #: Told of each node of the outermost graph once it is done, as ("layers", done, total).
    progress: Progress | None = None
    #: How many walks are under way: 1 while the outermost graph's nodes are visited.
    depth: int = 0

    def walk(self, graph: Graph, inputs: Sequence[T]) -> list[T]:
        """Walks ``graph`` given one item per graph input; returns one per graph output."""
        env = self.walk_values(graph, inputs)
        return [env[id(value)] for value in graph.outputs]

    def walk_values(self, graph: Graph, inputs: Sequence[T]) -> dict[int, T]:
        """Walks ``graph`` given one item per graph input; returns the item of every value
        walked, by ``id(value)`` (inputs and node outputs)."""
        env: dict[int, T] = {id(value): item for value, item in zip(graph.inputs, inputs)}
        report = self.progress if self.depth == 0 else None
        self.depth += 1
        try:
            for done, node in enumerate(graph.nodes, 1):
                results = self.visit(node, [env[id(value)] for value in node.inputs])
                if len(results) != len(node.outputs):  # an op's bug: say which, not a KeyError
                    raise TypeError(f"{node.op} node {node.name}: {self.facet or 'visit'} gave "
                                    f"{len(results)} result(s) for {len(node.outputs)} top(s)")
                for value, item in zip(node.outputs, results):
                    env[id(value)] = item
                if report is not None:
                    report("layers", done, len(graph.nodes))
        finally:
            self.depth -= 1
        return env

    @abstractmethod
    def visit(self, node: Node, inputs: list[T]) -> Sequence[T]:
        """Calls the node's op facet on ``inputs`` (the bottoms' items); one item per top."""
