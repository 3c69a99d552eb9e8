"""Fork layers that resample feature maps on a grid: DeepLab's bilinear ``Interp`` and the
``SpatialTransformer`` of the STN forks.

Both keep Caffe's (N, C, H, W) layout. Interp's grid is fixed by the shapes, so every backend
applies it as two constant matrices (rows, then columns); the spatial transformer's grid comes
from a bottom (theta) at run time, so TensorRT and ONNX sample it with their grid-sample
layers, given the fork's coordinates in grid-sample's own normalization.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from caffe_lstm.ir.graph import Node, Shape
from caffe_lstm.ops.registry import (Op, count, onnx_fixed_dims, register_op, shape_error,
                                     trt_fixed_dims)

# ---- Interp (DeepLab v2) ----------------------------------------------------------------------

_INTERP_ORIGIN = ("DeepLab v2, itlab-vision/ITLab-Vision-deeplab@9f61e4b (caffe_cpu_interp2); "
                  "shrink+zoom and the size bottom of maweifei/deeplab-ver2@56e2ac0 (PSPNet's)")


def interp_output_size(node: Node, size_eff: int, ref: int | None) -> int:
    """One output dim of Interp from the effective (cropped) input dim, as the fork's Reshape:
    shrink: (eff - 1) / s + 1; zoom: eff + (eff - 1)(z - 1); both: shrink then zoom; else
    the explicit height/width, else the second bottom's dim (``ref``)."""
    zoom, shrink = node.attrs["zoom_factor"], node.attrs["shrink_factor"]
    for name, factor in (("zoom_factor", zoom), ("shrink_factor", shrink)):
        if factor is not None and factor < 1:
            raise shape_error(node, f"{name} {factor} must be ≥ 1", "set it to 1 or more")
    if shrink is not None:
        size_eff = (size_eff - 1) // shrink + 1
    if zoom is not None:
        return size_eff + (size_eff - 1) * (zoom - 1)
    if shrink is not None:
        return size_eff
    if ref is None:
        raise shape_error(node, "no output size: interp_param has no zoom_factor, "
                          "shrink_factor, or height and width, and there is no second bottom",
                          "give one of them")
    return ref


def interp_matrix(size_in: int, offset: int, size_eff: int, size_out: int) -> np.ndarray:
    """A (size_out, size_in) float32 matrix M with y = M · x along one axis: caffe_cpu_interp2's
    align-corners grid over the cropped window [offset, offset + size_eff).

    Output i reads src = r·i with r = (eff - 1) / (out - 1) in float32 (0 when out = 1),
    i0 = ⌊src⌋, λ = src - i0: (1 - λ)·x[i0] + λ·x[i0 + 1] (i0 + 1 clamped to the window's
    last row); equal sizes copy the window.
    """
    rows = np.arange(size_out)
    matrix = np.zeros((size_out, size_in), np.float32)
    if size_eff == size_out:
        matrix[rows, offset + rows] = 1
        return matrix
    ratio = (np.float32(size_eff - 1) / np.float32(size_out - 1) if size_out > 1
             else np.float32(0))
    src = ratio * rows.astype(np.float32)
    low = src.astype(np.int64)                       # src ≥ 0: truncation is ⌊src⌋
    step = (low < size_eff - 1).astype(np.int64)
    upper = src - low.astype(np.float32)
    # one (row, column) pair per assignment: fancy += adds once each (step 0: the same cell)
    matrix[rows, offset + low] = np.float32(1) - upper
    matrix[rows, offset + low + step] += upper
    return matrix


def _size_from_bottom(node: Node) -> bool:
    """Whether Interp's output size is its second bottom's (no factor, no height and width)."""
    attrs = node.attrs
    return attrs["zoom_factor"] is None and attrs["shrink_factor"] is None and (
        attrs["height"] is None or attrs["width"] is None)


