"""Activations and other shape-preserving single-bottom layers: Sigmoid, TanH, ReLU, Dropout,
Softmax, ELU, AbsVal, BNLL, Exp, Log, Clip."""

from __future__ import annotations

import numpy as np

from caffe_lstm.ir.graph import Node, Shape
from caffe_lstm.ops.registry import Op, canonical_axis, register_op, shape_error


class _SameShape(Op):
    """Base of the layers whose top has the bottom's shape (not registered itself)."""

    @staticmethod
    def infer(ctx, node: Node, x: Shape) -> tuple[Shape, ...]:
        return (x,)


@register_op
class Sigmoid(_SameShape):
    """y = σ(x) = 1 / (1 + e^−x) (sigmoid_param; its ``engine`` does not matter)."""

    type = "Sigmoid"
    param = "sigmoid_param"

    @staticmethod
    def numpy(ctx, node: Node, x):
        # σ(x) = 0.5·tanh(0.5·x) + 0.5, as Caffe's CPU code computes it: exp cannot overflow.
        # The tanh's result is new: scaled and shifted in place (a scalar is rebound).
        half = np.float32(0.5)
        y = np.tanh(half * x)
        y *= half
        y += half
        return (y,)

    @staticmethod
    def tensorrt(ctx, node: Node, x):
        return (_activation(ctx, x, ctx.trt.ActivationType.SIGMOID),)

    @staticmethod
    def onnx(ctx, node: Node, x):
        # ONNX's σ(x) = 1 / (1 + e^−x), equal to Caffe's 0.5·tanh(0.5·x) + 0.5 up to rounding
        return (ctx.add("Sigmoid", [x])[0],)


@register_op
class TanH(_SameShape):
    """y = tanh(x) (tanh_param; its ``engine`` does not matter)."""

    type = "TanH"
    param = "tanh_param"

    @staticmethod
    def numpy(ctx, node: Node, x):
        return (np.tanh(x),)

    @staticmethod
    def tensorrt(ctx, node: Node, x):
        return (_activation(ctx, x, ctx.trt.ActivationType.TANH),)

    @staticmethod
    def onnx(ctx, node: Node, x):
        return (ctx.add("Tanh", [x])[0],)


@register_op
class ReLU(_SameShape):
    """y = max(x, 0) + negative_slope·min(x, 0) (relu_param)."""

    type = "ReLU"
    param = "relu_param"

    @staticmethod
    def parse(ctx, p):
        return ReLU.make_attrs(p.negative_slope)

    @staticmethod
    def make_attrs(negative_slope: float = 0.0) -> dict:
        """The node attributes (relu_param's field, its default)."""
        return {"negative_slope": negative_slope}

    @staticmethod
    def numpy(ctx, node: Node, x):
        # one pass for the plain ReLU: the conv front ends' tops are hundreds of MiB, and each
        # temporary costs its page faults
        y = np.maximum(x, np.float32(0))
        slope = np.float32(node.attrs["negative_slope"])
        if slope != 0:
            y += slope * np.minimum(x, np.float32(0))
        return (y,)

    @staticmethod
    def tensorrt(ctx, node: Node, x):
        slope, kinds = node.attrs["negative_slope"], ctx.trt.ActivationType
        if slope == 0:
            return (_activation(ctx, x, kinds.RELU),)
        # LEAKY_RELU: y = x for x ≥ 0, alpha·x below
        return (_activation(ctx, x, kinds.LEAKY_RELU, alpha=slope),)

    @staticmethod
    def onnx(ctx, node: Node, x):
        slope = node.attrs["negative_slope"]
        if slope == 0:
            return (ctx.add("Relu", [x])[0],)
        # LeakyRelu: x for x ≥ 0, alpha·x below = max(x, 0) + slope·min(x, 0) for any slope
        return (ctx.add("LeakyRelu", [x], alpha=float(slope))[0],)


