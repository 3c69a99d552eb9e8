"""R-FCN's position-sensitive ROI pooling (``PSROIPooling``).

Every output bin averages one channel of the score maps over the bin's pixels; the bin
boundaries come from the rois at run time. The numpy facet follows the fork's loop; TensorRT
and ONNX sum each bin from an integral image (4 gathers per bin), since a bin is a rectangle.
"""

from __future__ import annotations

import numpy as np

from caffe_lstm.errors import ExecutionError
from caffe_lstm.ir.graph import Node, Shape
from caffe_lstm.ops.registry import Op, register_op, shape_error

#: R-FCN's floor for a roi's width and height after scaling ("force too small ROIs to be 1x1").
MIN_ROI_SIZE = np.float32(0.1)


def round_half_away(x: np.ndarray) -> np.ndarray:
    """C's round(): halves go away from zero (numpy's round goes to even)."""
    return np.sign(x) * np.floor(np.abs(x) + np.float32(0.5))


def bin_bounds(rois: np.ndarray, scale: float, groups: int, height: int, width: int
               ) -> tuple[np.ndarray, ...]:
    """(hstart, hend, wstart, wend), each (R, groups) int64, as PSROIPoolingForward: the roi's
    corners rounded, scaled (end + 1), its size at least 0.1, bin p spanning
    [⌊p·bin + start⌋, ⌈(p + 1)·bin + start⌉) clipped to the map; all in float32."""
    rois = rois.astype(np.float32)
    scale = np.float32(scale)
    start_w, start_h = (round_half_away(rois[:, k]) * scale for k in (1, 2))
    end_w, end_h = ((round_half_away(rois[:, k]) + np.float32(1)) * scale for k in (3, 4))
    bin_h = np.maximum(end_h - start_h, MIN_ROI_SIZE) / np.float32(groups)
    bin_w = np.maximum(end_w - start_w, MIN_ROI_SIZE) / np.float32(groups)
    p = np.arange(groups, dtype=np.float32)

    def span(size, bin_size, start):
        low = np.floor(p * bin_size[:, None] + start[:, None])
        high = np.ceil((p + 1) * bin_size[:, None] + start[:, None])
        return (np.clip(low, 0, size).astype(np.int64), np.clip(high, 0, size).astype(np.int64))

    return (*span(height, bin_h, start_h), *span(width, bin_w, start_w))


