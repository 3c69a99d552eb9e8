"""Per-channel normalisation and gating with learned blobs: BatchNorm, PReLU.

Both treat axis 1 as the channel axis (axis 0 is the batch; the rest, if any, spatial).
"""

from __future__ import annotations

import numpy as np

from caffe_lstm.ir.graph import Node, Shape
from caffe_lstm.ops.registry import Op, register_op, shape_error


def _channels(x: Shape) -> int:
    """Caffe's channel count: dim 1, or 1 for a 1-axis blob (batch_norm_layer.cpp)."""
    return x[1] if len(x) > 1 else 1


def _per_channel(values: np.ndarray, rank: int) -> np.ndarray:
    """(C,) values shaped (1, C, 1, …) to broadcast over a blob of ``rank`` axes."""
    return values.reshape((1, -1) + (1,) * (rank - 2)) if rank > 1 else values.reshape(-1)


#: The factor blob of a trained BatchNorm: Caffe's moving average updates it to λ·factor + 1
#: each iteration (batch_norm_layer.cpp, λ = moving_average_fraction, 0.999 by default), so
#: after 10⁴ iterations it is (1 − λ¹⁰⁰⁰⁰) / (1 − λ) ≈ 999.95, the statistics stored times it.
TRAINED_FACTOR = (1 - 0.999 ** 10_000) / (1 - 0.999)
#: ``weights init``'s BatchNorm statistics: the values per channel a layer's variance is
#: worth in each channel's (see ``BatchNorm.calibrate``).
PRIOR_COUNT = 16


@register_op
class BatchNorm(Op):
    """y = (x − μ) / √(σ² + eps) per channel (batch_norm_param).

    With ``use_global_stats`` (Caffe's default at TEST, the phase this tool runs) μ and σ² are
    the stored statistics: blobs [mean (C), variance (C), factor (1)] hold factor·μ and
    factor·σ², so μ = mean / factor, σ² = variance / factor, and a factor of 0 gives μ = σ² = 0
    as in Caffe. Without it they are the batch's own: the mean and the biased variance over
    the batch and spatial axes.
    """

    type = "BatchNorm"
    param = "batch_norm_param"

    @staticmethod
    def parse(ctx, p):
        # Caffe defaults use_global_stats to (phase == TEST), and this tool runs TEST
        global_stats = p.use_global_stats if p.has("use_global_stats") else True
        return {"use_global_stats": global_stats, "eps": p.eps}

    @staticmethod
    def infer(ctx, node: Node, x: Shape) -> tuple[Shape, ...]:
        if not x:
            raise shape_error(node, "the bottom is a scalar", "BatchNorm needs a (N, C, …) blob")
        if node.attrs["eps"] < 0:
            raise shape_error(node, f"eps must be ≥ 0, found {node.attrs['eps']}")
        return (x,)

    @staticmethod
    def blobs(ctx, node: Node, x: Shape) -> tuple[tuple[str, Shape], ...]:
        c = _channels(x)
        return (("mean", (c,)), ("variance", (c,)), ("factor", (1,)))

    @staticmethod
    def synthetic(node: Node, rng, scale: float):
        """Stored statistics a trained net could have: variances > 0, the factor 1."""
        (c,), _, _ = [v.shape for v in node.weights]
        return [rng.uniform(-scale, scale, c), rng.uniform(0.5, 1.5, c), np.ones(1)]

    @staticmethod
    def calibrate(node: Node, rng, inputs, blobs):
        """The statistics of the input itself, as training leaves them, so that the layer
        normalises: μ and the biased σ² of each channel over the batch and spatial axes, stored
        times the factor Caffe's moving average reaches (TRAINED_FACTOR); where a channel has a
        single value (one sample, no spatial axes) those of the whole input."""
        x = inputs[0].astype(np.float64)
        channels = _channels(x.shape)
        if x.size > channels:
            axes = tuple(a for a in range(x.ndim) if a != 1)
            mu, var = x.mean(axis=axes), x.var(axis=axes)
            # few values per channel (a deep layer at a small image): each channel's variance
            # is pooled with the layer's, as if PRIOR_COUNT more values had that variance, so
            # that a channel that happened to be nearly constant does not amplify its
            # rounding errors (a trained net's running variance averages many batches)
            count = x.size / channels
            var = (count * var + PRIOR_COUNT * var.mean()) / (count + PRIOR_COUNT)
        else:
            mu, var = np.full(channels, x.mean()), np.full(channels, x.var())
        return [mu * TRAINED_FACTOR, var * TRAINED_FACTOR, np.full(1, TRAINED_FACTOR)]

    @staticmethod
    def numpy(ctx, node: Node, x, mean, variance, factor):
        eps = np.float32(node.attrs["eps"])
        if node.attrs["use_global_stats"]:
            mu, var = _stored_statistics(mean, variance, factor)
            mu, var = _per_channel(mu, x.ndim), _per_channel(var, x.ndim)
        else:
            mu, var = _batch_statistics(x)
        return ((x - mu) / np.sqrt(var + eps),)

    @staticmethod
    def tensorrt(ctx, node: Node, x, mean, variance, factor):
        eps = node.attrs["eps"]
        if not node.attrs["use_global_stats"]:
            return (_trt_batch_norm(ctx, x, eps),)
        # folded into y = x·a + b with a = 1/√(σ² + eps), b = −μ·a (in float64)
        mu, var = _stored_statistics(mean.astype(np.float64), variance.astype(np.float64),
                                     factor.astype(np.float64))
        a = 1 / np.sqrt(var + eps)
        ops, rank = ctx.trt.ElementWiseOperation, len(x.shape)
        scale = ctx.constant(_per_channel(a, rank), "scale")
        shift = ctx.constant(_per_channel(-mu * a, rank), "shift")
        scaled = ctx.out(ctx.network.add_elementwise(x, scale, ops.PROD), "scaled")
        return (ctx.out(ctx.network.add_elementwise(scaled, shift, ops.SUM)),)

    @staticmethod
    def onnx(ctx, node: Node, x: str, mean: str, variance: str, factor: str):
        # y = (x − μ) / √(σ² + eps), the numpy facet's float32 operations in the same order;
        # the blobs stay Caffe's initializers and μ, σ² are computed from them in the graph
        rank = len(node.inputs[0].shape)
        if node.attrs["use_global_stats"]:
            mu, var = _onnx_stored_statistics(ctx, rank, mean, variance, factor)
        else:
            mu, var = _onnx_batch_statistics(ctx, x, rank)
        eps = ctx.constant(np.array(node.attrs["eps"], np.float32), "eps")
        centered = ctx.add("Sub", [x, mu], suffix="centered")[0]
        shifted = ctx.add("Add", [var, eps], suffix="variance_eps")[0]
        std = ctx.add("Sqrt", [shifted], suffix="std")[0]
        return (ctx.add("Div", [centered, std])[0],)


