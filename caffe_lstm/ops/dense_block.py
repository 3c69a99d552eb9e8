"""caffe_ocr's DenseBlock: a fused DenseNet block (DenseBlock_layer.cpp/.cu of senlinuc/caffe_ocr,
denseblock_param), computed directly (``numpy``) and expanded into primitive layers (``expand``).

What the fork computes at TEST, per transition i = 0 … n−1 on features x_i (N, C_i, H, W),
C_i = C_0 + i·G (C_0 = the bottom's channels; the fork ignores ``initChannel``):

    y = ReLU(γ_i ⊙ (x_i − μ_i) / √(σ²_i + ε) + β_i)            ε = 1e-5 (cuDNN's minimum)
    with use_BC: y = ReLU(BN'(W'_i ∗ y))                          W'_i (4G, C_i, 1, 1)
    x_{i+1} = Concat_channels(x_i, W_i ∗ y)                       W_i (G, C_i or 4G, 3, 3)

``∗`` is the fork's convolution: cuDNN's CUDNN_CONVOLUTION mode (its CPU code too), a true
convolution whose kernel is flipped against Caffe's cross-correlation; pad 1, stride 1, no
bias (3×3 and 1×1 are fixed in the fork, which ignores pad_h, pad_w, the strides and
filter_H/W). Dropout is applied only in TRAIN. μ, σ² are the stored statistics as they are:
the fork's GPU forward (cudnnBatchNormalizationForwardInference) uses them directly, so the
last blob (the "factor" of Caffe's BatchNorm) is read but unused. (The fork's CPU forward
divides them by that factor, which its GPU training never updates from 0 — so on a GPU-trained
model the CPU path would normalise with μ = σ² = 0; the GPU path is the one models were trained
and run with.)

Blobs, in the fork's order (LayerSetUp), n = numTransition, each group n long:
filters W_0…W_{n−1}, scalers γ, biases β, means μ, variances σ² (γ, β, μ, σ² shaped
(1, C_i, 1, 1)), then with use_BC the 1×1 filters W', and γ', β', μ', σ'² (1, 4G, 1, 1);
last the factor (1,): 5n + 1 blobs, or 10n + 1 with use_BC.

The expansion writes per transition BatchNorm (use_global_stats, ε, the factor 1) + Scale
(bias) + ReLU [+ Convolution 1×1 + BatchNorm + Scale + ReLU] + Convolution 3×3 (the filter
flipped) + Concat (axis 1), with the blobs reshaped to the primitive layers' own shapes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from caffe_lstm.ir.graph import Node, Shape, Value
from caffe_lstm.ops.activation import ReLU
from caffe_lstm.ops.elementwise import Scale
from caffe_lstm.ops.registry import Op, register_op, shape_error

#: cuDNN's CUDNN_BN_MIN_EPSILON (1e-5 in the cuDNN 5–7 the fork builds with; its CPU code too).
EPS = 1e-5
#: The blob groups of one transition, in the fork's order; the bottleneck's follow with use_BC.
GROUPS = ("filter", "scaler", "bias", "mean", "variance")
BC_GROUPS = ("bc_filter", "bc_scaler", "bc_bias", "bc_mean", "bc_variance")


@dataclass(frozen=True)
class _Geometry:
    """The block's sizes: n transitions, growth G, bottom channels C_0, bottleneck or not."""

    transitions: int
    growth: int
    channels: int
    bottleneck: bool

    def width(self, i: int) -> int:
        """C_i = C_0 + i·G, the channels transition i reads."""
        return self.channels + i * self.growth

    @property
    def groups(self) -> tuple[str, ...]:
        return GROUPS + (BC_GROUPS if self.bottleneck else ())

    def blob_shape(self, group: str, i: int) -> Shape:
        quad, width = 4 * self.growth, self.width(i)
        if group == "filter":
            return (self.growth, quad if self.bottleneck else width, 3, 3)
        if group == "bc_filter":
            return (quad, width, 1, 1)
        return (1, quad if group.startswith("bc_") else width, 1, 1)


def _geometry(node: Node, x: Shape) -> _Geometry:
    """Checks the bottom (N, C, H, W) and the block's sizes."""
    n, growth = node.attrs["numTransition"], node.attrs["growthRate"]
    if len(x) != 4:
        raise shape_error(node, f"the bottom must be (N, C, H, W), found {x}",
                          "DenseBlock works on 4-D feature maps")
    if n < 1 or growth < 1:
        raise shape_error(node, f"numTransition {n} and growthRate {growth} must be >= 1",
                          "set both in denseblock_param")
    return _Geometry(n, growth, x[1], node.attrs["use_BC"])


def _by_group(g: _Geometry, blobs: list) -> dict[str, list]:
    """The blobs (file order) as {group: [one per transition]}, plus "factor": [last]."""
    n = g.transitions
    grouped = {group: list(blobs[k * n:(k + 1) * n]) for k, group in enumerate(g.groups)}
    grouped["factor"] = [blobs[len(g.groups) * n]]
    return grouped


