"""Test helper: run one op's ``onnx`` facet in onnxruntime, on its own (no exporter needed)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from caffe_lstm.backends.onnx.context import OnnxContext
from caffe_lstm.ir.graph import Value
from caffe_lstm.ops import get_op
from tests.opcheck import make_node


def run_onnx_facet(op_type: str, attrs: dict[str, Any], inputs: Sequence[np.ndarray],
                   weights: Sequence[np.ndarray] = (), n_tops: int = 1, opset: int = 17,
                   dynamic: Sequence[tuple[int, int]] = ()) -> list[np.ndarray]:
    """The facet's ONNX nodes as a one-node model, run by onnxruntime on float32 ``inputs``.

    ``dynamic`` lists (bottom, axis) pairs that the model leaves symbolic, as an export with
    ``--shape`` ranges does: the facet must read them at run time.
    """
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    op = get_op(op_type)
    node = make_node(op_type, attrs, [np.shape(x) for x in inputs], n_tops)
    node.weights = [Value(f"w{i}", np.shape(w), np.asarray(w, np.float32), is_weight=True)
                    for i, w in enumerate(weights)]
    for value, shape in zip(node.outputs, op.infer(None, node, *[v.shape for v in node.inputs])):
        value.shape = tuple(shape)
    varying = {(id(node.inputs[b]), axis) for b, axis in dynamic}

    def value_dims(value: Value) -> tuple:
        return tuple(None if (id(value), a) in varying else d for a, d in enumerate(value.shape))

    ctx = OnnxContext(onnx, opset, value_dims)
    ctx.node = node
    names = [v.name for v in node.inputs]
    for name in names:
        ctx.reserve(name)
    weight_names = [ctx.constant(np.asarray(w, np.float32), f"w{i}")
                    for i, w in enumerate(weights)]
    outputs = op.onnx(ctx, node, *names, *weight_names)
    def info(name: str, shape) -> Any:
        return onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, list(shape))

    graph = onnx.helper.make_graph(
        ctx.parts.nodes, "facet", [info(n, value_dims(v)) for n, v in zip(names, node.inputs)],
        [info(n, [None] * len(v.shape)) for n, v in zip(outputs, node.outputs)],
        ctx.parts.initializers)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {n: np.asarray(x, np.float32) for n, x in zip(names, inputs)}
    return session.run(list(outputs), feeds)