def _bottom_shapes(node: Node) -> tuple[Shape, Shape | None]:
    """The IR shapes of the data bottom and of the optional size bottom."""
    return node.inputs[0].shape, node.inputs[1].shape if len(node.inputs) > 1 else None


def _interp_matrices(node: Node, x: Shape, ref: Shape | None) -> tuple[np.ndarray, np.ndarray]:
    """(rows matrix (H_out, H), columns matrix transposed (W, W_out))."""
    h_out, w_out = Interp.infer(None, node, x, ref)[0][2:]
    pad_beg, pad_end = node.attrs["pad_beg"], node.attrs["pad_end"]
    rows = interp_matrix(x[2], -pad_beg, x[2] + pad_beg + pad_end, h_out)
    cols = interp_matrix(x[3], -pad_beg, x[3] + pad_beg + pad_end, w_out)
    return rows, np.ascontiguousarray(cols.T)


@register_op
class Interp(Op):
    """y = bilinear resize of x (N, C, H, W) on DeepLab's align-corners grid, after cropping
    -pad_beg rows/columns at the start and -pad_end at the end (interp_param).

    An optional second bottom gives the output size (H, W) when interp_param does not.
    """

    type = "Interp"
    param = "interp_param"
    n_bottoms = (1, 2)
    origin = _INTERP_ORIGIN
    limits = ("pad_beg/pad_end ≤ 0 (cropping) as in the fork; TensorRT and ONNX need H and W "
              "fixed (the grid is two constant matrices)")

    @staticmethod
    def parse(ctx, p):
        present = {name: getattr(p, name) if p.has(name) else None
                   for name in ("height", "width", "zoom_factor", "shrink_factor")}
        return {**present, "pad_beg": p.pad_beg, "pad_end": p.pad_end}

    @staticmethod
    def infer(ctx, node: Node, x: Shape, ref: Shape | None = None) -> tuple[Shape, ...]:
        if len(x) != 4 or (ref is not None and len(ref) != 4):
            raise shape_error(node, f"expected (N, C, H, W) bottoms, found {x}"
                              + (f" and {ref}" if ref is not None else ""))
        pad_beg, pad_end = node.attrs["pad_beg"], node.attrs["pad_end"]
        if pad_beg > 0 or pad_end > 0:
            raise shape_error(node, f"pad_beg {pad_beg} and pad_end {pad_end} must be ≤ 0 "
                              "(the fork only crops)", "use 0 or negative pads")
        eff = (x[2] + pad_beg + pad_end, x[3] + pad_beg + pad_end)
        if min(eff) <= 0:
            raise shape_error(node, f"cropping {-pad_beg} + {-pad_end} leaves nothing of "
                              f"{x[2]}x{x[3]}", "crop less")
        height, width = node.attrs["height"], node.attrs["width"]
        explicit = (height, width) if node.attrs["zoom_factor"] is None and \
            node.attrs["shrink_factor"] is None and height is not None and width is not None \
            else (None, None)
        refs = explicit if explicit[0] is not None else (
            (ref[2], ref[3]) if ref is not None else (None, None))
        out = tuple(interp_output_size(node, e, r) for e, r in zip(eff, refs))
        if min(out) <= 0:
            raise shape_error(node, f"output size {out[0]}x{out[1]} must be > 0",
                              "check height and width")
        return ((x[0], x[1]) + out,)

    @staticmethod
    def numpy(ctx, node: Node, x, ref=None):
        rows, cols_t = _interp_matrices(node, x.shape, None if ref is None else ref.shape)
        return ((rows @ x @ cols_t).astype(np.float32),)

    @staticmethod
    def tensorrt(ctx, node: Node, x, ref=None):
        # the matrices are built for the input's size and the output's: a size bottom's H, W
        # where neither a factor nor height and width give it
        sized_by = (x, ref) if ref is not None and _size_from_bottom(node) else (x,)
        if any(len(t.shape) != 4 or min(t.shape[2:]) < 0 for t in sized_by):
            raise shape_error(node, "H and W are dynamic (-1) in the TensorRT network",
                              "give the input (and a size bottom) a fixed height and width")
        rows, cols_t = _interp_matrices(node, *_bottom_shapes(node))
        matrix = ctx.trt.MatrixOperation.NONE
        # (1, 1, H_out, H) · (N, C, H, W) · (1, 1, W, W_out): batch dims broadcast
        tall = ctx.out(ctx.network.add_matrix_multiply(
            ctx.constant(rows[None, None], "rows"), matrix, x, matrix), "resize_rows")
        return (ctx.out(ctx.network.add_matrix_multiply(
            tall, matrix, ctx.constant(cols_t[None, None], "columns"), matrix)),)

    @staticmethod
    def onnx(ctx, node: Node, x: str, ref: str | None = None):
        for value in (node.inputs[0], node.outputs[0]):  # the matrices are built for both sizes
            onnx_fixed_dims(ctx, node, value, (2, 3), f"H or W of '{value.name}'",
                            "give the input (and a size bottom) a fixed height and width")
        rows, cols_t = _interp_matrices(node, *_bottom_shapes(node))
        tall = ctx.add("MatMul", [ctx.constant(rows, "rows"), x], suffix="resize_rows")[0]
        return (ctx.add("MatMul", [tall, ctx.constant(cols_t, "columns")])[0],)


