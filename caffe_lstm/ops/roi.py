"""ROI pooling: R-FCN's position-sensitive ``PSROIPooling`` and Fast R-CNN's ``ROIPooling``.

Every output bin pools the feature map over the bin's pixels (PSROIPooling: the mean of one
channel per bin; ROIPooling: the max of every channel); the bin boundaries come from the rois at
run time. The numpy facets follow the forks' loops. TensorRT and ONNX read each bin from a table
built once over the whole map, 4 gathers per bin, since a bin is a rectangle: PSROIPooling's
sums from an integral image, ROIPooling's maxima from a sparse table (the max of a rectangle is
the max of the 4 power-of-two rectangles anchored at its corners that cover it). ONNX's own
``MaxRoiPool`` is Fast R-CNN's forward, rounding included (onnxruntime's equals the fork's).
"""

from __future__ import annotations

import math

import numpy as np

from caffe_lstm.errors import ExecutionError
from caffe_lstm.ir.graph import Node, Shape
from caffe_lstm.ops.registry import (Op, count, onnx_fixed_dims, register_op, shape_error,
                                     trt_fixed_dims)

#: R-FCN's floor for a roi's width and height after scaling ("force too small ROIs to be 1x1").
MIN_ROI_SIZE = np.float32(0.1)


def round_half_away(x: np.ndarray) -> np.ndarray:
    """C's round() of float32 values: halves go away from zero (numpy's round goes to even).
    The fraction is compared with 0.5, not added to it: float32 0.49999997 + 0.5 rounds to 1."""
    whole = np.floor(np.abs(x))
    return np.sign(x) * (whole + (np.abs(x) - whole >= np.float32(0.5)))


def checked_batches(node: Node, rois: np.ndarray, batch_size: int) -> np.ndarray:
    """The rois' batch indices as C's int() reads them (truncation toward zero), refused when
    a roi holds NaN or infinity or an index falls outside the batch (the forks CHECK it)."""
    if not np.isfinite(rois).all():
        raise ExecutionError("the rois hold NaN or infinite values", node.label,
                             "check the rois fed to this layer")
    batch = rois[:, 0].astype(np.int64)
    if batch.size and (batch.min() < 0 or batch.max() >= batch_size):
        bad = batch.min() if batch.min() < 0 else batch.max()
        raise ExecutionError(f"roi batch index {bad} is outside [0, {batch_size})",
                             node.label, "check the rois fed to this layer")
    return batch


def rois_shape_error(node: Node, rois: Shape):
    """The forks' rois bottom: (R, 5) rows, trailing unit axes allowed."""
    return shape_error(node, f"rois {rois} must be (R, 5): batch index, x1, y1, x2, y2")


def nonempty_bins(h0, h1, w0, w1):
    """(r, i, j, rows, cols) of every bin holding a pixel (the others stay 0), from the bounds
    (R, P_h) and (R, P_w)."""
    for r in range(h0.shape[0]):
        for i in range(h0.shape[1]):
            for j in range(w0.shape[1]):
                if h1[r, i] > h0[r, i] and w1[r, j] > w0[r, j]:
                    yield r, i, j, slice(h0[r, i], h1[r, i]), slice(w0[r, j], w1[r, j])


def fixed_chw(node: Node, x, what: str) -> tuple[int, int, int]:
    """The TensorRT tensor's C, H, W, refused when one is dynamic (the tables need them)."""
    return trt_fixed_dims(node, tuple(x.shape[1:]), "C, H or W",
                          f"give the {what} fixed channels, height and width")


