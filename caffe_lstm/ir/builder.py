"""GraphBuilder: appends nodes for a rewrite, one helper per Caffe layer type it needs.

Every node it makes is named ``__<origin>/<name>`` (inserted by a rewrite) and remembers the
layer it came from; its output value is called ``<origin>/<name>`` after Caffe's unrolled blobs.
Helpers return a single Value, or a tuple for multi-output layers such as Slice.
"""

from __future__ import annotations

from typing import Any, Sequence

from caffe_lstm.ir.graph import Graph, Node, Value


class GraphBuilder:
    """Appends nodes to ``graph`` on behalf of the Caffe layer ``origin``."""

    def __init__(self, graph: Graph, origin: str, where: str = "") -> None:
        self.graph, self.origin, self.where = graph, origin, where

    def add(self, op: str, name: str, inputs: Sequence[Value], attrs: dict[str, Any] | None = None,
            weights: Sequence[Value] = (), tops: Sequence[str] | None = None,
            outputs: Sequence[Value] | None = None) -> list[Value]:
        """Appends one node; returns its output values (new ones named after ``tops``, or the
        given ``outputs``, e.g. the tops of the layer being replaced)."""
        if outputs is None:
            outputs = [Value(f"{self.origin}/{top}") for top in (tops or [name])]
        node = Node(f"__{self.origin}/{name}", op, list(inputs), list(outputs), dict(attrs or {}),
                    list(weights), origin=self.origin, where=self.where)
        self.graph.nodes.append(node)
        return outputs

    def inner_product(self, name: str, x: Value, w: Value, b: Value | None = None,
                      axis: int = 2, top: str | None = None) -> Value:
        """y = x·Wᵀ (+ b) over ``axis``; the output is called ``top`` (default ``name``)."""
        attrs = {"num_output": w.shape[0], "bias_term": b is not None, "axis": axis,
                 "transpose": False}
        weights = [w] + ([b] if b is not None else [])
        return self.add("InnerProduct", name, [x], attrs, weights, tops=[top or name])[0]

    def scale(self, name: str, x: Value, factor: Value, axis: int = 0) -> Value:
        """Caffe's two-bottom Scale: x times factor broadcast from ``axis`` on."""
        attrs = {"axis": axis, "num_axes": 1, "bias_term": False}
        return self.add("Scale", name, [x, factor], attrs)[0]

    def eltwise(self, name: str, operation: str, *xs: Value) -> Value:
        return self.add("Eltwise", name, list(xs), {"operation": operation, "coeff": []})[0]

    def unary(self, op: str, name: str, x: Value) -> Value:
        """Sigmoid, TanH (and other attribute-free pointwise layers)."""
        return self.add(op, name, [x], {})[0]

    def slice(self, name: str, x: Value, axis: int, parts: Sequence[str]) -> tuple[Value, ...]:
        """Even split of ``axis`` into ``len(parts)`` tops named ``<name>_<part>``."""
        tops = [f"{name}_{part}" for part in parts]
        return tuple(self.add("Slice", name, [x], {"axis": axis, "slice_point": []}, tops=tops))

    def reshape(self, name: str, x: Value, dims: Sequence[int],
                output: Value | None = None) -> Value:
        attrs = {"shape": list(dims), "axis": 0, "num_axes": -1}
        return self.add("Reshape", name, [x], attrs, outputs=[output] if output else None)[0]