# ---- SpatialTransformer (STN forks) -----------------------------------------------------------

#: The six entries of the 2×3 affine matrix, row-major, as st_param names them.
THETA_FIELDS = ("theta_1_1", "theta_1_2", "theta_1_3", "theta_2_1", "theta_2_2", "theta_2_3")


def _fixed_theta(node: Node) -> list[float | None]:
    return [node.attrs[name] for name in THETA_FIELDS]


def full_theta(node: Node, theta: np.ndarray) -> np.ndarray:
    """(N, 6) float32: the fixed st_param entries in their places, the bottom's values (in
    order) in the others, as the fork's copy_values/set_value_to_constant kernels."""
    fixed = _fixed_theta(node)
    free = theta.reshape(theta.shape[0], -1).astype(np.float32)
    full = np.empty((theta.shape[0], 6), np.float32)
    column = 0
    for k, value in enumerate(fixed):
        if value is None:
            full[:, k] = free[:, column]
            column += 1
        else:
            full[:, k] = np.float32(value)
    return full


def _output_grid(out_h: int, out_w: int) -> np.ndarray:
    """(out_h·out_w, 3) float32 rows (s/out_h·2 - 1, t/out_w·2 - 1, 1): the fork's output grid
    (its LayerSetUp), computed in double and stored as float."""
    s, t = np.divmod(np.arange(out_h * out_w), out_w)
    return np.stack([s / out_h * 2 - 1, t / out_w * 2 - 1, np.ones(out_h * out_w)],
                    axis=1).astype(np.float32)


def _st_out_size(node: Node, u: Shape) -> tuple[int, int]:
    out_h, out_w = node.attrs["output_H"], node.attrs["output_W"]
    return (u[2] if out_h is None else out_h, u[3] if out_w is None else out_w)


def _theta_selection(node: Node) -> tuple[np.ndarray, np.ndarray, int]:
    """(S, c, k) with the grid-sample matrix g = θ_free · S + c (N, 6) for the free entries
    θ_free (N, k): rows reordered to (row 2, row 1) so that the first output coordinate is the
    column (x), as grid samplers read it, and the half-pixel shift 1/W, 1/H of
    align_corners = 0 added to the translations (see SpatialTransformer)."""
    fixed = _fixed_theta(node)
    free = [k for k, value in enumerate(fixed) if value is None]
    _, _, height, width = node.inputs[0].shape
    order = (3, 4, 5, 0, 1, 2)
    select = np.zeros((len(free), 6), np.float32)
    const = np.zeros(6, np.float32)
    for target, source in enumerate(order):
        if fixed[source] is None:
            select[free.index(source), target] = 1
        else:
            const[target] = fixed[source]
    const[2] += np.float32(1 / width)
    const[5] += np.float32(1 / height)
    return select, const, len(free)