@register_op
class PSROIPooling(Op):
    """y[r, d, i, j] = mean of x[b_r, (d·G + i)·G + j] over bin (i, j) of roi r, 0 for an empty
    bin (psroi_pooling_param: spatial_scale, output_dim D, group_size G).

    Bottoms: score maps x (N, D·G·G, H, W) and rois (R, 5) rows (batch index, x1, y1, x2, y2)
    in image pixels; the top is (R, D, G, G).
    """

    type = "PSROIPooling"
    param = "psroi_pooling_param"
    n_bottoms = (2, 2)
    origin = ("R-FCN, daijifeng001/caffe-rfcn@8f031c1 (psroi_pooling_layer.cpp; the .cu at "
              "4bcfcd1 is the same forward)")
    limits = ("rois hold in-range batch indices; TensorRT and ONNX sum bins from a float32 "
              "integral image (rounding grows with the map's size) and need C, H, W fixed")

    @staticmethod
    def parse(ctx, p):
        # the fork declares the three `required`: None (unset) is refused by infer
        return {name: getattr(p, name) if p.has(name) else None
                for name in ("spatial_scale", "output_dim", "group_size")}

    @staticmethod
    def infer(ctx, node: Node, x: Shape, rois: Shape) -> tuple[Shape, ...]:
        missing = [name for name, value in node.attrs.items() if value is None]
        if missing:
            raise shape_error(node, f"psroi_pooling_param has no {', '.join(missing)} (the "
                              "fork requires them)", "set spatial_scale, output_dim and "
                              "group_size")
        dim, groups = node.attrs["output_dim"], node.attrs["group_size"]
        if dim <= 0 or groups <= 0 or not np.isfinite(node.attrs["spatial_scale"]):
            raise shape_error(node, f"output_dim {dim} and group_size {groups} must be > 0 and "
                              f"spatial_scale {node.attrs['spatial_scale']} finite")
        if len(x) != 4 or x[1] != dim * groups * groups:
            raise shape_error(node, f"score maps {x} must be (N, output_dim·group_size² = "
                              f"{dim * groups * groups}, H, W)", "check psroi_pooling_param")
        if len(rois) not in (2, 4) or rois[1] != 5 or (len(rois) == 4 and rois[2:] != (1, 1)):
            raise shape_error(node, f"rois {rois} must be (R, 5): batch index, x1, y1, x2, y2")
        return ((rois[0], dim, groups, groups),)

    @staticmethod
    def numpy(ctx, node: Node, x, rois):
        dim, groups = node.attrs["output_dim"], node.attrs["group_size"]
        rois = rois.reshape(rois.shape[0], 5)
        if not np.isfinite(rois).all():
            raise ExecutionError("the rois hold NaN or infinite values", node.label,
                                 "check the rois fed to this layer")
        batch = rois[:, 0].astype(np.int64)            # C's int(): truncation toward zero
        if batch.size and (batch.min() < 0 or batch.max() >= x.shape[0]):
            bad = batch.min() if batch.min() < 0 else batch.max()
            raise ExecutionError(f"roi batch index {bad} is outside [0, {x.shape[0]})",
                                 node.label, "check the rois fed to this layer")
        h0, h1, w0, w1 = bin_bounds(rois, node.attrs["spatial_scale"], groups, *x.shape[2:])
        maps = x.reshape(x.shape[0], dim, groups, groups, *x.shape[2:])
        y = np.zeros((rois.shape[0], dim, groups, groups), np.float32)
        for r in range(rois.shape[0]):
            for i in range(groups):
                for j in range(groups):
                    area = (h1[r, i] - h0[r, i]) * (w1[r, j] - w0[r, j])
                    if h1[r, i] > h0[r, i] and w1[r, j] > w0[r, j]:
                        window = maps[batch[r], :, i, j, h0[r, i]:h1[r, i], w0[r, j]:w1[r, j]]
                        y[r, :, i, j] = window.sum(axis=(1, 2)) / np.float32(area)
        return (y,)

    @staticmethod
    def tensorrt(ctx, node: Node, x, rois):
        if min(x.shape[1:]) < 0:
            raise shape_error(node, "C, H or W is dynamic (-1) in the TensorRT network",
                              "give the score maps fixed channels, height and width")
        return (_IntegralBins(_TrtOps(ctx), node, tuple(x.shape[1:])).pool(x, rois),)

    @staticmethod
    def onnx(ctx, node: Node, x: str, rois: str):
        return (_IntegralBins(_OnnxOps(ctx), node, node.inputs[0].shape[1:]).pool(x, rois),)


