"""SSD's ``Normalize`` layer as a caffe-lstm plugin: L2 normalisation with a learned scale.

From weiliu89/caffe@d9f9dfe (src/caffe/layers/normalize_layer.cpp), on a bottom of 2 to 4
axes read as (num, channels, height, width) (Caffe's legacy accessors: missing axes are 1):

    across_spatial:      y[n]       = x[n] / sqrt(Σ_{c,h,w} x[n]² + eps) · s
    per position:        y[n,:,h,w] = x[n,:,h,w] / sqrt(Σ_c x[n,c,h,w]² + eps) · s

with s the blob ``scale``: one value (``channel_shared``, a 0-axis blob) or one per channel.
``norm_param`` is not in caffe-lstm's schema: its fields are declared here (``param_fields``)
and read from the prototxt's text. The facets follow docs/ops.md; ``ctx`` is the walker.
"""

from __future__ import annotations

import numpy as np

from caffe_lstm.errors import ModelLoadError, ShapeError
from caffe_lstm.ops import Op, ParamField, register_op

#: caffe.proto's FillerParameter, as SSD nets write ``scale_filler { type: "constant" ... }``
#: (it only initialises training; the scale comes from the caffemodel).
FILLER = {"type": ParamField(str, "constant"), "value": ParamField(float, 0.0),
          "min": ParamField(float, 0.0), "max": ParamField(float, 1.0),
          "mean": ParamField(float, 0.0), "std": ParamField(float, 1.0),
          "sparse": ParamField(int, -1),
          "variance_norm": ParamField(choices=("FAN_IN", "FAN_OUT", "AVERAGE"))}


@register_op
class Normalize(Op):
    """y = x / sqrt(Σ x² + eps) · scale, the sum over channels (per position) or over the
    whole sample (across_spatial); scale shared or per channel (norm_param)."""

    type = "Normalize"
    param = "norm_param"
    param_fields = {"across_spatial": ParamField(bool, True),
                    "scale_filler": ParamField(fields=FILLER),
                    "channel_shared": ParamField(bool, True),
                    "eps": ParamField(float, 1e-10)}
    origin = "SSD, weiliu89/caffe@d9f9dfe"
    limits = "bottoms of 2 to 4 axes, as Caffe's legacy accessors allow"

    @staticmethod
    def parse(ctx, p):
        if p.eps < 0:
            raise ModelLoadError(f"norm_param.eps must be >= 0, found {p.eps}", "",
                                 "a negative eps can make the norm undefined")
        return {"across_spatial": p.across_spatial, "channel_shared": p.channel_shared,
                "eps": p.eps}

    @staticmethod
    def infer(ctx, node, x):
        if not 2 <= len(x) <= 4:
            raise ShapeError(f"the bottom has {len(x)} axes, Normalize takes 2 to 4",
                             node.label, "reshape it to (N, C[, H[, W]]) first")
        return (x,)

    @staticmethod
    def blobs(ctx, node, x):
        return (("scale", () if node.attrs["channel_shared"] else (x[1],)),)

    @staticmethod
    def numpy(ctx, node, x, scale):
        y = x / _norm(x, node, np.sqrt)
        return ((y * _broadcast(scale, x.ndim)).astype(np.float32),)

    @staticmethod
    def tensorrt(ctx, node, x, scale):
        ops, rank = ctx.trt.ElementWiseOperation, len(x.shape)
        square = ctx.out(ctx.network.add_elementwise(x, x, ops.PROD), "square")
        axes = sum(1 << a for a in _axes(node, rank))
        total = ctx.out(ctx.network.add_reduce(square, ctx.trt.ReduceOperation.SUM, axes, True),
                        "sum")
        eps = ctx.constant(np.full((1,) * rank, node.attrs["eps"], np.float32), "eps")
        shifted = ctx.out(ctx.network.add_elementwise(total, eps, ops.SUM), "sum_eps")
        norm = ctx.out(ctx.network.add_unary(shifted, ctx.trt.UnaryOperation.SQRT), "norm")
        y = ctx.out(ctx.network.add_elementwise(x, norm, ops.DIV), "normalized")
        s = ctx.constant(_broadcast(np.asarray(scale, np.float32), rank), "scale")
        return (ctx.out(ctx.network.add_elementwise(y, s, ops.PROD)),)

    @staticmethod
    def onnx(ctx, node, x, scale):
        rank = len(node.inputs[0].shape)
        square = ctx.add("Mul", [x, x], suffix="square")[0]
        total = ctx.add("ReduceSum", [square, ctx.ints(_axes(node, rank), "axes")],
                        suffix="sum", keepdims=1)[0]
        shifted = ctx.add("Add", [total, ctx.scalar(node.attrs["eps"], "eps")],
                          suffix="sum_eps")[0]
        norm = ctx.add("Sqrt", [shifted], suffix="norm")[0]
        y = ctx.add("Div", [x, norm], suffix="normalized")[0]
        shape = ctx.ints([1, -1] + [1] * (rank - 2), "scale_shape")
        s = ctx.add("Reshape", [scale, shape], suffix="scale")[0]
        return (ctx.add("Mul", [y, s])[0],)

    @staticmethod
    def synthetic(node, rng, scale):
        """Scales near SSD's trained conv4_3 value range (positive)."""
        (shape,) = [v.shape for v in node.weights]
        return [rng.uniform(1.0, 20.0, shape)]


def _axes(node, rank: int) -> list[int]:
    """The summed axes: all but num (across_spatial), or the channels."""
    return list(range(1, rank)) if node.attrs["across_spatial"] else [1]


def _norm(x: np.ndarray, node, sqrt) -> np.ndarray:
    total = np.sum(x * x, axis=tuple(_axes(node, x.ndim)), keepdims=True, dtype=np.float32)
    return sqrt(total + np.float32(node.attrs["eps"]))


def _broadcast(scale: np.ndarray, rank: int) -> np.ndarray:
    """The scale as (1, C, 1, ...) (per channel) or (1, ..., 1) (shared)."""
    return np.asarray(scale, np.float32).reshape((1, -1) + (1,) * (rank - 2))