@register_op
class SpatialTransformer(Op):
    """V = U sampled bilinearly (zeros outside) at an affine grid (st_param, daerduoCarey's
    SpatialTransformerLayer).

    Output pixel (s, t) of (output_H, output_W) has normalized coordinates r = s/output_H·2 - 1,
    q = t/output_W·2 - 1; θ (2×3, row-major: the st_param entries that are set, the second
    bottom's values in the others) maps them to px = θ11·r + θ12·q + θ13 (rows) and
    py = θ21·r + θ22·q + θ23 (columns), read at pixel x = (px + 1)/2·H, y = (py + 1)/2·W.
    That is grid sampling with align_corners = 0 at (py + 1/W, px + 1/H), which TensorRT and
    ONNX are given.
    """

    type = "SpatialTransformer"
    param = "st_param"
    n_bottoms = (2, 2)
    origin = ("STN forks, daerduoCarey/SpatialTransformerLayer@cf321fc (st_layer.cu, the "
              "forward that runs: its CPU forward refuses to)")
    limits = ("transform_type affine and sampler_type bilinear only (the fork's only ones); "
              "ONNX needs opset 16 (GridSample); TensorRT and ONNX need H and W fixed")

    @staticmethod
    def parse(ctx, p):
        attrs: dict[str, Any] = {"transform_type": p.transform_type,
                                 "sampler_type": p.sampler_type,
                                 "to_compute_dU": p.to_compute_dU}
        for name in ("output_H", "output_W", *THETA_FIELDS):
            attrs[name] = getattr(p, name) if p.has(name) else None
        return attrs

    @staticmethod
    def infer(ctx, node: Node, u: Shape, theta: Shape) -> tuple[Shape, ...]:
        for name, supported in (("transform_type", "affine"), ("sampler_type", "bilinear")):
            if node.attrs[name] != supported:
                raise shape_error(node, f"{name} {node.attrs[name]!r} is not supported",
                                  f"the fork implements only {supported!r}")
        if len(u) != 4:
            raise shape_error(node, f"expected a (N, C, H, W) first bottom, found {u}")
        n_fixed = sum(value is not None for value in _fixed_theta(node))
        if len(theta) < 1 or theta[0] != u[0] or count(theta, 1) + n_fixed != 6:
            raise shape_error(node, f"theta {theta} must be (N = {u[0]}, {6 - n_fixed}) with "
                              f"{n_fixed} theta_i_j fixed in st_param",
                              "the fixed and the given entries make the six of the 2x3 matrix")
        out_h, out_w = _st_out_size(node, u)
        if out_h <= 0 or out_w <= 0:
            raise shape_error(node, f"output_H {out_h} and output_W {out_w} must be > 0")
        return ((u[0], u[1], out_h, out_w),)

    @staticmethod
    def numpy(ctx, node: Node, u, theta):
        n, channels, height, width = u.shape
        out_h, out_w = SpatialTransformer.infer(None, node, u.shape, theta.shape)[0][2:]
        affine = full_theta(node, theta).reshape(n, 2, 3)
        coords = _output_grid(out_h, out_w) @ affine.transpose(0, 2, 1)   # (N, HW, 2)
        x = (coords[..., 0] + 1) / 2 * height
        y = (coords[..., 1] + 1) / 2 * width
        m0, n0 = np.floor(x), np.floor(y)
        v = np.zeros((n, out_h * out_w, channels), np.float32)
        batch = np.arange(n)[:, None]
        for m, wm in ((m0, 1 - (x - m0)), (m0 + 1, 1 - (m0 + 1 - x))):
            for k, wk in ((n0, 1 - (y - n0)), (n0 + 1, 1 - (n0 + 1 - y))):
                inside = (m >= 0) & (m < height) & (k >= 0) & (k < width)
                # outside pixels (and a non-finite theta's NaN) read row/column 0, weight 0
                rows = np.clip(np.nan_to_num(m), 0, height - 1).astype(np.int64)
                cols = np.clip(np.nan_to_num(k), 0, width - 1).astype(np.int64)
                # U[i, :, m, k] for each output pixel: (N, HW, C)
                v += np.where(inside, wm * wk, 0)[..., None] * u[batch, :, rows, cols]
        return (v.transpose(0, 2, 1).reshape(n, channels, out_h, out_w).astype(np.float32),)

    @staticmethod
    def tensorrt(ctx, node: Node, u, theta):
        trt_fixed_dims(node, tuple(u.shape[1:]), "C, H or W",
                       "give the input fixed channels, height and width")
        trt, matrix = ctx.trt, ctx.trt.MatrixOperation.NONE
        select, const, k = _theta_selection(node)
        out_h, out_w = node.outputs[0].shape[2:]
        # g = θ_free · S + c: (N, 6), reshaped (N, 2, 3)
        free = ctx.reshape(theta, [0, k], "theta")
        picked = ctx.out(ctx.network.add_matrix_multiply(
            free, matrix, ctx.constant(select, "select"), matrix), "theta_select")
        full = ctx.out(ctx.network.add_elementwise(
            picked, ctx.constant(const[None], "theta_fixed"), trt.ElementWiseOperation.SUM),
            "theta_full")
        affine = ctx.reshape(full, [0, 2, 3], "affine")
        # grid (N, HW, 2) = base (1, HW, 3) · affineᵀ, then (N, out_h, out_w, 2)
        base = ctx.constant(_output_grid(out_h, out_w)[None], "base_grid")
        grid = ctx.out(ctx.network.add_matrix_multiply(
            base, matrix, affine, trt.MatrixOperation.TRANSPOSE), "grid_flat")
        grid = ctx.reshape(grid, [0, out_h, out_w, 2], "grid")
        layer = ctx.network.add_grid_sample(u, grid)
        layer.interpolation_mode = trt.InterpolationMode.LINEAR
        layer.align_corners = False
        layer.sample_mode = trt.SampleMode.FILL
        return (ctx.out(layer),)

    @staticmethod
    def onnx(ctx, node: Node, u: str, theta: str):
        ctx.require_opset(16, "SpatialTransformer (GridSample)")
        select, const, k = _theta_selection(node)
        out_h, out_w = onnx_fixed_dims(  # the sampling grid is a constant of this size
            ctx, node, node.outputs[0], (2, 3), "the output's height or width",
            "set st_param output_H and output_W, or give the input a fixed height and width")
        free = ctx.add("Reshape", [theta, ctx.ints([0, k], "theta_shape")], suffix="theta")[0]
        picked = ctx.add("MatMul", [free, ctx.constant(select, "select")],
                         suffix="theta_select")[0]
        full = ctx.add("Add", [picked, ctx.constant(const, "theta_fixed")],
                       suffix="theta_full")[0]
        affine = ctx.add("Reshape", [full, ctx.ints([0, 2, 3], "affine_shape")],
                         suffix="affine")[0]
        affine_t = ctx.add("Transpose", [affine], suffix="affine_t", perm=[0, 2, 1])[0]
        base = ctx.constant(_output_grid(out_h, out_w)[None], "base_grid")
        grid = ctx.add("MatMul", [base, affine_t], suffix="grid_flat")[0]
        grid = ctx.add("Reshape", [grid, ctx.ints([0, out_h, out_w, 2], "grid_shape")],
                       suffix="grid")[0]
        mode = "linear" if ctx.opset >= 20 else "bilinear"
        return (ctx.add("GridSample", [u, grid], align_corners=0, mode=mode,
                        padding_mode="zeros")[0],)
