"""Shape inference: one walk over the nodes in order, calling each op's ``infer`` facet.

It also gives every node the weight values its op expects (named, shaped, without data until
weights are attached), so ``inspect`` can show parameter shapes without a caffemodel. An op
holding a subgraph (a Loop) gets the walker as ``ctx`` and shapes its body through
``ctx.run_subgraph``.
"""

from __future__ import annotations

import numpy as np

from caffe_lstm.analysis.limits import check_dims
from caffe_lstm.errors import CaffeLstmError, ShapeError
from caffe_lstm.ir.graph import Graph, Node, Shape, Value
from caffe_lstm.ir.walk import GraphWalker
from caffe_lstm.ops import get_op
from caffe_lstm.ops.plugins import checked_results


def infer_shapes(graph: Graph, allow_unknown: bool = False,
                 walker: ShapeInference | None = None) -> Graph:
    """Sets ``shape`` on every value of ``graph`` and creates missing weight values.

    Args:
        graph: the graph to shape.
        allow_unknown: net inputs may lack a shape (a train net's data layer that the prototxt
            does not size); every value computed from one stays unknown (None), and its node
            gets no weight values, so ``inspect`` can show the shapes that are known.
        walker: the inference to walk with (a subclass that sets some shapes itself: the
            exposed states of ``profiles``); None: ``ShapeInference(allow_unknown)``.

    Raises:
        ShapeError: a net input without a shape (unless allowed), or a layer that rejects its
            bottoms.
    """
    for value in graph.inputs:
        if value.shape is not None or not allow_unknown:
            _check_input_shape(value)
    # (walk_values: a net output may be an input that no layer reads, so not among the inputs)
    walker = walker or ShapeInference(allow_unknown)
    walker.walk_values(graph, [value.shape for value in graph.inputs])
    return graph


class ShapeInference(GraphWalker[Shape | None]):
    """The walker calling each node's ``infer`` facet in order (the context handed to Loop
    ops); what travels along the edges are shapes (None: unknown, with ``allow_unknown``)."""

    facet = "infer"

    def __init__(self, allow_unknown: bool = False) -> None:
        self.allow_unknown = allow_unknown

    def run_subgraph(self, graph: Graph, input_shapes: list[Shape]) -> list[Shape]:
        """Shapes ``graph`` (a loop body) from its inputs' shapes; returns its outputs' shapes."""
        for value, shape in zip(graph.inputs, input_shapes):
            value.shape = tuple(shape)
        return self.walk(graph, [value.shape for value in graph.inputs])

    def visit(self, node: Node, shapes: list[Shape | None]) -> list[Shape | None]:
        """Sets the shapes of the node's tops (and creates its weight values)."""
        if self.allow_unknown and any(shape is None for shape in shapes):
            for value in node.outputs:
                value.shape = None
        else:
            self._infer(node, shapes)
        return [value.shape for value in node.outputs]

    def _infer(self, node: Node, shapes: list[Shape | None]) -> None:
        op = get_op(node.op)
        if any(shape is None for shape in shapes):
            missing = [v.name for v in node.inputs if v.shape is None]
            raise ShapeError(f"bottom {missing[0]} has no known shape", node.label, "")
        try:
            out_shapes = op.infer(self, node, *shapes)
            expected = op.blobs(self, node, *shapes)
        except CaffeLstmError:
            raise
        except Exception as exc:
            # A bug, not a user error: keep the traceback, but say which node it was.
            exc.add_note(f"while inferring shapes of {node.name} ({node.op})")
            raise
        out_shapes = checked_results(node, "infer", out_shapes, _is_shape,
                                     "shape (a tuple of ints)")
        _check_result_dims(node, out_shapes, expected)
        for value, shape in zip(node.outputs, out_shapes):
            value.shape = tuple(int(d) for d in shape)
        _ensure_weights(node, expected)


def _is_shape(item: object) -> bool:
    return isinstance(item, (tuple, list)) and all(
        isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in item)


def _check_input_shape(value: Value) -> None:
    if value.shape is None:
        raise ShapeError(f"net input '{value.name}' has no shape", "",
                         "give it a shape in the prototxt (an Input layer's input_param)")
    check_dims(value.shape, f"net input '{value.name}'", "")


def _check_result_dims(node: Node, out_shapes, expected) -> None:
    """Tops and weights with negative or absurd dims (a Reshape, a DummyData shape, a huge
    num_output) are rejected here, before anything of that shape is allocated."""
    for value, shape in zip(node.outputs, out_shapes):
        check_dims(shape, f"top '{value.name}'", node.label)
    for name, shape in expected:
        check_dims(shape, f"blob '{name}'", node.label)


def _ensure_weights(node: Node, expected: tuple[tuple[str, tuple[int, ...]], ...]) -> None:
    if not node.weights:
        node.weights = [
            Value(f"{node.name}/{name}", tuple(shape), is_weight=True) for name, shape in expected
        ]
        return
    for value, (_, shape) in zip(node.weights, expected):
        if value.data is not None and tuple(value.data.shape) != tuple(shape):
            raise ShapeError(
                f"blob '{value.name}' has shape {tuple(value.data.shape)}, the bottoms need "
                f"{tuple(shape)}", node.label, "check the input shapes against the weights")
        value.shape = tuple(shape)