def check_int32_reads(ctx, node: Node, dims: tuple[int, ...], table: str,
                      names: tuple[str, ...]) -> None:
    """A TensorRT form gathers from its ``table`` (per image ``dims``, called ``names``)
    flattened, at INT32 indices: its N·∏dims elements must stay below 2³¹ (N: the most images
    the engine takes, its first bottom's at the profile's MAX; -1, unknown: one image's
    must)."""
    batch = ctx.largest_shape(node.inputs[0])[0]
    per_image, images, most = math.prod(dims), max(batch, 1), np.iinfo(np.int32).max
    if images * per_image <= most:
        return
    parts = " · ".join(f"{name} {dim}" for name, dim in zip(names, dims))
    raise shape_error(
        node, f"the TensorRT form's {table} has {images * per_image} elements ({images} "
        f"image(s) · {parts}), past its INT32 indices (2³¹ − 1)",
        f"give its first bottom at most {most // per_image} images" if per_image <= most
        else "give its first bottom fewer channels or a smaller height and width")


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
              "integral image (rounding grows with the map's size) and need C, H, W fixed; "
              "TensorRT reads it at INT32 indices, through either route to an engine "
              "(N·C·(H + 1)·(W + 1) under 2³¹: checked at build at the N the engine takes "
              "most, the profile's MAX with a dynamic N)")

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
            raise rois_shape_error(node, rois)
        return ((rois[0], dim, groups, groups),)

    @staticmethod
    def numpy(ctx, node: Node, x, rois):
        dim, groups = node.attrs["output_dim"], node.attrs["group_size"]
        rois = rois.reshape(rois.shape[0], 5)
        batch = checked_batches(node, rois, x.shape[0])
        h0, h1, w0, w1 = bin_bounds(rois, node.attrs["spatial_scale"], groups, *x.shape[2:])
        maps = x.reshape(x.shape[0], dim, groups, groups, *x.shape[2:])
        y = np.zeros((rois.shape[0], dim, groups, groups), np.float32)
        for r, i, j, rows, cols in nonempty_bins(h0, h1, w0, w1):
            window = maps[batch[r], :, i, j, rows, cols]
            area = (rows.stop - rows.start) * (cols.stop - cols.start)
            y[r, :, i, j] = window.sum(axis=(1, 2)) / np.float32(area)
        return (y,)

    @staticmethod
    def tensorrt(ctx, node: Node, x, rois):
        chw = fixed_chw(node, x, "score maps")
        _check_integral_image(ctx, node, chw)
        return (_IntegralBins(_TrtOps(ctx), node, chw).pool(x, rois),)

    @staticmethod
    def onnx(ctx, node: Node, x: str, rois: str):
        chw = onnx_fixed_dims(ctx, node, node.inputs[0], (1, 2, 3), "C, H or W of the score maps",
                              "give the score maps fixed channels, height and width")
        if ctx.int32_indices:  # TensorRT's parser reads the gathers' int64 indices as INT32
            _check_integral_image(ctx, node, chw)
        return (_IntegralBins(_OnnxOps(ctx), node, chw).pool(x, rois),)


def _check_integral_image(ctx, node: Node, chw: tuple[int, ...]) -> None:
    """The integral image (N, C, H + 1, W + 1) is read at INT32 indices: check_int32_reads."""
    channels, height, width = chw
    check_int32_reads(ctx, node, (channels, height + 1, width + 1), "integral image",
                      ("C", "H + 1", "W + 1"))


def c_round(ops, t):
    """round_half_away as tensor operations (``ops``: _TrtOps or _OnnxOps): |t| rounds to
    f + 1 − ⌈0.5 − (|t| − f)⌉ with f = ⌊|t|⌋; |t| − f is exact and 0.5 minus a fraction below
    0.5 stays above 0, so a half goes up and nothing less does."""
    magnitude = ops.abs(t)
    whole = ops.floor(magnitude)
    fraction = ops.sub(magnitude, whole)
    up = ops.sub(ops.floats([[1]]), ops.ceil(ops.sub(ops.floats([[0.5]]), fraction)))
    return ops.mul(ops.sign(t), ops.add(whole, up))


#: The lowest float32: Fast R-CNN starts every bin's max there, so a bin of -inf gives it.
LOWEST = np.float32(-np.finfo(np.float32).max)


