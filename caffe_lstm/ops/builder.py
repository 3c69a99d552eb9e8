"""NodeBuilder: appends nodes for a rewrite, one helper per Caffe layer type it needs.

Every node it makes is named ``__<origin>/<name>`` (inserted by a rewrite) and remembers the
layer it came from; its output value is called ``<origin>/<name>`` after Caffe's unrolled blobs.
Helpers return a single Value, or a tuple for multi-output layers such as Slice. The attributes
come from each op's own ``make_attrs``, so their names live in the op class only.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from caffe_lstm.ir.graph import Graph, Node, Value
from caffe_lstm.ops.activation import Clip, ReLU
from caffe_lstm.ops.data import DummyData
from caffe_lstm.ops.elementwise import Eltwise, Scale
from caffe_lstm.ops.linear import InnerProduct
from caffe_lstm.ops.registry import get_op
from caffe_lstm.ops.shape import Concat, Reshape, Slice


class NodeBuilder:
    """Appends nodes to ``graph`` on behalf of the Caffe layer ``origin``."""

    def __init__(self, graph: Graph, origin: str, where: str = "") -> None:
        self.graph, self.origin, self.where = graph, origin, where
        #: ``id(node)`` -> ``file:line`` of the ``add`` call that built it (outside this module),
        #: for the errors of an expansion's layers that the shapes refuse.
        self.sites: dict[int, str] = {}

    def add(self, op: str, name: str, inputs: Sequence[Value], attrs: dict[str, Any] | None = None,
            weights: Sequence[Value] = (), tops: Sequence[str] | None = None,
            outputs: Sequence[Value] | None = None) -> list[Value]:
        """Appends one node; returns its output values (new ones named after ``tops``, or the
        given ``outputs``, e.g. the tops of the layer being replaced).

        Raises:
            TypeError: arguments of the wrong kind (a caller's bug: an expand facet's)."""
        if outputs is None:
            outputs = [Value(f"{self.origin}/{top}") for top in (tops or [name])]
        _check_arguments(op, name, inputs, attrs, weights, outputs)
        node = Node(f"__{self.origin}/{name}", op, list(inputs), list(outputs), dict(attrs or {}),
                    list(weights), origin=self.origin, where=self.where)
        self.graph.nodes.append(node)
        self.sites[id(node)] = _caller()
        return outputs

    def inner_product(self, name: str, x: Value, w: Value, b: Value | None = None,
                      axis: int = 2, top: str | None = None) -> Value:
        """y = x·Wᵀ (+ b) over ``axis``; the output is called ``top`` (default ``name``)."""
        attrs = InnerProduct.make_attrs(w.shape[0], bias_term=b is not None, axis=axis)
        weights = [w] + ([b] if b is not None else [])
        return self.add("InnerProduct", name, [x], attrs, weights, tops=[top or name])[0]

    def scale(self, name: str, x: Value, factor: Value, axis: int = 0) -> Value:
        """Caffe's two-bottom Scale: x times factor broadcast from ``axis`` on."""
        return self.add("Scale", name, [x, factor], Scale.make_attrs(axis=axis))[0]

    def learned_scale(self, name: str, x: Value, factor: Value, axis: int) -> Value:
        """Caffe's one-bottom Scale: x times the learned blob ``factor`` from ``axis`` on."""
        return self.add("Scale", name, [x], Scale.make_attrs(axis=axis), [factor])[0]

    def eltwise(self, name: str, operation: str, *xs: Value) -> Value:
        return self.add("Eltwise", name, list(xs), Eltwise.make_attrs(operation))[0]

    def unary(self, op: str, name: str, x: Value) -> Value:
        """Sigmoid, TanH (and other attribute-free pointwise layers)."""
        return self.add(op, name, [x], {})[0]

    def relu(self, name: str, x: Value) -> Value:
        return self.add("ReLU", name, [x], ReLU.make_attrs())[0]

    def clip(self, name: str, x: Value, low: float, high: float) -> Value:
        """Caffe's Clip layer: y = max(min(x, high), low)."""
        return self.add("Clip", name, [x], Clip.make_attrs(low, high))[0]

    def slice(self, name: str, x: Value, axis: int, parts: Sequence[str]) -> tuple[Value, ...]:
        """Even split of ``axis`` into ``len(parts)`` tops named ``<name>_<part>``."""
        tops = [f"{name}_{part}" for part in parts]
        return tuple(self.add("Slice", name, [x], Slice.make_attrs(axis), tops=tops))

    def slice_tops(self, name: str, x: Value, axis: int, tops: Sequence[str]) -> list[Value]:
        """Even split of ``axis`` into tops with the given names."""
        return self.add("Slice", name, [x], Slice.make_attrs(axis), tops=tops)

    def concat(self, name: str, xs: Sequence[Value], axis: int, output: Value) -> Value:
        return self.add("Concat", name, list(xs), Concat.make_attrs(axis), outputs=[output])[0]

    def split(self, name: str, x: Value, output: Value) -> Value:
        return self.add("Split", name, [x], {}, outputs=[output])[0]

    def constant(self, name: str, shape: Sequence[int], value: float) -> Value:
        """A DummyData of one constant top."""
        return self.add("DummyData", name, [], DummyData.make_attrs([list(shape)], [value]))[0]

    def reshape(self, name: str, x: Value, dims: Sequence[int],
                output: Value | None = None) -> Value:
        attrs = Reshape.make_attrs(list(dims))
        return self.add("Reshape", name, [x], attrs, outputs=[output] if output else None)[0]


def _check_arguments(op: str, name: str, inputs: Sequence[Value], attrs: Any,
                     weights: Sequence[Value], outputs: Sequence[Value]) -> None:
    """What ``add`` can check before any shape is known: a registered type, Values where
    Values belong, attrs a dict of names, and as many bottoms and tops as the type takes."""
    op_class = get_op(op) if isinstance(op, str) else None
    if op_class is None:
        raise TypeError(f"add({op!r}, {name!r}): no layer type {op!r} is registered")
    if attrs is not None and (not isinstance(attrs, dict)
                              or not all(isinstance(key, str) for key in attrs)):
        raise TypeError(f"add({op!r}, {name!r}): attrs must be a dict of attribute names, "
                        f"not {attrs!r:.60}")
    for kind, values in (("inputs", inputs), ("weights", weights), ("outputs", outputs)):
        if isinstance(values, Value) or not all(isinstance(v, Value) for v in values):
            raise TypeError(f"add({op!r}, {name!r}): {kind} must be a list of Values, not "
                            f"{values!r:.60}")
    for kind, found, (low, high) in (("bottoms", len(inputs), op_class.n_bottoms),
                                     ("tops", len(outputs), op_class.n_tops)):
        if found < low or (high is not None and found > high):
            allowed = f"{low}" if low == high else f"{low} to {high if high else 'any'}"
            raise TypeError(f"add({op!r}, {name!r}): {found} {kind}, a {op} layer takes "
                            f"{allowed}")


def _caller() -> str:
    """``file:line`` of the innermost frame outside this module (who called ``add``)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename == __file__:
        frame = frame.f_back
    return f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else ""
