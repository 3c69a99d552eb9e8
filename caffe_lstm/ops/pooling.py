"""Windowed reductions over (N, C, H, W) blobs: Pooling and LRN.

Caffe's pooling differs from most frameworks in two ways (pooling_layer.cpp):

- the output size is rounded up by default (``round_mode: CEIL``), and when there is padding the
  last window must start inside the padded input: if (out − 1)·stride ≥ in + pad, the last
  output is dropped;
- AVE divides by the window clipped to the padded input [−pad, in + pad) (padding counts, the
  overhang of a rounded-up window does not), while MAX looks at the real input only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from caffe_lstm.ir.graph import Node, Shape
from caffe_lstm.ops.activation import with_scalar
from caffe_lstm.ops.registry import Op, register_op, shape_error

POOL_METHODS = ("MAX", "AVE")
#: The most negative float32, where Caffe's MAX starts (a window of padding only keeps it).
_FLT_LOWEST = np.float32(np.finfo(np.float32).min)


@dataclass(frozen=True)
class PoolGeometry:
    """The resolved pooling_param for one (N, C, H, W) bottom; every tuple is (h, w)."""

    kernel: tuple[int, int]
    stride: tuple[int, int]
    pad: tuple[int, int]
    out: tuple[int, int]

    def starts(self, axis: int) -> np.ndarray:
        """Where each window starts on ``axis``, in unpadded coordinates (may be < 0)."""
        return np.arange(self.out[axis]) * self.stride[axis] - self.pad[axis]

    def divisor(self, axis: int, size: int) -> np.ndarray:
        """Caffe's AVE divisor along ``axis``: the window clipped to [−pad, in + pad)."""
        start = self.starts(axis)
        return np.minimum(start + self.kernel[axis], size + self.pad[axis]) - start

    def real_count(self, axis: int, size: int) -> np.ndarray:
        """The window's overlap with the real input [0, in) along ``axis``."""
        start = self.starts(axis)
        return np.minimum(start + self.kernel[axis], size) - np.maximum(start, 0)


def _written(p, name: str):
    return getattr(p, name) if p.has(name) else None


@register_op
class Pooling(Op):
    """y[n, c, i, j] = max or mean of x[n, c] over the window at (i·stride − pad, j·stride − pad)
    (pooling_param; ``global_pooling`` takes the whole H×W).

    Output dims: ⌈(in + 2·pad − kernel) / stride⌉ + 1 (CEIL, the default) or ⌊…⌋ + 1 (FLOOR),
    minus one when padding makes the last window start at or past in + pad.
    """

    type = "Pooling"
    param = "pooling_param"

    @staticmethod
    def parse(ctx, p):
        fields = ("kernel_size", "kernel_h", "kernel_w", "stride", "stride_h", "stride_w",
                  "pad", "pad_h", "pad_w")
        return {"pool": p.pool, "global_pooling": p.global_pooling,
                "round_mode": p.round_mode, **{name: _written(p, name) for name in fields}}

    @staticmethod
    def infer(ctx, node: Node, x: Shape) -> tuple[Shape, ...]:
        g = pool_geometry(node, x)
        return (x[:2] + g.out,)

    @staticmethod
    def numpy(ctx, node: Node, x):
        g = pool_geometry(node, x.shape)
        if node.attrs["pool"] == "MAX":
            return (_max_pool(x, g),)
        return (_ave_pool(x, g),)

    @staticmethod
    def tensorrt(ctx, node: Node, x):
        if node.attrs["global_pooling"]:  # the whole H×W: a reduction, dynamic dims welcome
            kind = ctx.trt.ReduceOperation
            op = kind.MAX if node.attrs["pool"] == "MAX" else kind.AVG
            return (ctx.out(ctx.network.add_reduce(x, op, 0b1100, True)),)
        return (_trt_window_pool(ctx, node, x),)

    @staticmethod
    def onnx(ctx, node: Node, x: str):
        is_max = node.attrs["pool"] == "MAX"
        if node.attrs["global_pooling"]:   # the whole H×W, divided by H·W: exact, dynamic
            return (ctx.add("GlobalMaxPool" if is_max else "GlobalAveragePool", [x])[0],)
        return (_onnx_window_pool(ctx, node, x, is_max),)