class _IntegralBins:
    """PSROIPooling as tensor operations, for TensorRT and ONNX alike (``ops`` speaks either):
    the fork's bin bounds computed elementwise on the rois, each bin's sum read from the
    integral image S = Tₕ · x · Tᵥᵀ (S[i, j] = Σ x[< i, < j]) at its 4 corners."""

    def __init__(self, ops, node: Node, chw: tuple[int, int, int]) -> None:
        self.ops, self.node, (self.channels, self.height, self.width) = ops, node, chw
        self.dim, self.groups = node.attrs["output_dim"], node.attrs["group_size"]

    def pool(self, x, rois):
        ops, groups = self.ops, self.groups
        table = ops.reshape(rois, [0, 5], "rois")
        # [start_w, start_h, end_w, end_h] = (round(x1, y1, x2 + 1, y2 + 1)) · spatial_scale
        corners = ops.columns(table, [1, 2, 3, 4], "corners")
        rounded = ops.mul(ops.sign(corners), ops.floor(ops.add(ops.abs(corners),
                                                                ops.floats([[0.5]]))))
        scaled = ops.mul(ops.add(rounded, ops.floats([[0, 0, 1, 1]])),
                         ops.floats([[self.node.attrs["spatial_scale"]]]))
        starts, ends = ops.columns(scaled, [0, 1], "starts"), ops.columns(scaled, [2, 3], "ends")
        bins = ops.div(ops.max(ops.sub(ends, starts), ops.floats([[MIN_ROI_SIZE]])),
                       ops.floats([[groups]]))
        w0, w1 = self._span(ops.columns(bins, [0], "bin_w"),
                            ops.columns(starts, [0], "start_w"), self.width)
        h0, h1 = self._span(ops.columns(bins, [1], "bin_h"),
                            ops.columns(starts, [1], "start_h"), self.height)
        # area (R, 1, G, G) and the bin sums (R, D, G, G) from the integral image
        rows = lambda t: ops.reshape(t, [0, 1, groups, 1], "rows")  # noqa: E731
        cols = lambda t: ops.reshape(t, [0, 1, 1, groups], "cols")  # noqa: E731
        area = ops.mul(ops.sub(rows(h1), rows(h0)), ops.sub(cols(w1), cols(w0)))
        flat = ops.reshape(self._integral(x), [-1], "integral_flat")
        base = self._channel_base(ops.columns(table, [0], "batch"))
        read = lambda h, w: ops.gather(flat, ops.add(ops.add(  # noqa: E731
            base, ops.mul(ops.index(rows(h)), ops.ints([[[[self.width + 1]]]]))),
            ops.index(cols(w))))
        total = ops.sub(ops.sub(read(h1, w1), read(h0, w1)), ops.sub(read(h1, w0), read(h0, w0)))
        # an empty bin has area 0 and sum exactly 0 (equal corners): 0 / 1
        return ops.div(total, ops.max(area, ops.floats([[[[1]]]])), last=True)

    def _span(self, bin_size, start, size: int):
        """[⌊p·bin + start⌋, ⌈(p + 1)·bin + start⌉) for p < G, clipped to [0, size]: (R, G)."""
        ops = self.ops
        p = np.arange(self.groups, dtype=np.float32)[None]
        low = ops.floor(ops.add(ops.mul(ops.floats(p), bin_size), start))
        high = ops.ceil(ops.add(ops.mul(ops.floats(p + 1), bin_size), start))
        clip = lambda t: ops.min(ops.max(t, ops.floats([[0]])),  # noqa: E731
                                 ops.floats([[size]]))
        return clip(low), clip(high)

    def _integral(self, x):
        """S (N, C, H + 1, W + 1) = Tₕ · x · Tᵥᵀ, T[i, k] = 1 for k < i."""
        t_h = np.tril(np.ones((self.height + 1, self.height), np.float32), -1)
        t_w = np.tril(np.ones((self.width + 1, self.width), np.float32), -1)
        ops = self.ops
        return ops.matmul(ops.matmul(ops.floats(t_h[None, None]), x),
                          ops.floats(np.ascontiguousarray(t_w.T)[None, None]))

    def _channel_base(self, batch):
        """(b·C + (d·G + i)·G + j)·(H + 1)(W + 1): the flat offset of each bin's S plane, with
        b = trunc(rois[:, 0]) as C's int()."""
        ops, groups = self.ops, self.groups
        whole = ops.mul(ops.sign(batch), ops.floor(ops.abs(batch)))
        b = ops.index(ops.reshape(whole, [0, 1, 1, 1], "batch_index"))
        channel = np.arange(self.dim * groups * groups).reshape(1, self.dim, groups, groups)
        plane = (self.height + 1) * (self.width + 1)
        return ops.mul(ops.add(ops.mul(b, ops.ints([[[[self.channels]]]])), ops.ints(channel)),
                       ops.ints([[[[plane]]]]))