@register_op
class Dropout(_SameShape):
    """y = x at inference (dropout_param).

    Caffe scales by 1/(1 − dropout_ratio) while training, so the TEST forward is a plain copy.
    """

    type = "Dropout"
    param = "dropout_param"

    @staticmethod
    def parse(ctx, p):
        return {"dropout_ratio": p.dropout_ratio}

    @staticmethod
    def numpy(ctx, node: Node, x):
        return (x,)

    @staticmethod
    def tensorrt(ctx, node: Node, x):
        return (x,)  # the input tensor itself: no layer, the emitter keeps its name

    @staticmethod
    def onnx(ctx, node: Node, x):
        return (x,)  # the TEST forward: no node, the exporter hands the input through


@register_op
class Softmax(_SameShape):
    """y_i = e^(x_i − m) / Σ_j e^(x_j − m) along ``axis``, m the max there (softmax_param)."""

    type = "Softmax"
    param = "softmax_param"

    @staticmethod
    def parse(ctx, p):
        return {"axis": p.axis}

    @staticmethod
    def infer(ctx, node: Node, x: Shape) -> tuple[Shape, ...]:
        canonical_axis(node, node.attrs["axis"], len(x))
        return (x,)

    @staticmethod
    def numpy(ctx, node: Node, x):
        axis = canonical_axis(node, node.attrs["axis"], x.ndim)
        # Subtracting the max changes nothing mathematically and keeps exp from overflowing.
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return (e / e.sum(axis=axis, keepdims=True),)

    @staticmethod
    def tensorrt(ctx, node: Node, x):
        layer = ctx.network.add_softmax(x)
        layer.axes = 1 << canonical_axis(node, node.attrs["axis"], len(x.shape))  # a bitmask
        return (ctx.out(layer),)

    @staticmethod
    def onnx(ctx, node: Node, x):
        # opset ≥ 13: Softmax normalizes along the one axis given, as Caffe does
        axis = canonical_axis(node, node.attrs["axis"], len(node.inputs[0].shape))
        return (ctx.add("Softmax", [x], axis=axis)[0],)


def _activation(ctx, x, kind, alpha: float | None = None):
    """One IActivationLayer named after the node."""
    layer = ctx.network.add_activation(x, kind)
    if alpha is not None:
        layer.alpha = alpha
    return ctx.out(layer)


def with_scalar(ctx, x, value: float, operation, suffix: str):
    """x (op) value, the scalar a constant of x's rank with all dims 1 (TensorRT broadcasts
    only between tensors of the same rank)."""
    scalar = ctx.constant(np.full((1,) * len(x.shape), value, np.float32), f"{suffix}_value")
    return ctx.out(ctx.network.add_elementwise(x, scalar, operation), suffix)


@register_op
class ELU(_SameShape):
    """y = max(x, 0) + α·(e^min(x, 0) − 1) (elu_param)."""

    type = "ELU"
    param = "elu_param"

    @staticmethod
    def parse(ctx, p):
        return {"alpha": p.alpha}

    @staticmethod
    def numpy(ctx, node: Node, x):
        alpha = np.float32(node.attrs["alpha"])
        return (np.maximum(x, 0) + alpha * np.expm1(np.minimum(x, 0)),)

    @staticmethod
    def tensorrt(ctx, node: Node, x):
        # ELU: x for x ≥ 0, alpha·(e^x − 1) below
        return (_activation(ctx, x, ctx.trt.ActivationType.ELU, alpha=node.attrs["alpha"]),)

    @staticmethod
    def onnx(ctx, node: Node, x):
        # Elu: x for x > 0, alpha·(e^x − 1) below = max(x, 0) + α·(e^min(x, 0) − 1)
        return (ctx.add("Elu", [x], alpha=float(node.attrs["alpha"]))[0],)


@register_op
class AbsVal(_SameShape):
    """y = |x| (no param)."""

    type = "AbsVal"

    @staticmethod
    def numpy(ctx, node: Node, x):
        return (np.abs(x),)

    @staticmethod
    def tensorrt(ctx, node: Node, x):
        return (ctx.out(ctx.network.add_unary(x, ctx.trt.UnaryOperation.ABS)),)

    @staticmethod
    def onnx(ctx, node: Node, x):
        return (ctx.add("Abs", [x])[0],)