def pool_geometry(node: Node, x: Shape) -> PoolGeometry:
    """Kernel, stride, pad and output dims, with pooling_layer.cpp's checks."""
    if len(x) != 4:
        raise shape_error(node, f"expected a 4-axis (N, C, H, W) bottom, found {x}")
    attrs = node.attrs
    if attrs["pool"] not in POOL_METHODS:
        raise shape_error(node, f"pool {attrs['pool']} is not supported",
                          f"use one of {', '.join(POOL_METHODS)}")
    kernel = _kernel(node, x)
    stride, pad = _pair(node, "stride", "stride", 1), _pair(node, "pad", "pad", 0)
    if attrs["global_pooling"] and (pad != (0, 0) or stride != (1, 1)):
        raise shape_error(node, f"global_pooling with pad {pad} and stride {stride}",
                          "global pooling allows only pad 0 and stride 1")
    if min(stride) < 1 or pad[0] >= kernel[0] or pad[1] >= kernel[1]:
        raise shape_error(node, f"stride {stride} must be ≥ 1 and pad {pad} below kernel {kernel}",
                          "check pooling_param")
    out = tuple(_pooled_dim(node, n, k, s, p, any(pad))
                for n, k, s, p in zip(x[2:], kernel, stride, pad))
    return PoolGeometry(kernel, stride, pad, out)


def _kernel(node: Node, x: Shape) -> tuple[int, int]:
    written = [node.attrs[f] is not None for f in ("kernel_size", "kernel_h", "kernel_w")]
    if node.attrs["global_pooling"]:
        if any(written):
            raise shape_error(node, "global_pooling with a kernel size",
                              "drop kernel_size/kernel_h/kernel_w")
        return x[2], x[3]
    kernel = _pair(node, "kernel_size", "kernel", None)
    if min(kernel) < 1:
        raise shape_error(node, f"kernel {kernel} has a dim below 1", "check pooling_param")
    return kernel


def _pair(node: Node, single: str, hw: str, default: int | None) -> tuple[int, int]:
    """``<single>`` for both axes, or ``<hw>_h`` and ``<hw>_w`` (both, and not with single)."""
    value, h, w = (node.attrs[f] for f in (single, f"{hw}_h", f"{hw}_w"))
    if h is not None or w is not None:
        if value is not None or h is None or w is None:
            raise shape_error(node, f"{single} and {hw}_h/{hw}_w mixed: found {single} {value}, "
                              f"{hw}_h {h}, {hw}_w {w}",
                              f"give {single}, or both {hw}_h and {hw}_w")
        return h, w
    if value is None and default is None:
        raise shape_error(node, "no kernel size", "give kernel_size, or kernel_h and kernel_w")
    return (default, default) if value is None else (value, value)


