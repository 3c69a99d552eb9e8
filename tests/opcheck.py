"""Test helper: run one op's facets on arrays, checking that ``infer`` agrees with ``numpy``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from caffe_lstm.ir.graph import Node, Value
from caffe_lstm.ops import get_op


def make_node(op_type: str, attrs: dict[str, Any], shapes: Sequence[tuple[int, ...]],
              n_tops: int = 1, name: str = "layer") -> Node:
    """A node of ``op_type`` whose bottoms have ``shapes`` (outputs not yet shaped)."""
    inputs = [Value(f"bottom{i}", tuple(s)) for i, s in enumerate(shapes)]
    outputs = [Value(f"top{i}") for i in range(n_tops)]
    return Node(name, op_type, inputs, outputs, dict(attrs))


def run_op(op_type: str, attrs: dict[str, Any], inputs: Sequence[np.ndarray],
           weights: Sequence[np.ndarray] = (), n_tops: int = 1) -> tuple[np.ndarray, ...]:
    """Infers shapes and blob shapes, checks them against the arrays, and runs ``numpy``."""
    op = get_op(op_type)
    node = make_node(op_type, attrs, [np.shape(x) for x in inputs], n_tops)
    out_shapes = op.infer(None, node, *[v.shape for v in node.inputs])
    blob_shapes = [shape for _, shape in op.blobs(None, node, *[v.shape for v in node.inputs])]
    weight_shapes = [np.shape(w) for w in weights]
    assert blob_shapes == weight_shapes, (blob_shapes, weight_shapes)
    arrays = [np.asarray(a, np.float32) for a in [*inputs, *weights]]
    results = op.numpy(None, node, *arrays)
    assert [tuple(s) for s in out_shapes] == [np.shape(r) for r in results]
    return tuple(results)