def _onnx_stored_statistics(ctx, rank: int, mean: str, variance: str,
                            factor: str) -> tuple[str, str]:
    """μ = mean · s, σ² = variance · s with s = 0 if factor = 0 else 1 / factor (Caffe), both
    shaped (1, C, 1, …) to broadcast."""
    zero = ctx.constant(np.zeros(1, np.float32), "zero")
    is_zero = ctx.add("Equal", [factor, zero], suffix="factor_is_zero")[0]
    inverse = ctx.add("Reciprocal", [factor], suffix="inverse_factor")[0]
    s = ctx.add("Where", [is_zero, zero, inverse], suffix="scale_factor")[0]
    shape = ctx.ints([1, -1] + [1] * (rank - 2) if rank > 1 else [-1], "channel_shape")
    stats = []
    for blob, what in ((mean, "mean"), (variance, "variance")):
        scaled = ctx.add("Mul", [blob, s], suffix=f"{what}_scaled")[0]
        stats.append(ctx.add("Reshape", [scaled, shape], suffix=what)[0])
    return stats[0], stats[1]


def _onnx_batch_statistics(ctx, x: str, rank: int) -> tuple[str, str]:
    """The batch's μ and biased σ² = E[(x − μ)²] over every axis but 1, kept as size 1."""
    axes = [a for a in range(rank) if a != 1]
    mu = _onnx_reduce_mean(ctx, x, axes, "batch_mean")
    centered = ctx.add("Sub", [x, mu], suffix="batch_centered")[0]
    square = ctx.add("Mul", [centered, centered], suffix="batch_square")[0]
    return mu, _onnx_reduce_mean(ctx, square, axes, "batch_variance")