def _pooled_dim(node: Node, size: int, kernel: int, stride: int, pad: int,
                padded: bool) -> int:
    span = size + 2 * pad - kernel
    if span < 0:
        raise shape_error(node, f"kernel {kernel} is larger than the padded input {size + 2 * pad}",
                          "check kernel and pad against the input size")
    ceil = node.attrs["round_mode"] != "FLOOR"
    out = (-(-span // stride) if ceil else span // stride) + 1
    # with padding, the last window must start strictly inside the padded input
    if padded and (out - 1) * stride >= size + pad:
        out -= 1
    return out


# ---- numpy ------------------------------------------------------------------------------------


def _grown(x: np.ndarray, g: PoolGeometry, fill: float) -> np.ndarray:
    """x from −pad on, padded with ``fill`` (or cut) to exactly the extent the windows cover:
    (out − 1)·stride + kernel per spatial axis."""
    widths = []
    for axis in range(2):
        needed = (g.out[axis] - 1) * g.stride[axis] + g.kernel[axis]   # from −pad on
        widths.append((g.pad[axis], needed - g.pad[axis] - x.shape[2 + axis]))
    grown = np.pad(x, [(0, 0), (0, 0)] + [(front, max(back, 0)) for front, back in widths],
                   constant_values=fill)
    return grown[:, :, :grown.shape[2] + min(widths[0][1], 0),
                 :grown.shape[3] + min(widths[1][1], 0)]   # windows that stop short


def _window_reduce(x: np.ndarray, g: PoolGeometry, fill: float, ufunc) -> np.ndarray:
    """ufunc over every window, outside the real input = ``fill``: one strided pass per kernel
    tap, y = ufunc(y, grown[:, :, i + o·stride_h, j + o·stride_w]) (kh·kw whole-array ops)."""
    grown = _grown(x, g, fill)
    if g.out == (1, 1):   # one window (global pooling): one reduction
        return ufunc.reduce(grown, axis=(2, 3), keepdims=True)
    result = None
    for i in range(g.kernel[0]):
        for j in range(g.kernel[1]):
            tap = grown[:, :, i:i + (g.out[0] - 1) * g.stride[0] + 1:g.stride[0],
                        j:j + (g.out[1] - 1) * g.stride[1] + 1:g.stride[1]]
            if result is None:
                result = tap.copy()
            else:
                ufunc(result, tap, out=result)
    return result


def _max_pool(x: np.ndarray, g: PoolGeometry) -> np.ndarray:
    # padding never wins; a window of padding only gives Caffe's initial −FLT_MAX
    return np.maximum(_window_reduce(x, g, -np.inf, np.maximum), _FLT_LOWEST)


def _ave_pool(x: np.ndarray, g: PoolGeometry) -> np.ndarray:
    # Σ over the real input / the window clipped to the padded input
    total = _window_reduce(x.astype(np.float32, copy=False), g, 0.0, np.add)
    divisor = np.outer(g.divisor(0, x.shape[2]), g.divisor(1, x.shape[3]))
    return (total / divisor.astype(np.float32)).astype(np.float32)


# ---- TensorRT ---------------------------------------------------------------------------------


def _trt_window_pool(ctx, node: Node, x):
    """IPoolingLayer with explicit padding rounded down: pre = pad, post = whatever makes the
    last window Caffe's (≥ pad; more when Caffe rounds up). MAX ignores padding. AVE divides by
    the real input in the window (average_count_excludes_padding), then multiplies by
    real / Caffe's divisor where they differ."""
    sizes = tuple(x.shape[2:])
    if any(n < 0 for n in sizes):  # Caffe's output size depends on them
        raise shape_error(node, "H or W is dynamic (-1) in the TensorRT network",
                          "keep the spatial dims fixed in the build's shape ranges")
    g = pool_geometry(node, tuple(x.shape))
    post = tuple(max(p, (o - 1) * s + k - n - p)
                 for n, k, s, p, o in zip(sizes, g.kernel, g.stride, g.pad, g.out))
    is_max = node.attrs["pool"] == "MAX"
    kind = ctx.trt.PoolingType.MAX if is_max else ctx.trt.PoolingType.AVERAGE
    layer = ctx.network.add_pooling_nd(x, kind, g.kernel)
    layer.stride_nd, layer.pre_padding, layer.post_padding = g.stride, g.pad, post
    layer.padding_mode = ctx.trt.PaddingMode.EXPLICIT_ROUND_DOWN
    layer.average_count_excludes_padding = True
    factor = None if is_max else np.outer(
        *(g.real_count(a, n) / g.divisor(a, n) for a, n in enumerate(sizes)))
    if factor is None or np.all(factor == 1):
        return ctx.out(layer)
    pooled = ctx.out(layer, "pool")
    correction = ctx.constant(factor.reshape((1, 1) + factor.shape), "divisor")
    return ctx.out(ctx.network.add_elementwise(pooled, correction,
                                               ctx.trt.ElementWiseOperation.PROD))


# ---- ONNX -------------------------------------------------------------------------------------


def _post_pads(g: PoolGeometry, sizes: tuple[int, int]) -> tuple[int, ...]:
    """The padding after the input that makes the last window Caffe's:
    post = (out − 1)·stride + kernel − in − pad (≤ 0: the windows stop short of the end)."""
    return tuple((o - 1) * s + k - n - p
                 for n, k, s, p, o in zip(sizes, g.kernel, g.stride, g.pad, g.out))


def _onnx_window_pool(ctx, node: Node, x: str, is_max: bool) -> str:
    """MaxPool/AveragePool with ceil_mode 0 and pads [pad, max(post, 0)]: then
    ⌊(in + pad + post − kernel) / stride⌋ + 1 = Caffe's output size and every window lies in
    the padded input. MAX ignores the padding (as Caffe). AVE with count_include_pad divides
    every window by kh·kw, so y = avg · (kh·kw / d) with d Caffe's divisor (the window clipped
    to [−pad, in + pad)), a constant map multiplied only where it is not 1.

    onnxruntime refuses pads ≥ kernel, which a window starting past the input (pad 0,
    stride > kernel) needs: then an explicit Pad (with −FLT_MAX for MAX, Caffe's initial value,
    or 0) and a pool without pads. (One difference is left: a MAX window whose real inputs are
    all −inf gives −inf, Caffe −FLT_MAX; a Max with −FLT_MAX on every pooling is not worth it.)"""
    sizes = tuple(ctx.static_dim(node.inputs[0], axis) for axis in (2, 3))
    if None in sizes:
        raise shape_error(node, "H or W is not fixed in the ONNX export",
                          "Caffe's pooled size depends on them: keep them fixed")
    g = pool_geometry(node, tuple(node.inputs[0].shape))
    post = tuple(max(q, 0) for q in _post_pads(g, sizes))
    pads = list(g.pad) + list(post)
    attrs = {"kernel_shape": list(g.kernel), "strides": list(g.stride), "ceil_mode": 0}
    if all(q < k for q, k in zip(post, g.kernel)):
        attrs["pads"] = pads
    else:
        fill = np.array(_FLT_LOWEST if is_max else 0, np.float32)
        x = ctx.add("Pad", [x, ctx.ints([0, 0] + pads[:2] + [0, 0] + pads[2:], "pads"),
                            ctx.constant(fill, "fill")], suffix="pad")[0]
    if is_max:
        return ctx.add("MaxPool", [x], **attrs)[0]
    with np.errstate(divide="ignore"):
        factor = np.float32(g.kernel[0] * g.kernel[1]) / _ave_divisor(g, sizes)
    if np.all(factor == 1):
        return ctx.add("AveragePool", [x], count_include_pad=1, **attrs)[0]
    mean = ctx.add("AveragePool", [x], suffix="pool", count_include_pad=1, **attrs)[0]
    divisor = ctx.constant(factor.reshape((1, 1) + factor.shape), "divisor")
    return ctx.add("Mul", [mean, divisor])[0]


def _ave_divisor(g: PoolGeometry, sizes: tuple[int, int]) -> np.ndarray:
    """Caffe's (OH, OW) divisor map as float32 (0 or negative for windows past the padded
    input, as Caffe computes them: kh·kw / d is then inf or negative, Σ = 0 gives nan/−0)."""
    return np.outer(g.divisor(0, sizes[0]), g.divisor(1, sizes[1])).astype(np.float32)


# ---- LRN --------------------------------------------------------------------------------------

NORM_REGIONS = ("ACROSS_CHANNELS", "WITHIN_CHANNEL")


@register_op
class LRN(Op):
    """y = x · (k + α/n · Σ x²)^−β over n = local_size neighbouring channels (ACROSS_CHANNELS),
    or y = x · (1 + α/n² · Σ x²)^−β over an n×n spatial square (WITHIN_CHANNEL, where Caffe
    ignores k); windows centred, zero-padded (lrn_param).
    """

    type = "LRN"
    param = "lrn_param"

    @staticmethod
    def parse(ctx, p):
        return {"local_size": p.local_size, "alpha": p.alpha, "beta": p.beta, "k": p.k,
                "norm_region": p.norm_region}

    @staticmethod
    def infer(ctx, node: Node, x: Shape) -> tuple[Shape, ...]:
        if len(x) != 4:
            raise shape_error(node, f"expected a 4-axis (N, C, H, W) bottom, found {x}")
        size, region = node.attrs["local_size"], node.attrs["norm_region"]
        if size < 1 or size % 2 == 0:
            raise shape_error(node, f"local_size must be odd, found {size}",
                              "use an odd lrn_param.local_size")
        if region not in NORM_REGIONS:
            raise shape_error(node, f"norm_region {region} is unknown",
                              f"use one of {', '.join(NORM_REGIONS)}")
        return (x,)

    @staticmethod
    def numpy(ctx, node: Node, x):
        size, alpha, beta = (node.attrs[k] for k in ("local_size", "alpha", "beta"))
        half = (size - 1) // 2
        axes = (1,) if node.attrs["norm_region"] == "ACROSS_CHANNELS" else (2, 3)
        pads = [(half, half) if axis in axes else (0, 0) for axis in range(4)]
        windows = np.lib.stride_tricks.sliding_window_view(
            np.pad(np.square(x), pads), (size,) * len(axes), axis=axes)
        mean = windows.sum(axis=tuple(range(-len(axes), 0)), dtype=np.float32) / np.float32(
            size ** len(axes))
        scale = _lrn_shift(node) + np.float32(alpha) * mean
        return (x * np.power(scale, np.float32(-beta)),)

    @staticmethod
    def tensorrt(ctx, node: Node, x):
        size, alpha, beta, k = (node.attrs[a] for a in ("local_size", "alpha", "beta", "k"))
        across = node.attrs["norm_region"] == "ACROSS_CHANNELS"
        # ILRNLayer: x / (k + α/n · Σ x²)^β across channels, within its parameter ranges
        if across and size <= 15 and 0.01 <= beta <= 1e5 and 1e-5 <= k <= 1e10 and abs(
                alpha) <= 1e20:
            return (ctx.out(ctx.network.add_lrn(x, size, alpha, beta, k)),)
        return (_trt_lrn_by_pooling(ctx, node, x, across),)

    @staticmethod
    def onnx(ctx, node: Node, x: str):
        size, alpha, beta, k = (node.attrs[a] for a in ("local_size", "alpha", "beta", "k"))
        if node.attrs["norm_region"] == "ACROSS_CHANNELS":
            # ONNX LRN: x / (bias + α/size · Σ x²)^β over channels [c − ⌊(size−1)/2⌋,
            # c + ⌈(size−1)/2⌉], zero outside: Caffe's α/n scaling and (odd n) centred window
            return (ctx.add("LRN", [x], size=size, alpha=float(alpha), beta=float(beta),
                            bias=float(k))[0],)
        return (_onnx_lrn_within_channel(ctx, node, x),)


def _lrn_shift(node: Node) -> np.float32:
    """k across channels; 1 within a channel (lrn_layer.cpp's power layer has shift 1)."""
    return np.float32(node.attrs["k"] if node.attrs["norm_region"] == "ACROSS_CHANNELS" else 1)


def _onnx_lrn_within_channel(ctx, node: Node, x: str) -> str:
    """y = x · (1 + α · mean_{n×n} x²)^−β: the mean by AveragePool over the zero-padded
    square (pads (n − 1)/2, stride 1, count_include_pad: every window is whole, so ÷ n²)."""
    size, half = node.attrs["local_size"], (node.attrs["local_size"] - 1) // 2
    square = ctx.add("Mul", [x, x], suffix="square")[0]
    mean = ctx.add("AveragePool", [square], suffix="mean", kernel_shape=[size, size],
                   pads=[half] * 4, strides=[1, 1], count_include_pad=1)[0]

    def scalar(value: float, name: str) -> str:
        return ctx.constant(np.array(value, np.float32), name)

    scaled = ctx.add("Mul", [mean, scalar(node.attrs["alpha"], "alpha")], suffix="scaled")[0]
    scale = ctx.add("Add", [scaled, scalar(_lrn_shift(node), "shift")], suffix="scale")[0]
    factor = ctx.add("Pow", [scale, scalar(-node.attrs["beta"], "minus_beta")],
                     suffix="factor")[0]
    return ctx.add("Mul", [x, factor])[0]


def _trt_lrn_by_pooling(ctx, node: Node, x, across: bool):
    """LRN from primitives: the window mean of x² by average pooling with zero padding counted
    (across channels: C becomes a pooled spatial axis of (N, 1, C, H·W)), then
    y = x · (shift + α·mean)^−β."""
    ops, size = ctx.trt.ElementWiseOperation, node.attrs["local_size"]
    half = (size - 1) // 2
    square = ctx.out(ctx.network.add_elementwise(x, x, ops.PROD), "square")
    if across:
        if x.shape[1] < 0:
            raise shape_error(node, "the channel axis is dynamic (-1) in the TensorRT network",
                              "keep the channels fixed in the build's shape ranges")
        square = ctx.reshape(square, (0, 1, x.shape[1], -1), "channels_as_rows")
    window, pad = ((size, 1), (half, 0)) if across else ((size, size), (half, half))
    layer = ctx.network.add_pooling_nd(square, ctx.trt.PoolingType.AVERAGE, window)
    layer.pre_padding = layer.post_padding = pad
    layer.average_count_excludes_padding = False   # divide by the whole window: n or n²
    mean = ctx.out(layer, "mean")
    if across:
        mean = ctx.reshape(mean, ctx.shape(x), "mean_reshape")
    scaled = with_scalar(ctx, mean, node.attrs["alpha"], ops.PROD, "alpha")
    scale = with_scalar(ctx, scaled, float(_lrn_shift(node)), ops.SUM, "shift")
    factor = with_scalar(ctx, scale, -node.attrs["beta"], ops.POW, "power")
    return ctx.out(ctx.network.add_elementwise(x, factor, ops.PROD))