# ---- the direct computation -------------------------------------------------------------------


def _convolve(x: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """The fork's convolution (CUDNN_CONVOLUTION), same size out, pad k // 2, no bias:
    y[n, g, h, w] = Σ_{c, a, b} K[g, c, a, b] · x[n, c, h + p − a, w + p − b]."""
    size = kernel.shape[2]
    pad = size // 2
    padded = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    height, width = x.shape[2:]
    y = np.zeros((x.shape[0], kernel.shape[0], height, width))
    for a in range(size):
        for b in range(size):
            # x[h + p − a] is padded[h + 2p − a]
            window = padded[:, :, 2 * pad - a:2 * pad - a + height, 2 * pad - b:2 * pad - b + width]
            y += np.einsum("nchw,gc->nghw", window, kernel[:, :, a, b])
    return y


def _bn_relu_direct(x: np.ndarray, w: dict[str, list], groups: tuple[str, ...], i: int):
    # y = ReLU(γ ⊙ (x − μ) / √(σ² + ε) + β), per channel, μ and σ² as stored
    _, scaler, bias, mean, variance = (w[group][i] for group in groups)
    return np.maximum(scaler * (x - mean) / np.sqrt(variance + EPS) + bias, 0.0)


def _forward(g: _Geometry, x: np.ndarray, w: dict[str, list]) -> np.ndarray:
    features = x
    for i in range(g.transitions):
        y = _bn_relu_direct(features, w, GROUPS, i)
        if g.bottleneck:
            # y = ReLU(BN'(W'_i ∗ y))
            y = _bn_relu_direct(_convolve(y, w["bc_filter"][i]), w, BC_GROUPS, i)
        # x_{i+1} = Concat(x_i, W_i ∗ y)
        features = np.concatenate([features, _convolve(y, w["filter"][i])], axis=1)
    return features


# ---- the expansion ----------------------------------------------------------------------------


def _weight(node: Node, source: Value, name: str, transform) -> Value:
    """A primitive layer's blob made from one of the block's: ``transform(data)``, or no data
    while the block has none; named ``<layer>/<name>``."""
    data = None if source.data is None else np.ascontiguousarray(transform(np.asarray(source.data)))
    shape = tuple(transform(np.zeros(source.shape)).shape)
    return Value(f"{node.name}/{name}", shape, data, is_weight=True)


def _per_channel(node: Node, source: Value, name: str) -> Value:
    """(1, C, 1, 1) -> (C,): a BatchNorm statistic or a Scale's blob."""
    return _weight(node, source, name, lambda a: a.reshape(-1))


def _flipped(node: Node, source: Value, name: str) -> Value:
    """The fork's convolution kernel as Caffe's cross-correlation kernel: both spatial axes
    reversed."""
    return _weight(node, source, name, lambda a: a[:, :, ::-1, ::-1])


def _unit_factor(node: Node, factor: Value, name: str) -> Value:
    """Caffe's BatchNorm divides its statistics by this factor: 1 keeps them as stored."""
    return _weight(node, factor, name, lambda a: np.ones(1, np.float32))


def _conv_attrs(num_output: int, kernel: int) -> dict:
    """convolution_param of a same-size convolution without bias (as parse_conv_param makes it)."""
    unset = dict.fromkeys(("kernel_h", "kernel_w", "stride_h", "stride_w", "pad_h", "pad_w"))
    return {"num_output": num_output, "bias_term": False, "group": 1, "axis": 1,
            "kernel_size": [kernel], "stride": [1], "pad": [kernel // 2], "dilation": [1],
            **unset}


def _bn_relu(b, node: Node, x: Value, w: dict[str, list], groups: tuple[str, ...], i: int,
             tag: str) -> Value:
    """BatchNorm (stored statistics) + Scale (γ, β) + ReLU, named ``<tag>_{bn,scale,relu}_i``."""
    _, scaler, bias, mean, variance = (w[group][i] for group in groups)
    factor = _unit_factor(node, w["factor"][0], f"{tag}bn_{i}/factor")
    stats = [_per_channel(node, mean, f"{tag}bn_{i}/mean"),
             _per_channel(node, variance, f"{tag}bn_{i}/variance"), factor]
    # x̂ = (x − μ) / √(σ² + ε)
    (normalized,) = b.add("BatchNorm", f"{tag}bn_{i}", [x],
                          {"use_global_stats": True, "eps": EPS}, stats)
    # y = γ ⊙ x̂ + β
    (scaled,) = b.add("Scale", f"{tag}scale_{i}", [normalized],
                      Scale.make_attrs(axis=1, num_axes=1, bias_term=True),
                      [_per_channel(node, scaler, f"{tag}scale_{i}/gamma"),
                       _per_channel(node, bias, f"{tag}scale_{i}/beta")])
    # ReLU(y)
    return b.add("ReLU", f"{tag}relu_{i}", [scaled], ReLU.make_attrs())[0]


def expand_dense_block(b, node: Node) -> None:
    """The block as BatchNorm, Scale, ReLU, Convolution and Concat layers (the module docstring)."""
    g = _geometry(node, node.inputs[0].shape)
    w = _by_group(g, node.weights)
    features = node.inputs[0]
    for i in range(g.transitions):
        y = _bn_relu(b, node, features, w, GROUPS, i, "")
        if g.bottleneck:
            # y = ReLU(BN'(W'_i ∗ y))   (1×1: the flip changes nothing)
            (y,) = b.add("Convolution", f"bc_conv_{i}", [y], _conv_attrs(4 * g.growth, 1),
                         [_flipped(node, w["bc_filter"][i], f"bc_conv_{i}/weight")])
            y = _bn_relu(b, node, y, w, BC_GROUPS, i, "bc_")
        # W_i ∗ y, the kernel flipped into Caffe's cross-correlation
        (new,) = b.add("Convolution", f"conv_{i}", [y], _conv_attrs(g.growth, 3),
                       [_flipped(node, w["filter"][i], f"conv_{i}/weight")])
        last = i == g.transitions - 1
        output = node.outputs[0] if last else Value(f"{node.name}/concat_{i}")
        # x_{i+1} = Concat_channels(x_i, W_i ∗ y)
        features = b.add("Concat", f"concat_{i}", [features, new], {"axis": 1},
                         outputs=[output])[0]


@register_op
class DenseBlock(Op):
    """x_{i+1} = Concat(x_i, W_i ∗ ReLU(γ_i ⊙ (x_i − μ_i)/√(σ²_i + ε) + β_i)), i < n
    (denseblock_param: numTransition n, growthRate G, use_BC; caffe_ocr's fused layer).

    Bottom (N, C, H, W); top (N, C + n·G, H, W). With use_BC a 1×1 convolution to 4G channels,
    BN and ReLU come before each 3×3 one. ∗ is the fork's flipped-kernel convolution, pad 1;
    ε = 1e-5; μ, σ² used as stored. Blobs: per group of n (filters, γ, β, μ, σ² [, the
    bottleneck's five]) and a last unused factor. The rewrite expands it into primitive layers
    (ops/dense_block.py has the details and the fork's sources).
    """

    type = "DenseBlock"
    origin = "caffe_ocr, senlinuc/caffe_ocr@81642f6"
    param = "denseblock_param"
    tensorrt_missing_reason = "expanded into primitive layers by the rewrite first"
    onnx_missing_reason = "expanded into primitive layers by the rewrite first"
    expand = staticmethod(expand_dense_block)

    @staticmethod
    def parse(ctx, p):
        # the fork reads these; initChannel is the bottom's channels, the conv geometry is
        # fixed (3×3, pad 1, stride 1) and dropout only trains
        return {"numTransition": p.numTransition, "initChannel": p.initChannel,
                "growthRate": p.growthRate, "use_BC": p.use_BC, "use_dropout": p.use_dropout,
                "dropout_amount": p.dropout_amount}

    @staticmethod
    def infer(ctx, node: Node, x: Shape) -> tuple[Shape, ...]:
        g = _geometry(node, x)
        return ((x[0], g.width(g.transitions), x[2], x[3]),)

    @staticmethod
    def blobs(ctx, node: Node, x: Shape) -> tuple[tuple[str, Shape], ...]:
        g = _geometry(node, x)
        named = tuple((f"{group}_{i}", g.blob_shape(group, i))
                      for group in g.groups for i in range(g.transitions))
        return named + (("factor", (1,)),)

    @staticmethod
    def synthetic(node: Node, rng, scale: float):
        """Plausible blobs: variances and γ in [0.5, 1.5), He-scaled filters, the factor 1."""
        blobs = []
        for name, shape in DenseBlock.blobs(None, node, node.inputs[0].shape)[:-1]:
            group = name.rsplit("_", 1)[0]
            if group.endswith(("variance", "scaler")):
                blobs.append(rng.uniform(0.5, 1.5, shape))
            elif group.endswith("filter"):
                blobs.append(rng.normal(0.0, np.sqrt(2.0 / np.prod(shape[1:])), shape))
            else:
                blobs.append(rng.uniform(-scale, scale, shape))
        return blobs + [np.ones(1)]

    @staticmethod
    def numpy(ctx, node: Node, x, *blobs):
        g = _geometry(node, x.shape)
        w = _by_group(g, [np.asarray(blob, np.float64) for blob in blobs])
        return (_forward(g, np.asarray(x, np.float64), w).astype(np.float32),)