def max_bin_bounds(rois: np.ndarray, scale: float, pooled: tuple[int, int], height: int,
                   width: int) -> tuple[np.ndarray, ...]:
    """(hstart, hend, wstart, wend), (R, pooled_h) and (R, pooled_w) int64, as Fast R-CNN's
    ROIPoolingLayer: the corners scaled then rounded (C's round), the roi's size
    max(end − start + 1, 1), bin p spanning [⌊p·bin⌋ + start, ⌈(p + 1)·bin⌉ + start) clipped
    to the map; the products in float32."""
    corners = round_half_away(rois[:, 1:5].astype(np.float32) * np.float32(scale))
    start_w, start_h, end_w, end_h = (corners[:, k] for k in range(4))

    def span(start, end, bins, size):
        bin_size = np.maximum(end - start + 1, 1).astype(np.float32) / np.float32(bins)
        p = np.arange(bins, dtype=np.float32)
        low = np.floor(p * bin_size[:, None]) + start[:, None]
        high = np.ceil((p + 1) * bin_size[:, None]) + start[:, None]
        return (np.clip(low, 0, size).astype(np.int64), np.clip(high, 0, size).astype(np.int64))

    return (*span(start_h, end_h, pooled[0], height), *span(start_w, end_w, pooled[1], width))


@register_op
class ROIPooling(Op):
    """y[r, c, i, j] = max of x[b_r, c] over bin (i, j) of roi r, 0 for an empty bin
    (roi_pooling_param: pooled_h, pooled_w, spatial_scale).

    Bottoms: features x (N, C, H, W) and rois (R, 5) rows (batch index, x1, y1, x2, y2) in
    image pixels; the top is (R, C, pooled_h, pooled_w). NaN features are skipped and the max
    is at least the lowest float32 (the fork's ``>`` against a start of -FLT_MAX).
    """

    type = "ROIPooling"
    param = "roi_pooling_param"
    n_bottoms = (2, 2)
    origin = ("Fast R-CNN, rbgirshick/caffe-fast-rcnn@4c85442 (roi_pooling_layer.cpp, "
              "Forward_cpu; onnxruntime's MaxRoiPool computes the same)")
    limits = ("rois hold in-range batch indices; the TensorRT form needs C, H, W fixed, keeps "
              "a max table of N·C·H·W·(⌊log₂H⌋ + 1)(⌊log₂W⌋ + 1) floats, read at INT32 indices "
              "(under 2³¹ elements: checked at build at the N the engine takes most, the "
              "profile's MAX with a dynamic N), and takes NaN features into the max where the "
              "fork skips them")

    @staticmethod
    def parse(ctx, p):
        return {"pooled_h": p.pooled_h, "pooled_w": p.pooled_w,
                "spatial_scale": p.spatial_scale}

    @staticmethod
    def infer(ctx, node: Node, x: Shape, rois: Shape) -> tuple[Shape, ...]:
        pooled_h, pooled_w = node.attrs["pooled_h"], node.attrs["pooled_w"]
        if pooled_h <= 0 or pooled_w <= 0:
            raise shape_error(node, f"pooled_h {pooled_h} and pooled_w {pooled_w} must be > 0 "
                              "(the fork checks them)", "set both in roi_pooling_param")
        if not np.isfinite(node.attrs["spatial_scale"]):
            raise shape_error(node, f"spatial_scale {node.attrs['spatial_scale']} must be "
                              "finite")
        if len(x) != 4:
            raise shape_error(node, f"features {x} must be (N, C, H, W)")
        # the fork reads the rois' channels × height × width as 5, any num
        if not 2 <= len(rois) <= 4 or count(rois, 1) != 5:
            raise rois_shape_error(node, rois)
        return ((rois[0], x[1], pooled_h, pooled_w),)

    @staticmethod
    def numpy(ctx, node: Node, x, rois):
        rois = rois.reshape(rois.shape[0], 5)
        batch = checked_batches(node, rois, x.shape[0])
        pooled = (node.attrs["pooled_h"], node.attrs["pooled_w"])
        h0, h1, w0, w1 = max_bin_bounds(rois, node.attrs["spatial_scale"], pooled,
                                        *x.shape[2:])
        y = np.zeros((rois.shape[0], x.shape[1], *pooled), np.float32)
        for r, i, j, rows, cols in nonempty_bins(h0, h1, w0, w1):
            window = x[batch[r], :, rows, cols].reshape(x.shape[1], -1)
            # fmax skips NaN, as the fork's `>` does
            y[r, :, i, j] = np.fmax.reduce(window, axis=1, initial=LOWEST)
        return (y,)

    @staticmethod
    def tensorrt(ctx, node: Node, x, rois):
        bins = _SparseTableBins(_TrtOps(ctx), node, fixed_chw(node, x, "features"))
        levels = bins.levels[0] * bins.levels[1]
        check_int32_reads(ctx, node, (bins.channels, levels, bins.height, bins.width),
                          "max table", ("C", "levels", "H", "W"))
        return (bins.pool(x, rois),)

    @staticmethod
    def onnx(ctx, node: Node, x: str, rois: str):
        table = ctx.add("Reshape", [rois, ctx.ints([-1, 5], "shape")], suffix="rois")[0]
        return tuple(ctx.add("MaxRoiPool", [x, table],
                             pooled_shape=[node.attrs["pooled_h"], node.attrs["pooled_w"]],
                             spatial_scale=float(node.attrs["spatial_scale"])))


