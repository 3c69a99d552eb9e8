"""Evaluators of the windowed TensorRT layers: convolution, deconvolution, pooling, LRN, top-k."""

from __future__ import annotations

from functools import reduce
from typing import Any

import numpy as np

from caffe_lstm.backends.tensorrt.network_eval.common import (NetworkEvalError, NotModeledError,
                                                              axes_of, evaluates, numpy_dtype,
                                                              wide)

# Windowed layers: convolution, deconvolution, pooling, LRN; and top-k.


def _padding(layer: Any, n_spatial: int) -> tuple[tuple[int, ...], tuple[int, ...], str]:
    """(pre, post, rounding) of an explicit-padding layer; SAME modes are not evaluated."""
    mode = layer.padding_mode.name
    if mode not in ("EXPLICIT_ROUND_DOWN", "EXPLICIT_ROUND_UP"):
        raise NotModeledError(f"padding mode {mode}")
    pre, post = tuple(layer.pre_padding), tuple(layer.post_padding)
    if len(pre) != n_spatial or len(post) != n_spatial:
        raise NetworkEvalError(f"padding {pre}/{post} for {n_spatial} spatial axes")
    return pre, post, "up" if mode.endswith("UP") else "down"


def _out_dims(sizes, extents, strides, pre, post, rounding: str) -> tuple[int, ...]:
    """⌊ or ⌈(in + pre + post − extent) / stride⌉ + 1 per spatial axis."""
    spans = [n + a + b - e for n, e, a, b in zip(sizes, extents, pre, post)]
    if rounding == "up":
        return tuple(-(-span // s) + 1 for span, s in zip(spans, strides))
    return tuple(span // s + 1 for span, s in zip(spans, strides))


def _window_view(x: np.ndarray, kernel, strides, dilations, pre, out, fill) -> np.ndarray:
    """(…, *out, *kernel): window o of the trailing len(kernel) axes starts at o·stride − pre,
    tap j reads o·stride − pre + j·dilation; positions outside x read ``fill``."""
    lead = x.ndim - len(kernel)
    widths = [(a, (o - 1) * s + (k - 1) * d + 1 - a - n)
              for n, k, s, d, a, o in zip(x.shape[lead:], kernel, strides, dilations, pre, out)]
    grown = np.pad(x, [(0, 0)] * lead + [(a, max(b, 0)) for a, b in widths],
                   constant_values=fill)
    grown = grown[(slice(None),) * lead + tuple(slice(0, n + a + b) for n, (a, b)
                                                in zip(x.shape[lead:], widths))]
    extents = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    view = np.lib.stride_tricks.sliding_window_view(grown, extents,
                                                   axis=tuple(range(lead, x.ndim)))
    index = ((slice(None),) * lead + tuple(slice(None, None, s) for s in strides)
             + tuple(slice(None, None, d) for d in dilations))
    return view[index]


@evaluates("CONVOLUTION", "IConvolutionLayer")
def _convolution(layer, inputs, run):
    """y[n, g·K/G + k] = Σ_c Σ_taps W[g, k, c, taps] · x_padded[n, g·C/G + c, o·stride +
    taps·dilation] + bias; the kernel is GKCRS, the padding zeros."""
    x = wide(inputs[0])
    if len(inputs) > 1 and any(t is not None for t in inputs[1:]):
        raise NotModeledError("convolution kernel or bias given as tensors")
    kernel, groups = tuple(layer.kernel_size_nd), layer.num_groups
    strides, dilations = tuple(layer.stride_nd), tuple(layer.dilation_nd)
    pre, post, rounding = _padding(layer, len(kernel))
    extents = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    out = _out_dims(x.shape[2:], extents, strides, pre, post, rounding)
    windows = _window_view(x, kernel, strides, dilations, pre, out, 0)
    n, c = x.shape[:2]
    weights = wide(np.asarray(layer.kernel)).reshape(
        (groups, layer.num_output_maps // groups, c // groups) + kernel)
    y = _grouped_correlation(windows.reshape((n, groups, c // groups) + windows.shape[2:]),
                             weights).reshape((n, layer.num_output_maps) + out)
    return [_with_bias(y, layer.bias).astype(inputs[0].dtype)]


#: The most bytes of gathered windows one matrix product takes (the batch goes in chunks).
_WINDOW_BUDGET = 256 * 2**20


def _grouped_correlation(windows: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """y[n, g, k, *o] = Σ_c Σ_taps windows[n, g, c, *o, *taps] · weights[g, k, c, *taps]:
    per group and chunk of the batch one tensordot over (c, taps), a BLAS matrix product on
    the gathered windows (an einsum over the strided view takes minutes on an AlexNet)."""
    n, groups = windows.shape[:2]
    spatial = (windows.ndim - 3) // 2
    summed = [2] + list(range(3 + spatial, windows.ndim))      # c and the taps, per group
    item = windows[0, 0].size * windows.itemsize
    step = max(1, _WINDOW_BUDGET // max(item, 1))
    y = np.empty((n, groups, weights.shape[1]) + windows.shape[3:3 + spatial], np.float64)
    for g in range(groups):
        for start in range(0, n, step):
            part = slice(start, start + step)
            taps = [1] + list(range(2, 2 + spatial))
            product = np.tensordot(windows[part, g], weights[g],
                                   axes=([a - 1 for a in summed], taps))
            y[part, g] = np.moveaxis(product, -1, 1)
    return y


def _with_bias(y: np.ndarray, bias: Any) -> np.ndarray:
    """y plus one bias per output map (axis 1); an empty bias adds nothing."""
    b = wide(np.asarray(bias))
    return y if b.size == 0 else y + b.reshape((1, -1) + (1,) * (y.ndim - 2))


@evaluates("DECONVOLUTION", "IDeconvolutionLayer")
def _deconvolution(layer, inputs, run):
    """The transposed convolution, evaluated as a convolution: x spread out with stride − 1
    zeros between elements, padded by dilation·(kernel − 1) minus the layer's pre/post padding
    (which crops the output), convolved with the kernel flipped and its C and K swapped; the
    kernel is CKRS (C input channels, K = output maps per group)."""
    x = wide(inputs[0])
    if len(inputs) > 1 and any(t is not None for t in inputs[1:]):
        raise NotModeledError("deconvolution kernel or bias given as tensors")
    kernel, groups = tuple(layer.kernel_size_nd), layer.num_groups
    strides, dilations = tuple(layer.stride_nd), tuple(layer.dilation_nd)
    pre, post, _ = _padding(layer, len(kernel))
    n, c = x.shape[:2]
    spread = np.zeros((n, c) + tuple((d - 1) * s + 1 for d, s in zip(x.shape[2:], strides)),
                      x.dtype)
    spread[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides)] = x
    full = [(k - 1) * d for k, d in zip(kernel, dilations)]
    weights = wide(np.asarray(layer.kernel)).reshape(
        (groups, c // groups, layer.num_output_maps // groups) + kernel)
    flipped = np.flip(weights, axis=tuple(range(3, 3 + len(kernel)))).swapaxes(1, 2)
    front = [f - a for f, a in zip(full, pre)]
    out = tuple(m + f - a - b for m, f, a, b in zip(spread.shape[2:], full, pre, post))
    if min(front) < 0:   # more padding than the kernel's reach: crop the front first
        spread = spread[(slice(None),) * 2 + tuple(slice(max(-f, 0), None) for f in front)]
        front = [max(f, 0) for f in front]
    windows = _window_view(spread, kernel, (1,) * len(kernel), dilations, front, out, 0)
    y = _grouped_correlation(windows.reshape((n, groups, c // groups) + windows.shape[2:]),
                             flipped).reshape((n, layer.num_output_maps) + out)
    return [_with_bias(y, layer.bias).astype(inputs[0].dtype)]


@evaluates("POOLING", "IPoolingLayer")
def _pooling(layer, inputs, run):
    """MAX over the window's elements inside x (padding never wins); AVERAGE = their sum
    divided by that count (average_count_excludes_padding) or by the window's overlap with
    the padded input [−pre, in + post) (otherwise)."""
    x, kind = wide(inputs[0]), layer.type.name     # IPoolingLayer.type is the PoolingType
    if kind not in ("MAX", "AVERAGE"):
        raise NotModeledError(f"pooling type {kind}")
    kernel, strides = tuple(layer.window_size_nd), tuple(layer.stride_nd)
    pre, post, rounding = _padding(layer, len(kernel))
    sizes, spatial = x.shape[x.ndim - len(kernel):], tuple(range(-len(kernel), 0))
    out = _out_dims(sizes, kernel, strides, pre, post, rounding)
    ones = (1,) * len(kernel)
    if kind == "MAX":
        y = _window_view(x, kernel, strides, ones, pre, out, -np.inf).max(axis=spatial)
        return [y.astype(inputs[0].dtype)]
    total = _window_view(x, kernel, strides, ones, pre, out, 0).sum(axis=spatial)
    low, high = ((0,) * len(kernel), sizes) if layer.average_count_excludes_padding else (
        tuple(-a for a in pre), tuple(n + b for n, b in zip(sizes, post)))
    counts = [np.minimum(np.arange(o) * s - a + k, hi) - np.maximum(np.arange(o) * s - a, lo)
              for o, s, a, k, lo, hi in zip(out, strides, pre, kernel, low, high)]
    divisor = reduce(np.multiply.outer, counts)
    return [(total / divisor).astype(inputs[0].dtype)]


@evaluates("LRN", "ILRNLayer")
def _lrn(layer, inputs, run):
    """x / (k + α/w · Σ x²)^β, the sum over the w channels centred on each one (zeros past the
    ends); the channel axis is the third from last. NvInfer.h leaves the 1/w implicit; the
    Caffe and ONNX parsers pass their α (defined with α/w) unchanged, so this is TensorRT's."""
    x, w = wide(inputs[0]), layer.window_size
    axis, half = x.ndim - 3, (layer.window_size - 1) // 2
    if w % 2 == 0:
        raise NetworkEvalError(f"LRN window {w} is even")
    square = np.pad(np.square(x), [(half, half) if a == axis else (0, 0) for a in range(x.ndim)])
    total = np.lib.stride_tricks.sliding_window_view(square, w, axis=axis).sum(axis=-1)
    y = x / np.power(layer.k + layer.alpha / w * total, layer.beta)
    return [y.astype(inputs[0].dtype)]


@evaluates("TOPK", "ITopKLayer")
def _topk(layer, inputs, run):
    """The k largest (MAX) or smallest (MIN) values along the one axis of the bitmask, sorted,
    and their indices; equal values keep their order (TensorRT does not specify one). k is the
    layer's attribute, or a 0-D shape tensor (what TensorRT's ONNX parser makes of TopK's K)."""
    x = inputs[0]
    k = int(np.asarray(inputs[1]).reshape(-1)[0]) if len(inputs) > 1 and inputs[1] is not None \
        else layer.k
    axes = axes_of(layer.axes, x.ndim)
    if len(axes) != 1:
        raise NetworkEvalError(f"top-k axes bitmask {layer.axes:#b} selects {len(axes)} axes")
    key = -wide(x) if layer.op.name == "MAX" else wide(x)
    order = np.argsort(key, axis=axes[0], kind="stable")
    index = np.take(order, np.arange(k), axis=axes[0])
    values = np.take_along_axis(x, index, axis=axes[0])
    return [values, index.astype(numpy_dtype(layer.indices_type))]


def _grid_pixels(g: np.ndarray, size: int, align_corners: bool) -> np.ndarray:
    """A normalized grid coordinate in [-1, 1] as a pixel position along an axis of `size`:
    -1 and 1 are the outer pixels' centres with align_corners, their outer edges without."""
    return (g + 1) / 2 * (size - 1) if align_corners else ((g + 1) * size - 1) / 2


@evaluates("GRID_SAMPLE", "IGridSampleLayer")
def _grid_sample(layer, inputs, run):
    """y[n, c, i, j] = bilinear read of x[n, c] at grid[n, i, j] = (x: width, y: height);
    corners outside the input read 0 (sample mode FILL), as ONNX GridSample's zeros padding."""
    x, grid = inputs
    if layer.interpolation_mode.name != "LINEAR" or layer.sample_mode.name != "FILL":
        raise NotModeledError(f"grid sample {layer.interpolation_mode.name} with "
                                  f"{layer.sample_mode.name}")
    if x.ndim != 4 or grid.ndim != 4 or grid.shape[-1] != 2 or grid.shape[0] != x.shape[0]:
        raise NetworkEvalError(f"grid sample of {x.shape} at a grid {grid.shape}")
    height, width = x.shape[2:]
    data, g = wide(x), wide(grid).astype(np.float64)
    cols = _grid_pixels(g[..., 0], width, layer.align_corners)
    rows = _grid_pixels(g[..., 1], height, layer.align_corners)
    row0, col0 = np.floor(rows), np.floor(cols)
    batch = np.arange(x.shape[0])[:, None, None]
    y = np.zeros(grid.shape[:3] + (x.shape[1],))
    for r, wr in ((row0, row0 + 1 - rows), (row0 + 1, rows - row0)):
        for c, wc in ((col0, col0 + 1 - cols), (col0 + 1, cols - col0)):
            inside = (r >= 0) & (r < height) & (c >= 0) & (c < width)
            picked = data[batch, :, np.clip(r, 0, height - 1).astype(np.int64),
                          np.clip(c, 0, width - 1).astype(np.int64)]     # (N, Ho, Wo, C)
            y += np.where(inside, wr * wc, 0)[..., None] * picked
    return [np.moveaxis(y, -1, 1).astype(x.dtype)]
