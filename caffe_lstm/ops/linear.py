"""Learned linear maps: InnerProduct and Embed."""

from __future__ import annotations

import numpy as np

from caffe_lstm.errors import ExecutionError
from caffe_lstm.ir.graph import Node, Shape
from caffe_lstm.ops.registry import Op, canonical_axis, count, register_op, shape_error


@register_op
class InnerProduct(Op):
    """y = x_flat · Wᵀ + b, x flattened from ``axis`` on (inner_product_param).

    W is (num_output, K), or (K, num_output) with ``transpose``; K = count(axis) of x.
    """

    type = "InnerProduct"
    param = "inner_product_param"

    @staticmethod
    def parse(p):
        return {"num_output": p.num_output, "bias_term": p.bias_term, "axis": p.axis,
                "transpose": p.transpose}

    @staticmethod
    def infer(node: Node, x: Shape) -> tuple[Shape, ...]:
        axis = canonical_axis(node, node.attrs["axis"], len(x))
        if node.attrs["num_output"] <= 0:
            raise shape_error(node, "num_output is 0", "set inner_product_param.num_output")
        return (x[:axis] + (node.attrs["num_output"],),)

    @staticmethod
    def blobs(node: Node, x: Shape) -> tuple[tuple[str, Shape], ...]:
        axis = canonical_axis(node, node.attrs["axis"], len(x))
        k, n = count(x, axis), node.attrs["num_output"]
        weight = ("weight", (k, n) if node.attrs["transpose"] else (n, k))
        return (weight, ("bias", (n,))) if node.attrs["bias_term"] else (weight,)

    @staticmethod
    def numpy(node: Node, x, w, b=None):
        axis = canonical_axis(node, node.attrs["axis"], x.ndim)
        x_flat = x.reshape(count(x.shape, 0, axis), -1)
        y = x_flat @ (w if node.attrs["transpose"] else w.T)
        if b is not None:
            y = y + b
        return (y.reshape(x.shape[:axis] + (node.attrs["num_output"],)),)


@register_op
class Embed(Op):
    """y = W[int(x)] + b: a row lookup; W is (input_dim, num_output) (embed_param).

    Indices arrive as floats and are truncated toward zero, as Caffe does.
    """

    type = "Embed"
    param = "embed_param"

    @staticmethod
    def parse(p):
        return {"num_output": p.num_output, "input_dim": p.input_dim, "bias_term": p.bias_term}

    @staticmethod
    def infer(node: Node, x: Shape) -> tuple[Shape, ...]:
        if node.attrs["num_output"] <= 0 or node.attrs["input_dim"] <= 0:
            raise shape_error(node, "num_output and input_dim must be > 0",
                              "set embed_param.num_output and embed_param.input_dim")
        return (x + (node.attrs["num_output"],),)

    @staticmethod
    def blobs(node: Node, x: Shape) -> tuple[tuple[str, Shape], ...]:
        weight = ("weight", (node.attrs["input_dim"], node.attrs["num_output"]))
        return (weight, ("bias", (node.attrs["num_output"],))) if node.attrs["bias_term"] else (
            weight,)

    @staticmethod
    def numpy(node: Node, x, w, b=None):
        index = np.trunc(x).astype(np.int64)
        if index.size and (index.min() < 0 or index.max() >= node.attrs["input_dim"]):
            bad = index.min() if index.min() < 0 else index.max()
            raise ExecutionError(
                f"index {bad} is outside [0, {node.attrs['input_dim']})", node.label,
                "check the word ids fed to this layer")
        y = w[index]
        return (y + b if b is not None else y,)