@register_op
class BNLL(_SameShape):
    """y = log(1 + e^x), the softplus ("binomial normal log likelihood"; no param)."""

    type = "BNLL"

    @staticmethod
    def numpy(ctx, node: Node, x):
        # bnll_layer.cpp's form, which cannot overflow: x + log(1 + e^−x) for x > 0
        return (np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x))),)

    @staticmethod
    def tensorrt(ctx, node: Node, x):
        # SOFTPLUS: alpha·log(e^(beta·x) + 1), here with alpha = beta = 1
        layer = ctx.network.add_activation(x, ctx.trt.ActivationType.SOFTPLUS)
        layer.alpha, layer.beta = 1.0, 1.0
        return (ctx.out(layer),)

    @staticmethod
    def onnx(ctx, node: Node, x):
        # Softplus: log(e^x + 1), the same function (onnxruntime evaluates it without overflow)
        return (ctx.add("Softplus", [x])[0],)


def _log_base(node: Node) -> float:
    """ln(base), 1 for Caffe's base −1 (= e); other bases must be positive."""
    base = node.attrs["base"]
    if base == -1:
        return 1.0
    if base <= 0:
        raise shape_error(node, f"base must be −1 (for e) or > 0, found {base}",
                          f"fix {node.op.lower()}_param.base")
    return float(np.log(np.float32(base)))


def _parse_base_scale_shift(ctx, p) -> dict:
    """exp_param and log_param: base (−1 = e), scale, shift."""
    return {"base": p.base, "scale": p.scale, "shift": p.shift}


def _infer_base_scale_shift(ctx, node: Node, x: Shape) -> tuple[Shape, ...]:
    _log_base(node)  # rejects a base that is neither −1 nor > 0
    return (x,)


@register_op
class Exp(_SameShape):
    """y = base^(shift + scale·x), base −1 meaning e (exp_param).

    Computed as exp_layer.cpp does: outer · e^(inner·x), inner = ln(base)·scale,
    outer = base^shift.
    """

    type = "Exp"
    param = "exp_param"

    parse = staticmethod(_parse_base_scale_shift)
    infer = staticmethod(_infer_base_scale_shift)

    @staticmethod
    def numpy(ctx, node: Node, x):
        inner, outer = _exp_factors(node)
        return (np.float32(outer) * np.exp(np.float32(inner) * x),)

    @staticmethod
    def tensorrt(ctx, node: Node, x):
        inner, outer = _exp_factors(node)
        ops, y = ctx.trt.ElementWiseOperation, x
        if inner != 1:
            y = with_scalar(ctx, y, inner, ops.PROD, "inner")
        if outer == 1:
            return (ctx.out(ctx.network.add_unary(y, ctx.trt.UnaryOperation.EXP)),)
        y = ctx.out(ctx.network.add_unary(y, ctx.trt.UnaryOperation.EXP), "exp")
        return (with_scalar(ctx, y, outer, ops.PROD, ""),)

    @staticmethod
    def onnx(ctx, node: Node, x):
        # y = outer · e^(inner·x), the steps that change nothing left out
        inner, outer = _exp_factors(node)
        if inner != 1:
            x = ctx.add("Mul", [x, ctx.scalar(inner, "inner")], suffix="inner")[0]
        y = ctx.add("Exp", [x], suffix="" if outer == 1 else "exp")[0]
        return (y,) if outer == 1 else (ctx.add("Mul", [y, ctx.scalar(outer, "outer")])[0],)


def _exp_factors(node: Node) -> tuple[float, float]:
    """(inner, outer) with y = outer · e^(inner·x)."""
    base, scale, shift = (node.attrs[k] for k in ("base", "scale", "shift"))
    inner = _log_base(node) * scale
    if shift == 0:
        return inner, 1.0
    return inner, float(np.exp(shift) if base == -1 else np.power(float(base), shift))


