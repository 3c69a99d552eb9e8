"""Convolution-shaped layers: Convolution, Deconvolution, Im2col, and their shared geometry.

All three read ``convolution_param``: the channel ``axis`` (default 1; the axes after it are
spatial, N-D), and per spatial axis a kernel, stride, pad and dilation, each given once for
every axis or once per axis (``kernel_h``/``kernel_w`` and friends for 2-D only), as
base_conv_layer.cpp resolves them.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from caffe_lstm.ir.graph import Node, Shape
from caffe_lstm.ops.registry import Op, canonical_axis, count, register_op, shape_error
from caffe_lstm.ops.unit_output import unit_output_blobs


@dataclass(frozen=True)
class ConvGeometry:
    """The resolved convolution_param of one node, for a bottom of a given rank."""

    axis: int                      # the channel axis; the axes after it are spatial
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    pad: tuple[int, ...]
    dilation: tuple[int, ...]

    @property
    def extent(self) -> tuple[int, ...]:
        """The span of a dilated kernel: dilation·(kernel − 1) + 1 per axis."""
        return tuple(d * (k - 1) + 1 for k, d in zip(self.kernel, self.dilation))

    def conv_dims(self, spatial: Shape) -> tuple[int, ...]:
        """Convolution output dims: ⌊(in + 2·pad − extent) / stride⌋ + 1."""
        return tuple((n + 2 * p - e) // s + 1
                     for n, p, e, s in zip(spatial, self.pad, self.extent, self.stride))

    def deconv_dims(self, spatial: Shape) -> tuple[int, ...]:
        """Deconvolution output dims: stride·(in − 1) + extent − 2·pad."""
        return tuple(s * (n - 1) + e - 2 * p
                     for n, p, e, s in zip(spatial, self.pad, self.extent, self.stride))


def parse_conv_param(ctx, p) -> dict:
    """What convolution_param writes, unresolved: the spatial rank is only known in infer.

    A ``*_h``/``*_w`` field is None when not written (Caffe tests their presence).
    """
    written = {name: getattr(p, name) if p.has(name) else None
               for name in ("kernel_h", "kernel_w", "stride_h", "stride_w", "pad_h", "pad_w")}
    return {"num_output": p.num_output, "bias_term": p.bias_term, "group": p.group,
            "axis": p.axis, "kernel_size": list(p.kernel_size), "stride": list(p.stride),
            "pad": list(p.pad), "dilation": list(p.dilation), **written}


def conv_geometry(node: Node, x: Shape) -> ConvGeometry:
    """The kernel, stride, pad and dilation of every spatial axis of bottom ``x``."""
    axis = canonical_axis(node, node.attrs["axis"], len(x))
    n_spatial = len(x) - axis - 1
    if n_spatial < 1:
        raise shape_error(node, f"bottom {x} has no spatial axis after channel axis {axis}",
                          "convolution needs (…, channels, spatial…) bottoms")
    kernel = _per_axis(node, "kernel_size", "kernel", n_spatial, None)
    stride = _per_axis(node, "stride", "stride", n_spatial, 1)
    pad = _per_axis(node, "pad", "pad", n_spatial, 0)
    dilation = _per_axis(node, "dilation", None, n_spatial, 1)
    for what, values, low in (("kernel", kernel, 1), ("stride", stride, 1),
                              ("dilation", dilation, 1), ("pad", pad, 0)):
        if any(v < low for v in values):
            raise shape_error(node, f"{what} {list(values)} has a dim below {low}",
                              f"check convolution_param {what}")
    return ConvGeometry(axis, kernel, stride, pad, dilation)


def _per_axis(node: Node, field: str, hw: str | None, n_spatial: int,
              default: int | None) -> tuple[int, ...]:
    """A repeated field (once, or once per spatial axis) or its 2-D ``<hw>_h``/``<hw>_w``."""
    values = node.attrs.get(field) or []
    h, w = (node.attrs.get(f"{hw}_h"), node.attrs.get(f"{hw}_w")) if hw else (None, None)
    if h is not None or w is not None:
        if n_spatial != 2 or values:
            raise shape_error(node, f"{hw}_h/{hw}_w given with {len(values)} {field} entries "
                              f"for {n_spatial} spatial axes",
                              f"use {hw}_h/{hw}_w only for 2-D, and not with {field}")
        return (h or 0, w or 0)
    if not values and default is not None:
        return (default,) * n_spatial
    if len(values) not in (1, n_spatial):
        raise shape_error(node, f"{field} has {len(values)} entries for {n_spatial} spatial axes",
                          f"give {field} once, or once per spatial axis")
    return tuple(values) * n_spatial if len(values) == 1 else tuple(values)


def _check_channels(node: Node, channels: int) -> None:
    """num_output > 0 and both channel counts divisible by ``group``."""
    n, group = node.attrs["num_output"], node.attrs["group"]
    if n <= 0 or group <= 0:
        raise shape_error(node, f"num_output {n} and group {group} must be > 0",
                          "set convolution_param.num_output")
    if channels % group or n % group:
        raise shape_error(node, f"channels {channels} and num_output {n} must both be divisible "
                          f"by group {group}", "check convolution_param.group")


def _checked_dims(node: Node, dims: tuple[int, ...], x: Shape) -> tuple[int, ...]:
    if any(d <= 0 for d in dims):
        raise shape_error(node, f"the kernel does not fit bottom {x}: output dims {dims}",
                          "check the kernel, pad and dilation against the input size")
    return dims


def _conv_weight_blobs(node: Node, weight: Shape) -> tuple[tuple[str, Shape], ...]:
    bias = ("bias", (node.attrs["num_output"],))
    return (("weight", weight), bias) if node.attrs["bias_term"] else (("weight", weight),)


@register_op
class Convolution(Op):
    """y[b, m] = Σ_{c in m's group} W[m, c] ⋆ x[b, c] + bias[m] (convolution_param).

    W is (num_output, C/group, *kernel). Each spatial output dim is
    ⌊(in + 2·pad − dilation·(kernel − 1) − 1) / stride⌋ + 1.
    """

    type = "Convolution"
    param = "convolution_param"

    parse = staticmethod(parse_conv_param)

    @staticmethod
    def make_attrs(num_output: int, kernel: list[int], *, pad: int | list[int] = 0,
                   stride: int | list[int] = 1, dilation: int | list[int] = 1, axis: int = 1,
                   group: int = 1, bias_term: bool = True) -> dict:
        """The node attributes (convolution_param's fields): the kernel per spatial axis, pad,
        stride and dilation once for every axis or once per axis."""
        def listed(value):
            return [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]
        return {"num_output": num_output, "bias_term": bias_term, "group": group, "axis": axis,
                "kernel_size": listed(kernel), "stride": listed(stride), "pad": listed(pad),
                "dilation": listed(dilation), "kernel_h": None, "kernel_w": None,
                "stride_h": None, "stride_w": None, "pad_h": None, "pad_w": None}

    @staticmethod
    def infer(ctx, node: Node, x: Shape) -> tuple[Shape, ...]:
        g = conv_geometry(node, x)
        _check_channels(node, x[g.axis])
        dims = _checked_dims(node, g.conv_dims(x[g.axis + 1:]), x)
        return (x[:g.axis] + (node.attrs["num_output"],) + dims,)

    @staticmethod
    def blobs(ctx, node: Node, x: Shape) -> tuple[tuple[str, Shape], ...]:
        g = conv_geometry(node, x)
        weight = (node.attrs["num_output"], x[g.axis] // node.attrs["group"]) + g.kernel
        return _conv_weight_blobs(node, weight)

    @staticmethod
    def calibrate(node: Node, rng, inputs, blobs):
        """Unit output, its channels centred where offsets dominate (ops/unit_output.py)."""
        (output,) = Convolution.numpy(None, node, *inputs, *blobs)
        return unit_output_blobs(output, blobs, conv_geometry(node, inputs[0].shape).axis)

    @staticmethod
    def numpy(ctx, node: Node, x, w, b=None):
        g = conv_geometry(node, x.shape)
        batched = _batched(x, g.axis)
        y = _convolve(batched, w, g, node.attrs["group"])
        if b is not None:
            y += b.reshape((-1,) + (1,) * len(g.kernel))
        return (y.reshape(x.shape[:g.axis] + y.shape[1:]),)

    @staticmethod
    def tensorrt(ctx, node: Node, x, w, b=None):
        g = conv_geometry(node, tuple(x.shape))
        batched, nd = _to_trt_layout(ctx, node, x, g)
        layer = ctx.network.add_convolution_nd(batched, node.attrs["num_output"],
                                               _nd(g.kernel, 1), _weights(ctx, w),
                                               _weights(ctx, b))
        layer.num_groups = node.attrs["group"]
        layer.stride_nd, layer.dilation_nd = _nd(g.stride, 1), _nd(g.dilation, 1)
        layer.pre_padding = layer.post_padding = _nd(g.pad, 0)
        return (_from_trt_layout(ctx, ctx.out(layer, "conv" if nd else ""), x, g, nd),)

    @staticmethod
    def onnx(ctx, node: Node, x: str, w: str, b: str | None = None):
        # ONNX Conv has Caffe's geometry: ⌊(in + 2·pad − extent) / stride⌋ + 1, W (M, C/G, *k)
        g = conv_geometry(node, node.inputs[0].shape)
        batched = _onnx_batched(ctx, x, g)
        y = ctx.add("Conv", [batched, w] + ([b] if b else []), suffix=_inner(g),
                    group=node.attrs["group"], **_onnx_geometry(g))[0]
        return (_onnx_unbatched(ctx, x, y, g),)


@register_op
class Deconvolution(Op):
    """y = the transpose of Convolution: each x[b, c] scatters W[c, m] into y[b, m] at stride
    steps, then ``pad`` is cut from both ends (convolution_param).

    W is (C, num_output/group, *kernel). Each spatial output dim is
    stride·(in − 1) + dilation·(kernel − 1) + 1 − 2·pad.
    """

    type = "Deconvolution"
    param = "convolution_param"

    parse = staticmethod(parse_conv_param)

    @staticmethod
    def infer(ctx, node: Node, x: Shape) -> tuple[Shape, ...]:
        g = conv_geometry(node, x)
        _check_channels(node, x[g.axis])
        dims = _checked_dims(node, g.deconv_dims(x[g.axis + 1:]), x)
        return (x[:g.axis] + (node.attrs["num_output"],) + dims,)

    @staticmethod
    def blobs(ctx, node: Node, x: Shape) -> tuple[tuple[str, Shape], ...]:
        g = conv_geometry(node, x)
        weight = (x[g.axis], node.attrs["num_output"] // node.attrs["group"]) + g.kernel
        return _conv_weight_blobs(node, weight)

    @staticmethod
    def calibrate(node: Node, rng, inputs, blobs):
        """Unit output, its channels centred where offsets dominate (ops/unit_output.py)."""
        (output,) = Deconvolution.numpy(None, node, *inputs, *blobs)
        return unit_output_blobs(output, blobs, conv_geometry(node, inputs[0].shape).axis)

    @staticmethod
    def numpy(ctx, node: Node, x, w, b=None):
        g = conv_geometry(node, x.shape)
        y = _deconvolve(_batched(x, g.axis), w, g, node.attrs["group"])
        if b is not None:
            y += b.reshape((-1,) + (1,) * len(g.kernel))
        return (y.reshape(x.shape[:g.axis] + y.shape[1:]),)

    @staticmethod
    def tensorrt(ctx, node: Node, x, w, b=None):
        # TensorRT's deconvolution kernel is CKRS, Caffe's blob order; its padding crops.
        # TensorRT-RTX refuses strided dilated deconvolutions: the dilation goes into the
        # kernel instead, as zeros between the taps (exact).
        g = conv_geometry(node, tuple(x.shape))
        batched, nd = _to_trt_layout(ctx, node, x, g)
        kernel = _dilated_kernel(w, g.dilation)
        layer = ctx.network.add_deconvolution_nd(batched, node.attrs["num_output"],
                                                 _nd(kernel.shape[2:], 1), _weights(ctx, kernel),
                                                 _weights(ctx, b))
        layer.num_groups, layer.stride_nd = node.attrs["group"], _nd(g.stride, 1)
        layer.pre_padding = layer.post_padding = _nd(g.pad, 0)
        return (_from_trt_layout(ctx, ctx.out(layer, "deconv" if nd else ""), x, g, nd),)

    @staticmethod
    def onnx(ctx, node: Node, x: str, w: str, b: str | None = None):
        # ConvTranspose: stride·(in − 1) + output_padding + extent − pad_begin − pad_end with
        # output_padding 0 is Caffe's size; its W is (C, M/G, *k), Caffe's blob order
        g = conv_geometry(node, node.inputs[0].shape)
        batched = _onnx_batched(ctx, x, g)
        y = ctx.add("ConvTranspose", [batched, w] + ([b] if b else []), suffix=_inner(g),
                    group=node.attrs["group"], **_onnx_geometry(g))[0]
        return (_onnx_unbatched(ctx, x, y, g),)


@register_op
class Im2col(Op):
    """y[b, (c·K + k)] = the k-th kernel tap of x[b, c] at every output position, K = the
    number of taps, taps ordered row-major over the kernel axes (convolution_param).

    The spatial output dims are Convolution's; no learned blobs (CTPN turns conv5 into LSTM
    inputs with it).
    """

    type = "Im2col"
    param = "convolution_param"

    parse = staticmethod(parse_conv_param)

    @staticmethod
    def infer(ctx, node: Node, x: Shape) -> tuple[Shape, ...]:
        g = conv_geometry(node, x)
        dims = _checked_dims(node, g.conv_dims(x[g.axis + 1:]), x)
        return (x[:g.axis] + (x[g.axis] * count(g.kernel),) + dims,)

    @staticmethod
    def numpy(ctx, node: Node, x):
        g = conv_geometry(node, x.shape)
        batched = _batched(x, g.axis)
        # (B, C, *kernel, *out) with the taps in row-major kernel order, then C and K merged
        out = g.conv_dims(batched.shape[2:])
        columns = _unfold(_padded(batched, g.pad), g, out)
        merged = columns.reshape((batched.shape[0], -1) + out)
        return (merged.reshape(x.shape[:g.axis] + merged.shape[1:]),)

    @staticmethod
    def tensorrt(ctx, node: Node, x):
        # a grouped convolution with one group per channel and a one-hot kernel per tap:
        # output channel c·K + k copies tap k of channel c (exact: one product by 1)
        g = conv_geometry(node, tuple(x.shape))
        channels, taps = x.shape[g.axis], count(g.kernel)
        if channels < 0:
            raise shape_error(node, "the channel axis is dynamic (-1) in the TensorRT network",
                              "keep the channels fixed in the build's shape ranges")
        one_hot = np.eye(taps, dtype=np.float32).reshape((taps, 1) + g.kernel)
        kernel = np.tile(one_hot, (channels, 1) + (1,) * len(g.kernel))
        batched, nd = _to_trt_layout(ctx, node, x, g)
        layer = ctx.network.add_convolution_nd(batched, channels * taps, _nd(g.kernel, 1),
                                               _weights(ctx, kernel), _weights(ctx, None))
        layer.num_groups = channels
        layer.stride_nd, layer.dilation_nd = _nd(g.stride, 1), _nd(g.dilation, 1)
        layer.pre_padding = layer.post_padding = _nd(g.pad, 0)
        return (_from_trt_layout(ctx, ctx.out(layer, "im2col" if nd else ""), x, g, nd),)

    @staticmethod
    def onnx(ctx, node: Node, x: str):
        # as for TensorRT: Conv with group = C and a one-hot kernel per tap, output channel
        # c·K + k = 1 · tap k of channel c (+ 0 · the other taps: exact for finite inputs)
        g = conv_geometry(node, node.inputs[0].shape)
        channels, taps = ctx.static_dim(node.inputs[0], g.axis), count(g.kernel)
        if channels is None:
            raise shape_error(node, "the channel axis is not fixed in the ONNX export",
                              "the one-hot kernel needs it: keep the channels fixed")
        one_hot = np.eye(taps, dtype=np.float32).reshape((taps, 1) + g.kernel)
        kernel = ctx.constant(np.tile(one_hot, (channels, 1) + (1,) * len(g.kernel)), "one_hot")
        batched = _onnx_batched(ctx, x, g)
        y = ctx.add("Conv", [batched, kernel], suffix=_inner(g), group=channels,
                    **_onnx_geometry(g))[0]
        return (_onnx_unbatched(ctx, x, y, g),)


# ---- numpy ------------------------------------------------------------------------------------


def _batched(x: np.ndarray, axis: int) -> np.ndarray:
    """x as (B, C, *spatial): the axes before the channel axis merged (B = 1 for axis 0)."""
    return x.reshape((count(x.shape, 0, axis),) + x.shape[axis:])


def _padded(x: np.ndarray, pad: tuple[int, ...]) -> np.ndarray:
    """Zeros around every spatial axis of (B, C, *spatial)."""
    return np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in pad])


#: The most unfolded patches held at once (bytes): convolutions go through the batch in chunks.
_COLUMN_BUDGET = 64 * 2**20


def _unfold(padded: np.ndarray, g: ConvGeometry, out: tuple[int, ...]) -> np.ndarray:
    """im2col: cols[b, c, *k, *o] = padded[b, c, *(o·stride + k·dilation)], contiguous.

    A strided view of every window (sliding_window_view over the dilated extent, then every
    stride-th window and every dilation-th tap), copied once in (B, C, *kernel, *out) order.
    """
    n = len(out)
    spatial = tuple(range(2, 2 + n))
    views = np.lib.stride_tricks.sliding_window_view(padded, g.extent, axis=spatial)
    picked = views[(slice(None), slice(None))
                   + tuple(slice(0, s * (o - 1) + 1, s) for s, o in zip(g.stride, out))
                   + tuple(slice(None, None, d) for d in g.dilation)]
    order = (0, 1) + tuple(range(2 + n, 2 + 2 * n)) + spatial
    return np.ascontiguousarray(picked.transpose(order))


def _chunks(batch: int, item_bytes: int):
    """Batch slices whose unfolded patches stay within _COLUMN_BUDGET (at least one item)."""
    step = max(1, _COLUMN_BUDGET // max(item_bytes, 1))
    for start in range(0, batch, step):
        yield slice(start, min(start + step, batch))


def _convolve(x: np.ndarray, w: np.ndarray, g: ConvGeometry, group: int) -> np.ndarray:
    """y[b, m, *o] = Σ_{c, k} W[m, c, k] · cols[b, c, k, *o] within each group: one matrix
    product (G, M/G, C/G·K) @ (b, G, C/G·K, O) per chunk of the batch over unfolded patches."""
    out = g.conv_dims(x.shape[2:])
    padded = _padded(x, g.pad)
    taps, positions = count(g.kernel), count(out)
    w_groups = w.reshape(group, w.shape[0] // group, -1)
    y = np.empty((x.shape[0], w.shape[0]) + out, np.float32)
    for part in _chunks(x.shape[0], x.shape[1] * taps * positions * 4):
        cols = _unfold(padded[part], g, out).reshape(-1, group, w_groups.shape[2], positions)
        y[part] = np.matmul(w_groups, cols).reshape((-1, w.shape[0]) + out)
    return y


def _deconvolve(x: np.ndarray, w: np.ndarray, g: ConvGeometry, group: int) -> np.ndarray:
    """The transpose of _convolve: cols[b, m, k, *i] = Σ_c W[c, m, k] · x[b, c, *i] by one
    matrix product (G, M/G·K, C/G) @ (b, G, C/G, I) per chunk of the batch, then col2im: tap k
    adds cols[:, :, k] at i·stride + k·dilation of the uncropped output, which then loses
    ``pad`` at both ends."""
    c_per, m_per = x.shape[1] // group, w.shape[1]
    spatial, taps = x.shape[2:], count(g.kernel)
    full_dims = tuple(s * (n - 1) + e for n, s, e in zip(spatial, g.stride, g.extent))
    full = np.zeros((x.shape[0], m_per * group) + full_dims, np.float32)
    # (G, C/G, M/G·K) -> (G, M/G·K, C/G)
    w_groups = w.reshape(group, c_per, m_per * taps).transpose(0, 2, 1)
    offsets = list(itertools.product(*(range(k) for k in g.kernel)))
    places = [tuple(slice(o * d, o * d + s * (n - 1) + 1, s)
                    for o, d, s, n in zip(offset, g.dilation, g.stride, spatial))
              for offset in offsets]
    for part in _chunks(x.shape[0], m_per * group * taps * count(spatial) * 4):
        batch = x[part].reshape(-1, group, c_per, count(spatial))
        cols = np.matmul(w_groups, batch).reshape((-1, m_per * group, taps) + spatial)
        for tap, place in enumerate(places):
            full[(part, slice(None)) + place] += cols[:, :, tap]
    crop = tuple(slice(p, n - p) for p, n in zip(g.pad, full_dims))
    return full[(slice(None), slice(None)) + crop]


# ---- ONNX -------------------------------------------------------------------------------------

#: Slice's "to the end" bound.
_INT64_MAX = np.iinfo(np.int64).max


def _onnx_geometry(g: ConvGeometry) -> dict:
    """Conv/ConvTranspose attributes; ``pads`` lists every axis's begin, then every end."""
    return {"kernel_shape": list(g.kernel), "strides": list(g.stride),
            "dilations": list(g.dilation), "pads": list(g.pad) * 2}


def _inner(g: ConvGeometry) -> str:
    """The suffix of the convolution node: none when it makes the top itself (axis 1)."""
    return "" if g.axis == 1 else "conv"


def _onnx_dims(ctx, x: str, start: int, end: int | None = None, suffix: str = "dims") -> str:
    """The int64 dims [start, end) of x at run time (Shape with start/end from opset 15)."""
    if ctx.opset >= 15:
        bounds = {"start": start} | ({"end": end} if end is not None else {})
        return ctx.add("Shape", [x], suffix=suffix, **bounds)[0]
    shape = ctx.add("Shape", [x], suffix=f"{suffix}_all")[0]
    stop = ctx.ints([_INT64_MAX if end is None else end], "end")
    return ctx.add("Slice", [shape, ctx.ints([start], "start"), stop], suffix=suffix)[0]


def _onnx_batched(ctx, x: str, g: ConvGeometry) -> str:
    """x as (B, C, *spatial) for Conv: unchanged for axis 1, a leading 1 for axis 0, the axes
    before the channel axis merged otherwise (B symbolic: a Reshape to [−1, dims from axis])."""
    ctx.require_opset(13, "a convolution on axis 0 (Unsqueeze/Squeeze with axes inputs)")
    if g.axis == 1:
        return x
    if g.axis == 0:
        return ctx.add("Unsqueeze", [x, ctx.ints([0], "axis0")], suffix="batch")[0]
    tail = _onnx_dims(ctx, x, g.axis, suffix="tail_dims")
    shape = ctx.add("Concat", [ctx.ints([-1], "minus_one"), tail], suffix="batch_shape",
                    axis=0)[0]
    return ctx.add("Reshape", [x, shape], suffix="batch")[0]


def _onnx_unbatched(ctx, x: str, y: str, g: ConvGeometry) -> str:
    """The inverse of _onnx_batched on the output: x's leading axes back."""
    if g.axis == 1:
        return y
    if g.axis == 0:
        return ctx.add("Squeeze", [y, ctx.ints([0], "axis0")])[0]
    lead = _onnx_dims(ctx, x, 0, g.axis, suffix="lead_dims")
    rest = _onnx_dims(ctx, y, 1, suffix="out_dims")
    shape = ctx.add("Concat", [lead, rest], suffix="out_shape", axis=0)[0]
    return ctx.add("Reshape", [y, shape])[0]


# ---- TensorRT ---------------------------------------------------------------------------------


def _nd(values: tuple[int, ...], filler: int) -> tuple[int, ...]:
    """Per-axis values for TensorRT, which has no 1-D convolution: a 1-D axis gets a second
    axis of size 1 (``filler`` is its value: 1 for kernel/stride/dilation, 0 for pad)."""
    return values + (filler,) if len(values) == 1 else values


def _weights(ctx, array: np.ndarray | None):
    """A trt.Weights in the network's float type (empty for None), kept alive for the build."""
    if array is None:
        return ctx.trt.Weights(ctx.float_trt)   # TensorRT refuses an empty array's pointer
    data = np.ascontiguousarray(array, dtype=ctx.float_np)
    ctx.keep_alive.append(data)
    return ctx.trt.Weights(data)


def _dilated_kernel(w: np.ndarray, dilation: tuple[int, ...]) -> np.ndarray:
    """W with dilation − 1 zeros between its taps on every spatial axis: a plain kernel of
    the dilated extent that computes the same."""
    if all(d == 1 for d in dilation):
        return w
    extent = tuple(d * (k - 1) + 1 for k, d in zip(w.shape[2:], dilation))
    spread = np.zeros(w.shape[:2] + extent, w.dtype)
    spread[(slice(None), slice(None)) + tuple(slice(None, None, d) for d in dilation)] = w
    return spread


def _to_trt_layout(ctx, node: Node, x, g: ConvGeometry):
    """x as TensorRT's (N, C, 2 or 3 spatial): leading axes merged (or one added for axis 0),
    a 1-D spatial axis gets a trailing size-1 axis. Returns (tensor, whether it was changed)."""
    n_spatial = len(g.kernel)
    if n_spatial > 3:
        raise shape_error(node, f"{n_spatial} spatial axes: TensorRT convolves 1 to 3",
                          "reshape the blob to at most 3 spatial axes")
    tensor = x
    if g.axis != 1:
        tail = tuple(x.shape[g.axis:])
        if any(d < 0 for d in tail):
            raise shape_error(node, "channel or spatial dims are dynamic with axis != 1",
                              "keep them fixed in the build's shape ranges")
        tensor = ctx.reshape(x, (-1,) + tail if g.axis > 0 else (1,) + tail, "batch")
    if n_spatial == 1:
        tensor = ctx.unsqueeze(tensor, 3, "to_2d")
    return tensor, tensor is not x


def _from_trt_layout(ctx, y, x, g: ConvGeometry, changed: bool):
    """The inverse of _to_trt_layout on the output: x's leading axes back, 1-D again."""
    if not changed:
        return y
    if len(g.kernel) == 1:
        y = ctx.squeeze(y, 3, "from_2d" if g.axis != 1 else "")
    if g.axis == 1:
        return y
    lead = tuple(x.shape[:g.axis])
    if all(d >= 0 for d in lead):
        return ctx.reshape(y, lead + tuple(y.shape[1:]), "")
    shape = ctx.concat_shape([ctx.dims(x, 0, g.axis), ctx.dims(y, 1)])
    return ctx.reshape(y, shape, "")