def reads_rois(node: Node, value) -> bool:
    """Whether ``value`` is the rois bottom (the second) of a ROI pooling node."""
    return node.op in (PSROIPooling.type, ROIPooling.type) and node.inputs[1] is value


class _SparseTableBins:
    """ROIPooling as TensorRT layers: the fork's bin bounds computed elementwise on the rois,
    each bin's max read from a sparse table T[a, b][h, w] = max x[h : h + 2^a, w : w + 2^b]
    at its 4 corners (the 2^a × 2^b rectangles at them cover the bin, 2^a ≤ its height)."""

    def __init__(self, ops, node: Node, chw: tuple[int, int, int]) -> None:
        self.ops, self.node, (self.channels, self.height, self.width) = ops, node, chw
        self.pooled = (node.attrs["pooled_h"], node.attrs["pooled_w"])
        self.levels = (floor_log2(self.height) + 1, floor_log2(self.width) + 1)

    def pool(self, x, rois):
        ops = self.ops
        table = ops.reshape(rois, [0, 5], "rois")
        # [start_w, start_h, end_w, end_h] = round([x1, y1, x2, y2] · spatial_scale)
        corners = c_round(ops, ops.mul(ops.columns(table, [1, 2, 3, 4], "corners"),
                                       ops.floats([[self.node.attrs["spatial_scale"]]])))
        starts, ends = ops.columns(corners, [0, 1], "starts"), ops.columns(corners, [2, 3], "ends")
        sizes = ops.max(ops.add(ops.sub(ends, starts), ops.floats([[1]])), ops.floats([[1]]))
        bins = ops.div(sizes, ops.floats([self.pooled[::-1]]))
        spans = [self._span(ops.columns(bins, [axis], "bin"), ops.columns(starts, [axis], "start"),
                            self.pooled[1 - axis], (self.width, self.height)[axis])
                 for axis in (1, 0)]                      # rows then columns: (R, P) each
        (h_lo, h_hi, h_level), (w_lo, w_hi, w_level) = (self._corners(*s, size) for s, size in
                                                        zip(spans, (self.height, self.width)))
        rows = lambda t: ops.reshape(t, [0, 1, self.pooled[0], 1], "rows")  # noqa: E731
        cols = lambda t: ops.reshape(t, [0, 1, 1, self.pooled[1]], "cols")  # noqa: E731
        flat = ops.reshape(self._table(x), [-1], "table_flat")
        base = self._plane_base(ops.columns(table, [0], "batch"), rows(h_level), cols(w_level))
        read = lambda h, w: ops.gather(flat, ops.add(ops.add(  # noqa: E731
            base, ops.mul(rows(h), ops.ints([[[[self.width]]]]))), cols(w)))
        top = ops.max(ops.max(read(h_lo, w_lo), read(h_lo, w_hi)),
                      ops.max(read(h_hi, w_lo), read(h_hi, w_hi)))
        top = ops.max(top, ops.floats([[[[LOWEST]]]]))    # the fork's start: -inf gives it
        empty = ops.greater(ops.floats([[[[0.5]]]]), ops.mul(
            rows(self._nonempty(spans[0])), cols(self._nonempty(spans[1]))))
        return ops.select(empty, ops.floats([[[[0]]]]), top, last=True)

    def _span(self, bin_size, start, bins: int, size: int):
        """[⌊p·bin⌋ + start, ⌈(p + 1)·bin⌉ + start) for p < bins, clipped to [0, size]."""
        ops = self.ops
        p = np.arange(bins, dtype=np.float32)[None]
        low = ops.add(ops.floor(ops.mul(ops.floats(p), bin_size)), start)
        high = ops.add(ops.ceil(ops.mul(ops.floats(p + 1), bin_size)), start)
        clip = lambda t: ops.min(ops.max(t, ops.floats([[0]])),  # noqa: E731
                                 ops.floats([[size]]))
        return clip(low), clip(high)

    def _nonempty(self, span):
        """1 where the span holds a pixel, else 0: min(high − low, 1) (high ≥ low)."""
        return self.ops.min(self.ops.sub(span[1], span[0]), self.ops.floats([[1]]))

    def _corners(self, low, high, size: int):
        """The table's level a = ⌊log₂(length)⌋ and the two anchors low and high − 2^a, as
        INT32 (R, P); an empty span reads a clamped anchor, its bin is replaced by 0."""
        ops = self.ops
        length = ops.index(ops.max(ops.sub(high, low), ops.floats([[1]])))
        logs = np.array([0] + [floor_log2(n) for n in range(1, size + 1)], np.float32)
        level = ops.gather(ops.floats(logs), length)
        reach = ops.gather(ops.floats(2 ** logs), length)
        clamp = lambda t: ops.index(ops.min(ops.max(t, ops.floats([[0]])),  # noqa: E731
                                            ops.floats([[size - 1]])))
        return clamp(low), clamp(ops.sub(high, reach)), ops.index(level)

    def _table(self, x):
        """The sparse table (N, C, levels_h · levels_w, H, W), level (a, b) at a·levels_w + b;
        T[a + 1] = max(T[a], T[a] shifted up by 2^a), likewise along W (clamped at the edge:
        a shifted read past the map is never an anchor's)."""
        ops, (levels_h, levels_w) = self.ops, self.levels
        planes, row = [], x
        for a in range(levels_h):
            if a:
                row = ops.max(row, self._shift(row, 2, 2 ** (a - 1), self.height))
            level = row
            for b in range(levels_w):
                if b:
                    level = ops.max(level, self._shift(level, 3, 2 ** (b - 1), self.width))
                planes.append(ops.reshape(level, [0, self.channels, 1, self.height, self.width],
                                          "plane"))
        return ops.concat(planes, 2) if len(planes) > 1 else planes[0]

    def _shift(self, t, axis: int, by: int, size: int):
        index = np.minimum(np.arange(size) + by, size - 1)
        return self.ops.take(t, index, axis)

    def _plane_base(self, batch, level_h, level_w):
        """((b·C + c)·L + a·levels_w + b')·H·W, (R, C, P_h, P_w) INT32, b = trunc(rois[:, 0])."""
        ops, (levels_h, levels_w) = self.ops, self.levels
        whole = ops.mul(ops.sign(batch), ops.floor(ops.abs(batch)))
        b = ops.index(ops.reshape(whole, [0, 1, 1, 1], "batch_index"))
        channel = np.arange(self.channels).reshape(1, self.channels, 1, 1)
        images = ops.add(ops.mul(b, ops.ints([[[[self.channels]]]])), ops.ints(channel))
        level = ops.add(ops.mul(level_h, ops.ints([[[[levels_w]]]])), level_w)
        plane = ops.add(ops.mul(images, ops.ints([[[[levels_h * levels_w]]]])), level)
        return ops.mul(plane, ops.ints([[[[self.height * self.width]]]]))


def floor_log2(n: int) -> int:
    """⌊log₂ n⌋ for n ≥ 1."""
    return n.bit_length() - 1


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
        rounded = c_round(ops, ops.columns(table, [1, 2, 3, 4], "corners"))
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

    def greater(self, a, b):
        return self._ew(a, b, self.trt.ElementWiseOperation.GREATER)

    def select(self, condition, a, b, last=False):
        return self.ctx.out(self.net.add_select(condition, a, b), "" if last else "op")

    def take(self, a, index, axis):
        """``a`` at the constant ``index`` along ``axis``."""
        indices = self.ctx.constant(np.asarray(index, np.int32), "shift")
        return self.ctx.out(self.net.add_gather(a, indices, axis), "shifted")

    def concat(self, tensors, axis):
        layer = self.net.add_concatenation(list(tensors))
        layer.axis = axis
        return self.ctx.out(layer, "table")


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