def _onnx_reduce_mean(ctx, x: str, axes: list[int], suffix: str) -> str:
    """ReduceMean keeping dims: axes an attribute up to opset 17, an input from 18."""
    if ctx.opset >= 18:
        return ctx.add("ReduceMean", [x, ctx.ints(axes, "axes")], suffix=suffix, keepdims=1)[0]
    return ctx.add("ReduceMean", [x], suffix=suffix, axes=axes, keepdims=1)[0]


def _stored_statistics(mean: np.ndarray, variance: np.ndarray,
                       factor: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """μ and σ² from the blobs: divided by the factor, or zeros when the factor is 0."""
    f = factor.reshape(-1)[0]
    inverse = f.dtype.type(0) if f == 0 else f.dtype.type(1) / f
    return inverse * mean, inverse * variance


def _batch_statistics(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and biased variance E[(x − μ)²] over every axis but 1, kept as size 1."""
    axes = tuple(a for a in range(x.ndim) if a != 1)
    mu = x.mean(axis=axes, keepdims=True, dtype=np.float32)
    return mu, np.square(x - mu).mean(axis=axes, keepdims=True, dtype=np.float32)


def _trt_batch_norm(ctx, x, eps: float):
    """y = (x − μ) / √(E[(x − μ)²] + eps) with the batch's statistics (reductions over every
    axis but 1)."""
    ops, avg = ctx.trt.ElementWiseOperation, ctx.trt.ReduceOperation.AVG
    rank = len(x.shape)
    axes = sum(1 << a for a in range(rank) if a != 1)
    mu = ctx.out(ctx.network.add_reduce(x, avg, axes, True), "mean")
    centered = ctx.out(ctx.network.add_elementwise(x, mu, ops.SUB), "centered")
    square = ctx.out(ctx.network.add_elementwise(centered, centered, ops.PROD), "square")
    var = ctx.out(ctx.network.add_reduce(square, avg, axes, True), "variance")
    eps_value = ctx.constant(np.full((1,) * rank, eps, np.float32), "eps")
    shifted = ctx.out(ctx.network.add_elementwise(var, eps_value, ops.SUM), "variance_eps")
    root = ctx.out(ctx.network.add_unary(shifted, ctx.trt.UnaryOperation.SQRT), "std")
    return ctx.out(ctx.network.add_elementwise(centered, root, ops.DIV))


@register_op
class PReLU(Op):
    """y = max(x, 0) + a_c · min(x, 0), a_c the learned slope of channel c (axis 1), or one
    slope for all with ``channel_shared`` (prelu_param).

    The slope blob is (C), or a 0-axis scalar when shared (prelu_layer.cpp).
    """

    type = "PReLU"
    param = "prelu_param"

    @staticmethod
    def parse(ctx, p):
        return {"channel_shared": p.channel_shared}

    @staticmethod
    def infer(ctx, node: Node, x: Shape) -> tuple[Shape, ...]:
        if len(x) < 2:
            raise shape_error(node, f"expected a bottom of at least 2 axes, found {x}",
                              "PReLU needs (N, C, …)")
        return (x,)

    @staticmethod
    def blobs(ctx, node: Node, x: Shape) -> tuple[tuple[str, Shape], ...]:
        return (("slope", () if node.attrs["channel_shared"] else (x[1],)),)

    @staticmethod
    def numpy(ctx, node: Node, x, slope):
        a = _per_channel(slope, x.ndim) if slope.ndim else slope
        return (np.maximum(x, 0) + a * np.minimum(x, 0),)

    @staticmethod
    def tensorrt(ctx, node: Node, x, slope):
        # IParametricReLULayer: x ≥ 0 ? x : a·x, a broadcast (same rank, dims 1 elsewhere)
        rank = len(x.shape)
        shaped = slope.reshape((1,) * rank) if slope.ndim == 0 else _per_channel(slope, rank)
        return (ctx.out(ctx.network.add_parametric_relu(x, ctx.constant(shaped, "slope"))),)

    @staticmethod
    def onnx(ctx, node: Node, x: str, slope: str):
        # PRelu: x < 0 ? slope·x : x, the slope broadcast from the right: a shared scalar as
        # it is, a (C) blob reshaped to (C, 1, …) (rank − 1 axes)
        rank = len(node.inputs[0].shape)
        if not node.attrs["channel_shared"] and rank > 2:
            shape = ctx.ints([-1] + [1] * (rank - 2), "slope_shape")
            slope = ctx.add("Reshape", [slope, shape], suffix="slope")[0]
        return (ctx.add("PRelu", [x, slope])[0],)
