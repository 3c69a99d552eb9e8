"""Activations and other shape-preserving single-bottom layers: Sigmoid, TanH, ReLU, Dropout,
Softmax."""

from __future__ import annotations

import numpy as np

from caffe_lstm.ir.graph import Node, Shape
from caffe_lstm.ops.registry import Op, canonical_axis, register_op


class _SameShape(Op):
    """Base of the layers whose top has the bottom's shape (not registered itself)."""

    @staticmethod
    def infer(node: Node, x: Shape) -> tuple[Shape, ...]:
        return (x,)


@register_op
class Sigmoid(_SameShape):
    """y = σ(x) = 1 / (1 + e^−x) (sigmoid_param; its ``engine`` does not matter)."""

    type = "Sigmoid"
    param = "sigmoid_param"

    @staticmethod
    def numpy(node: Node, x):
        # σ(x) = 0.5·tanh(0.5·x) + 0.5, as Caffe's CPU code computes it: exp cannot overflow.
        return (np.float32(0.5) * np.tanh(np.float32(0.5) * x) + np.float32(0.5),)

    @staticmethod
    def tensorrt(ctx, node: Node, x):
        return (_activation(ctx, x, ctx.trt.ActivationType.SIGMOID),)


@register_op
class TanH(_SameShape):
    """y = tanh(x) (tanh_param; its ``engine`` does not matter)."""

    type = "TanH"
    param = "tanh_param"

    @staticmethod
    def numpy(node: Node, x):
        return (np.tanh(x),)

    @staticmethod
    def tensorrt(ctx, node: Node, x):
        return (_activation(ctx, x, ctx.trt.ActivationType.TANH),)


@register_op
class ReLU(_SameShape):
    """y = max(x, 0) + negative_slope·min(x, 0) (relu_param)."""

    type = "ReLU"
    param = "relu_param"

    @staticmethod
    def parse(p):
        return {"negative_slope": p.negative_slope}

    @staticmethod
    def numpy(node: Node, x):
        slope = np.float32(node.attrs["negative_slope"])
        return (np.maximum(x, 0) + slope * np.minimum(x, 0),)

    @staticmethod
    def tensorrt(ctx, node: Node, x):
        slope, kinds = node.attrs["negative_slope"], ctx.trt.ActivationType
        if slope == 0:
            return (_activation(ctx, x, kinds.RELU),)
        # LEAKY_RELU: y = x for x ≥ 0, alpha·x below
        return (_activation(ctx, x, kinds.LEAKY_RELU, alpha=slope),)


@register_op
class Dropout(_SameShape):
    """y = x at inference (dropout_param).

    Caffe scales by 1/(1 − dropout_ratio) while training, so the TEST forward is a plain copy.
    """

    type = "Dropout"
    param = "dropout_param"

    @staticmethod
    def parse(p):
        return {"dropout_ratio": p.dropout_ratio}

    @staticmethod
    def numpy(node: Node, x):
        return (x,)

    @staticmethod
    def tensorrt(ctx, node: Node, x):
        return (x,)  # the input tensor itself: no layer, the emitter keeps its name


@register_op
class Softmax(_SameShape):
    """y_i = e^(x_i − m) / Σ_j e^(x_j − m) along ``axis``, m the max there (softmax_param)."""

    type = "Softmax"
    param = "softmax_param"

    @staticmethod
    def parse(p):
        return {"axis": p.axis}

    @staticmethod
    def infer(node: Node, x: Shape) -> tuple[Shape, ...]:
        canonical_axis(node, node.attrs["axis"], len(x))
        return (x,)

    @staticmethod
    def numpy(node: Node, x):
        axis = canonical_axis(node, node.attrs["axis"], x.ndim)
        # Subtracting the max changes nothing mathematically and keeps exp from overflowing.
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return (e / e.sum(axis=axis, keepdims=True),)

    @staticmethod
    def tensorrt(ctx, node: Node, x):
        layer = ctx.network.add_softmax(x)
        layer.axes = 1 << canonical_axis(node, node.attrs["axis"], len(x.shape))  # a bitmask
        return (ctx.out(layer),)


def _activation(ctx, x, kind, alpha: float | None = None):
    """One IActivationLayer named after the node."""
    layer = ctx.network.add_activation(x, kind)
    if alpha is not None:
        layer.alpha = alpha
    return ctx.out(layer)