@register_op
class Log(_SameShape):
    """y = log_base(shift + scale·x), base −1 meaning e (log_param)."""

    type = "Log"
    param = "log_param"

    parse = staticmethod(_parse_base_scale_shift)
    infer = staticmethod(_infer_base_scale_shift)

    @staticmethod
    def numpy(ctx, node: Node, x):
        scale, shift = np.float32(node.attrs["scale"]), np.float32(node.attrs["shift"])
        # log_base(v) = ln(v) / ln(base)
        return (np.log(shift + scale * x) * np.float32(1 / _log_base(node)),)

    @staticmethod
    def tensorrt(ctx, node: Node, x):
        ops, y = ctx.trt.ElementWiseOperation, x
        scale, shift, base_scale = node.attrs["scale"], node.attrs["shift"], 1 / _log_base(node)
        if scale != 1:
            y = with_scalar(ctx, y, scale, ops.PROD, "scale")
        if shift != 0:
            y = with_scalar(ctx, y, shift, ops.SUM, "shift")
        if base_scale == 1:
            return (ctx.out(ctx.network.add_unary(y, ctx.trt.UnaryOperation.LOG)),)
        y = ctx.out(ctx.network.add_unary(y, ctx.trt.UnaryOperation.LOG), "log")
        return (with_scalar(ctx, y, base_scale, ops.PROD, ""),)

    @staticmethod
    def onnx(ctx, node: Node, x):
        # y = ln(shift + scale·x) / ln(base), the steps that change nothing left out
        scale, shift, base_scale = node.attrs["scale"], node.attrs["shift"], 1 / _log_base(node)
        if scale != 1:
            x = ctx.add("Mul", [x, ctx.scalar(scale, "scale")], suffix="scale")[0]
        if shift != 0:
            x = ctx.add("Add", [x, ctx.scalar(shift, "shift")], suffix="shift")[0]
        y = ctx.add("Log", [x], suffix="" if base_scale == 1 else "log")[0]
        if base_scale == 1:
            return (y,)
        return (ctx.add("Mul", [y, ctx.scalar(base_scale, "base_scale")])[0],)


@register_op
class Clip(_SameShape):
    """y = max(min, min(x, max)) (clip_param; both bounds required)."""

    type = "Clip"
    param = "clip_param"

    @staticmethod
    def parse(ctx, p):
        return Clip.make_attrs(p.min if p.has("min") else None, p.max if p.has("max") else None)

    @staticmethod
    def make_attrs(low: float | None, high: float | None) -> dict:
        """The node attributes: clip_param's min and max (None where unset)."""
        return {"min": None if low is None else float(low),
                "max": None if high is None else float(high)}

    @staticmethod
    def infer(ctx, node: Node, x: Shape) -> tuple[Shape, ...]:
        low, high = node.attrs["min"], node.attrs["max"]
        if low is None or high is None:
            raise shape_error(node, f"clip_param needs min and max, found min {low}, max {high}",
                              "set both clip_param.min and clip_param.max")
        return (x,)

    @staticmethod
    def numpy(ctx, node: Node, x):
        low, high = np.float32(node.attrs["min"]), np.float32(node.attrs["max"])
        return (np.maximum(low, np.minimum(x, high)),)

    @staticmethod
    def tensorrt(ctx, node: Node, x):
        # CLIP: max(alpha, min(x, beta))
        layer = ctx.network.add_activation(x, ctx.trt.ActivationType.CLIP)
        layer.alpha, layer.beta = node.attrs["min"], node.attrs["max"]
        return (ctx.out(layer),)

    @staticmethod
    def onnx(ctx, node: Node, x):
        low, high = node.attrs["min"], node.attrs["max"]
        if low <= high:  # Clip = min(max(x, min), max), Caffe's max(min, min(x, max)) here
            return (ctx.add("Clip", [x, ctx.scalar(low, "min"), ctx.scalar(high, "max")])[0],)
        # min > max: ONNX Clip gives max, Caffe max(min, min(x, max)) = min: spelled out
        upper = ctx.add("Min", [x, ctx.scalar(high, "max")], suffix="upper")[0]
        return (ctx.add("Max", [upper, ctx.scalar(low, "min")])[0],)
