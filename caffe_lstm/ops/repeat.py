"""The ``Repeat`` layer of christopher5106/last_caffe_with_stn: copies of a blob through a learned
matrix (its caffemodel holds the matrix; the fork initializes it to stacked identities)."""

from __future__ import annotations

import numpy as np

from caffe_lstm.ir.graph import Node, Shape
from caffe_lstm.ops.registry import (Op, canonical_axis, count, onnx_fixed_dims, register_op,
                                     shape_error, trt_fixed_dims)


def _sizes(node: Node, x: Shape) -> tuple[int, int, int]:
    """(M, K, N): x is read as (M, K) with K = count(axis); N = num_repeats."""
    axis = canonical_axis(node, node.attrs["axis"], len(x))
    return count(x, 0, axis), count(x, axis), node.attrs["num_repeats"]


@register_op
class Repeat(Op):
    """y = x_(M×K) · Wᵀ with W (N·K, K), read as (x.shape[0], N, x.shape[1:]) (repeat_param:
    num_repeats N, axis; K = count(axis), M = count(0, axis)).

    With the fork's initial W (N identities stacked) and axis 1, y[n, i] = x[n] for each of
    the N copies i; a trained W is whatever it learned. The top's shape always puts N after
    the first axis, whatever ``axis`` is: the data are the (M, N·K) product in that order.
    """

    type = "Repeat"
    param = "repeat_param"
    origin = "christopher5106/last_caffe_with_stn@61adf87 (repeat_layer.cpp)"
    limits = ("TensorRT and ONNX need every bottom axis but the first fixed")

    @staticmethod
    def parse(ctx, p):
        return {"num_repeats": p.num_repeats, "axis": p.axis}

    @staticmethod
    def infer(ctx, node: Node, x: Shape) -> tuple[Shape, ...]:
        if node.attrs["num_repeats"] <= 0:
            raise shape_error(node, "num_repeats is 0", "set repeat_param.num_repeats")
        _sizes(node, x)   # the axis is in range
        return ((x[0], node.attrs["num_repeats"]) + tuple(x[1:]),)

    @staticmethod
    def blobs(ctx, node: Node, x: Shape) -> tuple[tuple[str, Shape], ...]:
        _, k, n = _sizes(node, x)
        return (("weight", (n * k, k)),)

    @staticmethod
    def synthetic(node: Node, rng, scale) -> list[np.ndarray]:
        """The fork's own initial W: N (K, K) identities stacked, so y repeats x."""
        k, n = node.weights[0].shape[1], node.attrs["num_repeats"]
        return [np.tile(np.eye(k, dtype=np.float32), (n, 1))]

    @staticmethod
    def numpy(ctx, node: Node, x, w):
        m, k, _ = _sizes(node, x.shape)
        return ((x.reshape(m, k) @ w.T).reshape(Repeat.infer(None, node, x.shape)[0]),)

    @staticmethod
    def tensorrt(ctx, node: Node, x, w):
        trt_fixed_dims(node, tuple(x.shape[1:]), "an axis after the first",
                       "give the input fixed dims after the first")
        _, k, _ = _sizes(node, tuple(x.shape))
        none = ctx.trt.MatrixOperation.NONE
        flat = ctx.reshape(x, [-1, k], "flatten")
        y = ctx.out(ctx.network.add_matrix_multiply(
            flat, none, ctx.constant(np.ascontiguousarray(w.T), "weight"), none), "matmul")
        return (ctx.reshape(y, [-1, *node.outputs[0].shape[1:]], ""),)

    @staticmethod
    def onnx(ctx, node: Node, x: str, w: str):
        onnx_fixed_dims(ctx, node, node.inputs[0], range(1, len(node.inputs[0].shape)),
                        "an axis after the first", "give the input fixed dims after the first")
        _, k, _ = _sizes(node, node.inputs[0].shape)
        flat = ctx.add("Reshape", [x, ctx.ints([-1, k], "flat_shape")], suffix="flatten")[0]
        w_t = ctx.add("Transpose", [w], suffix="weight_t", perm=[1, 0])[0]
        y = ctx.add("MatMul", [flat, w_t], suffix="matmul")[0]
        top = ctx.ints([-1, *node.outputs[0].shape[1:]], "top_shape")
        return (ctx.add("Reshape", [y, top])[0],)