class _TrtOps:
    """The operations _IntegralBins needs, as TensorRT layers (equal ranks, float or INT32)."""

    def __init__(self, ctx) -> None:
        self.ctx, self.trt, self.net = ctx, ctx.trt, ctx.network

    def _ew(self, a, b, op, last=False):
        return self.ctx.out(self.net.add_elementwise(a, b, op), "" if last else "op")

    def _un(self, a, op):
        return self.ctx.out(self.net.add_unary(a, op), "op")

    def add(self, a, b):
        return self._ew(a, b, self.trt.ElementWiseOperation.SUM)

    def sub(self, a, b):
        return self._ew(a, b, self.trt.ElementWiseOperation.SUB)

    def mul(self, a, b):
        return self._ew(a, b, self.trt.ElementWiseOperation.PROD)

    def div(self, a, b, last=False):
        return self._ew(a, b, self.trt.ElementWiseOperation.DIV, last)

    def max(self, a, b):
        return self._ew(a, b, self.trt.ElementWiseOperation.MAX)

    def min(self, a, b):
        return self._ew(a, b, self.trt.ElementWiseOperation.MIN)

    def sign(self, a):
        return self._un(a, self.trt.UnaryOperation.SIGN)

    def abs(self, a):
        return self._un(a, self.trt.UnaryOperation.ABS)

    def floor(self, a):
        return self._un(a, self.trt.UnaryOperation.FLOOR)

    def ceil(self, a):
        return self._un(a, self.trt.UnaryOperation.CEIL)

    def floats(self, values):
        return self.ctx.constant(np.asarray(values, np.float32), "const")

    def ints(self, values):
        return self.ctx.constant(np.asarray(values, np.int32), "const")

    def index(self, a):
        """Whole float values as INT32 (exact whatever rounding the cast uses)."""
        return self.ctx.cast(a, self.trt.DataType.INT32, "index")

    def reshape(self, a, dims, suffix):
        return self.ctx.reshape(a, dims, suffix)

    def columns(self, a, index, suffix):
        gather = self.net.add_gather(a, self.ctx.constant(np.array(index, np.int32), "columns"), 1)
        return self.ctx.out(gather, suffix)

    def gather(self, flat, index):
        return self.ctx.out(self.net.add_gather(flat, index, 0), "corner")

    def matmul(self, a, b):
        none = self.trt.MatrixOperation.NONE
        return self.ctx.out(self.net.add_matrix_multiply(a, none, b, none), "integral")


class _OnnxOps:
    """The operations _IntegralBins needs, as ONNX nodes (indices in int64)."""

    def __init__(self, ctx) -> None:
        self.ctx = ctx

    def _node(self, op_type, *inputs, last=False, **attrs):
        return self.ctx.add(op_type, list(inputs), suffix="" if last else "op", **attrs)[0]

    def add(self, a, b):
        return self._node("Add", a, b)

    def sub(self, a, b):
        return self._node("Sub", a, b)

    def mul(self, a, b):
        return self._node("Mul", a, b)

    def div(self, a, b, last=False):
        return self._node("Div", a, b, last=last)

    def max(self, a, b):
        return self._node("Max", a, b)

    def min(self, a, b):
        return self._node("Min", a, b)

    def sign(self, a):
        return self._node("Sign", a)

    def abs(self, a):
        return self._node("Abs", a)

    def floor(self, a):
        return self._node("Floor", a)

    def ceil(self, a):
        return self._node("Ceil", a)

    def floats(self, values):
        return self.ctx.constant(np.asarray(values, np.float32), "const")

    def ints(self, values):
        return self.ctx.ints(np.asarray(values, np.int64), "const")

    def index(self, a):
        return self._node("Cast", a, to=7)   # 7 = TensorProto.INT64; whole values: exact

    def reshape(self, a, dims, suffix):
        return self.ctx.add("Reshape", [a, self.ctx.ints(list(dims), "shape")], suffix=suffix)[0]

    def columns(self, a, index, suffix):
        return self.ctx.add("Gather", [a, self.ctx.ints(list(index), "columns")], suffix=suffix,
                            axis=1)[0]

    def gather(self, flat, index):
        return self._node("Gather", flat, index, axis=0)

    def matmul(self, a, b):
        return self._node("MatMul", a, b)
