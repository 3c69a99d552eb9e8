"""Layers that move or regroup data: Slice, Concat, Split, Reshape, Flatten, Tile, Silence,
Reduction, Crop, ArgMax."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from caffe_lstm.ir.graph import Node, Shape
from caffe_lstm.ops.registry import Op, canonical_axis, count, register_op, shape_error

# The term each Reduction operation sums (MEAN divides the sum afterwards).
_REDUCTION_TERMS = {"SUM": np.asarray, "ASUM": np.abs, "SUMSQ": np.square, "MEAN": np.asarray}
REDUCTION_OPERATIONS = tuple(_REDUCTION_TERMS)


def _axis_attrs(p, legacy: str) -> dict[str, int]:
    """``axis`` and the deprecated uint32 ``legacy`` field, each kept only when written.

    ``axis`` (default 1) is also kept when neither is written, so both keys only appear when the
    prototxt sets both, which ``_legacy_axis`` rejects as Caffe does.
    """
    attrs = {legacy: getattr(p, legacy)} if p.has(legacy) else {}
    if p.has("axis") or not p.has(legacy):
        attrs["axis"] = p.axis
    return attrs


def _legacy_axis(node: Node, rank: int, legacy: str) -> int:
    """The axis from ``axis`` (canonical) or ``legacy`` (non-negative only), never both.

    Follows slice_layer.cpp / concat_layer.cpp.
    """
    axis, legacy_axis = node.attrs.get("axis"), node.attrs.get(legacy)
    if axis is not None and legacy_axis is not None:
        raise shape_error(node, f"both axis ({axis}) and {legacy} ({legacy_axis}) are set",
                          f"keep only axis; {legacy} is deprecated")
    if legacy_axis is None:
        return canonical_axis(node, 1 if axis is None else axis, rank)
    if not 0 <= legacy_axis < rank:
        raise shape_error(node, f"{legacy} {legacy_axis} is out of range for a {rank}-axis bottom",
                          f"use a {legacy} in [0, {rank})")
    return legacy_axis


@register_op
class Slice(Op):
    """top_i = x[…, p_{i−1}:p_i, …] along ``axis`` (slice_param; legacy ``slice_dim``).

    ``slice_point`` lists the strictly increasing cut points p_0 < p_1 < … (one fewer than the
    tops); without it the axis is cut into #tops equal parts.
    """

    type = "Slice"
    param = "slice_param"
    n_tops = (1, None)

    @staticmethod
    def parse(ctx, p):
        return {**_axis_attrs(p, "slice_dim"), "slice_point": list(p.slice_point)}

    @staticmethod
    def make_attrs(axis: int, slice_point: list[int] | None = None) -> dict:
        """The attributes of an even split of ``axis`` (or at ``slice_point``)."""
        return {"axis": axis, "slice_point": list(slice_point or [])}

    @staticmethod
    def infer(ctx, node: Node, x: Shape) -> tuple[Shape, ...]:
        axis = _legacy_axis(node, len(x), "slice_dim")
        sizes = _slice_sizes(node, x[axis], len(node.outputs))
        return tuple(x[:axis] + (size,) + x[axis + 1:] for size in sizes)

    @staticmethod
    def numpy(ctx, node: Node, x):
        axis = _legacy_axis(node, x.ndim, "slice_dim")
        sizes = _slice_sizes(node, x.shape[axis], len(node.outputs))
        # views of x, as np.split gives them, without its per-call bookkeeping (a loop body
        # cuts the gates apart at every step)
        lead, start, tops = (slice(None),) * axis, 0, []
        for size in sizes:
            tops.append(x[lead + (slice(start, start + size),)])
            start += size
        return tuple(tops)

    @staticmethod
    def tensorrt(ctx, node: Node, x):
        axis = _legacy_axis(node, len(x.shape), "slice_dim")
        if len(node.outputs) == 1:
            return (x,)
        sizes = _slice_sizes(node, _static_dim(node, x, axis), len(node.outputs))
        starts = np.cumsum([0] + sizes[:-1])
        # one ISliceLayer per top, on the slice axis only: the other dims may be dynamic
        return tuple(_slice_axis(ctx, x, axis, int(start), size, _top_suffix(node, i))
                     for i, (start, size) in enumerate(zip(starts, sizes)))

    @staticmethod
    def onnx(ctx, node: Node, x):
        value = node.inputs[0]
        axis = _legacy_axis(node, len(value.shape), "slice_dim")
        if len(node.outputs) == 1:
            return (x,)
        dim = ctx.static_dim(value, axis)
        if dim is None:
            raise shape_error(node, f"axis {axis} is symbolic in the exported model",
                              "keep this axis fixed in the shapes= ranges")
        # one Split at the cut points: top i = x[..., p_{i−1}:p_i, ...]
        sizes = _slice_sizes(node, dim, len(node.outputs))
        return tuple(ctx.add("Split", [x, ctx.ints(sizes, "split")], len(sizes), axis=axis))


def _slice_sizes(node: Node, dim: int, n_tops: int) -> list[int]:
    """The extent of every top along the slice axis."""
    points = list(node.attrs.get("slice_point") or [])
    if not points:
        if dim % n_tops:
            raise shape_error(node, f"axis dim {dim} cannot be cut into {n_tops} equal parts",
                              "give slice_point or a number of tops that divides it")
        return [dim // n_tops] * n_tops
    if len(points) != n_tops - 1:
        raise shape_error(node, f"expected {n_tops - 1} slice_point for {n_tops} tops, "
                          f"found {len(points)}")
    bounds = [0, *points, dim]
    if any(stop <= start for start, stop in zip(bounds, bounds[1:])):
        raise shape_error(node, f"slice_point must be strictly increasing within (0, {dim}), "
                          f"found {points}")
    return [stop - start for start, stop in zip(bounds, bounds[1:])]


@register_op
class Concat(Op):
    """y = the bottoms joined along ``axis`` (concat_param; legacy ``concat_dim``).

    All bottoms have the same rank and the same dims except along the concat axis.
    """

    type = "Concat"
    param = "concat_param"
    n_bottoms = (1, None)

    @staticmethod
    def parse(ctx, p):
        return _axis_attrs(p, "concat_dim")

    @staticmethod
    def make_attrs(axis: int) -> dict:
        """The attributes of a concatenation on ``axis``."""
        return {"axis": axis}

    @staticmethod
    def infer(ctx, node: Node, *shapes: Shape) -> tuple[Shape, ...]:
        first = shapes[0]
        axis = _legacy_axis(node, len(first), "concat_dim")
        for index, shape in enumerate(shapes[1:], start=1):
            others_match = all(a == b for i, (a, b) in enumerate(zip(first, shape)) if i != axis)
            if len(shape) != len(first) or not others_match:
                raise shape_error(node, f"bottom {index} has shape {shape}, expected {first} "
                                  f"except along axis {axis}")
        return (first[:axis] + (sum(s[axis] for s in shapes),) + first[axis + 1:],)

    @staticmethod
    def numpy(ctx, node: Node, *bottoms):
        return (np.concatenate(bottoms, axis=_legacy_axis(node, bottoms[0].ndim, "concat_dim")),)

    @staticmethod
    def tensorrt(ctx, node: Node, *bottoms):
        if len(bottoms) == 1:
            return (bottoms[0],)
        layer = ctx.network.add_concatenation(list(bottoms))
        layer.axis = _legacy_axis(node, len(bottoms[0].shape), "concat_dim")
        return (ctx.out(layer),)

    @staticmethod
    def onnx(ctx, node: Node, *bottoms):
        if len(bottoms) == 1:
            return (bottoms[0],)
        axis = _legacy_axis(node, len(node.inputs[0].shape), "concat_dim")
        return (ctx.add("Concat", list(bottoms), axis=axis)[0],)


@register_op
class Split(Op):
    """top_i = x for every top (no param): Caffe's fan-out of one blob to several layers."""

    type = "Split"
    n_tops = (1, None)

    @staticmethod
    def infer(ctx, node: Node, x: Shape) -> tuple[Shape, ...]:
        return (x,) * len(node.outputs)

    @staticmethod
    def numpy(ctx, node: Node, x):
        return (x,) * len(node.outputs)

    @staticmethod
    def tensorrt(ctx, node: Node, x):
        return (x,) * len(node.outputs)  # aliases: no layer at all

    @staticmethod
    def onnx(ctx, node: Node, x):
        return (x,) * len(node.outputs)  # aliases: no node at all


@register_op
class Reshape(Op):
    """y = x with the axes [axis, axis+num_axes) replaced by ``shape`` (reshape_param).

    In ``shape``, 0 copies the input dim at the same position (axis + i) and −1 is inferred from
    the element count. A negative ``axis`` counts from after the last axis (−1 = append).
    """

    type = "Reshape"
    param = "reshape_param"

    @staticmethod
    def parse(ctx, p):
        return Reshape.make_attrs(list(p.shape.dim), axis=p.axis, num_axes=p.num_axes)

    @staticmethod
    def make_attrs(dims: list[int], *, axis: int = 0, num_axes: int = -1) -> dict:
        """The node attributes (reshape_param's fields, its defaults)."""
        return {"shape": list(dims), "axis": axis, "num_axes": num_axes}

    @staticmethod
    def caffe(ctx, node: Node) -> dict:
        """shape (a list of dims) -> ``shape { dim }``."""
        return {**node.attrs, "shape": {"dim": [int(d) for d in node.attrs["shape"]]}}

    @staticmethod
    def infer(ctx, node: Node, x: Shape) -> tuple[Shape, ...]:
        start, end = _reshape_range(node, len(x))
        new_dims = _reshape_dims(node, x, start)
        shape = _infer_minus_one(node, x, x[:start] + new_dims + x[end:])
        if count(shape) != count(x):
            raise shape_error(node, f"the new shape {shape} has {count(shape)} elements, "
                              f"the bottom {x} has {count(x)}", "the count must not change")
        return (shape,)

    @staticmethod
    def numpy(ctx, node: Node, x):
        return (x.reshape(Reshape.infer(ctx, node, x.shape)[0]),)

    @staticmethod
    def tensorrt(ctx, node: Node, x):
        rank = len(x.shape)
        start, end = _reshape_range(node, rank)
        # output dims: x[:start], then shape (0 copies x[start + i]), then x[end:]
        new = [_Copy(start + i) if d == 0 else d for i, d in enumerate(node.attrs["shape"])]
        plan = [_Copy(i) for i in range(start)] + new + [_Copy(i) for i in range(end, rank)]
        return (_emit_reshape(ctx, x, plan),)

    @staticmethod
    def onnx(ctx, node: Node, x):
        rank = len(node.inputs[0].shape)
        start, end = _reshape_range(node, rank)
        # output dims: x[:start], then shape (0 copies x[start + i], −1 is inferred), x[end:]
        new = [_Copy(start + i) if d == 0 else d for i, d in enumerate(node.attrs["shape"])]
        plan = [_Copy(i) for i in range(start)] + new + [_Copy(i) for i in range(end, rank)]
        return (_onnx_reshape(ctx, node, x, plan),)


def _reshape_range(node: Node, rank: int) -> tuple[int, int]:
    """The replaced input axes [start, end) (reshape_layer.cpp: axis −1 means after the end)."""
    axis, num_axes = node.attrs["axis"], node.attrs["num_axes"]
    start = axis if axis >= 0 else rank + axis + 1
    if not 0 <= start <= rank:
        raise shape_error(node, f"axis {axis} is out of range for a {rank}-axis bottom",
                          f"use an axis in [{-rank - 1}, {rank}]")
    if num_axes < -1:
        raise shape_error(node, f"num_axes must be ≥ −1, found {num_axes}", "use −1 for all")
    end = rank if num_axes == -1 else start + num_axes
    if end > rank:
        raise shape_error(node, f"axis {start} + num_axes {num_axes} exceeds the {rank} axes "
                          "of the bottom", "lower num_axes")
    return start, end


def _reshape_dims(node: Node, x: Shape, start: int) -> Shape:
    """``shape`` with every 0 replaced by the input dim it copies; −1 left in place."""
    dims = tuple(node.attrs["shape"])
    if any(d < -1 for d in dims):
        raise shape_error(node, f"shape dims must be ≥ −1, found {list(dims)}",
                          "use 0 to copy a dim and −1 to infer one")
    if dims.count(-1) > 1:
        raise shape_error(node, f"shape has more than one −1 dim: {list(dims)}",
                          "at most one dim can be inferred")
    for i, d in enumerate(dims):
        if d == 0 and start + i >= len(x):
            raise shape_error(node, f"shape dim {i} is 0 but bottom {x} has no axis {start + i} "
                              "to copy", "give the dim explicitly")
    return tuple(x[start + i] if d == 0 else d for i, d in enumerate(dims))


def _infer_minus_one(node: Node, x: Shape, shape: Shape) -> Shape:
    """``shape`` with its −1 (if any) set to count(x) / (product of the other dims)."""
    if -1 not in shape:
        return shape
    known = count(tuple(d for d in shape if d != -1))
    if known == 0 or count(x) % known:
        raise shape_error(node, f"cannot infer the −1 dim: count {count(x)} of {x} is not "
                          f"divisible by {known}", "check the reshape_param shape")
    return tuple(count(x) // known if d == -1 else d for d in shape)


@register_op
class Flatten(Op):
    """y = x with the axes [axis, end_axis] merged into one (flatten_param)."""

    type = "Flatten"
    param = "flatten_param"

    @staticmethod
    def parse(ctx, p):
        return {"axis": p.axis, "end_axis": p.end_axis}

    @staticmethod
    def infer(ctx, node: Node, x: Shape) -> tuple[Shape, ...]:
        start = canonical_axis(node, node.attrs["axis"], len(x))
        end = canonical_axis(node, node.attrs["end_axis"], len(x), "end_axis")
        # Caffe takes count(start, end + 1), which accepts end = start − 1 (it inserts a 1).
        if end < start - 1:
            raise shape_error(node, f"end_axis {end} comes before axis {start}",
                              "use end_axis ≥ axis")
        return (x[:start] + (count(x, start, end + 1),) + x[end + 1:],)

    @staticmethod
    def numpy(ctx, node: Node, x):
        return (x.reshape(Flatten.infer(ctx, node, x.shape)[0]),)

    @staticmethod
    def tensorrt(ctx, node: Node, x):
        rank = len(x.shape)
        start = canonical_axis(node, node.attrs["axis"], rank)
        end = canonical_axis(node, node.attrs["end_axis"], rank, "end_axis")
        merged = x.shape[start:end + 1]
        # the merged dim: its size when all its dims are known, else inferred (-1)
        size = count(merged) if all(d >= 0 for d in merged) else -1
        plan = [_Copy(i) for i in range(start)] + [size] + [_Copy(i) for i in range(end + 1, rank)]
        return (_emit_reshape(ctx, x, plan),)

    @staticmethod
    def onnx(ctx, node: Node, x):
        value = node.inputs[0]
        rank = len(value.shape)
        start = canonical_axis(node, node.attrs["axis"], rank)
        end = canonical_axis(node, node.attrs["end_axis"], rank, "end_axis")
        # the merged dim: its size when all its dims are fixed, else inferred (−1)
        merged = [ctx.static_dim(value, a) for a in range(start, end + 1)]
        size = count(merged) if None not in merged else -1
        plan = [_Copy(i) for i in range(start)] + [size] + [_Copy(i) for i in range(end + 1, rank)]
        return (_onnx_reshape(ctx, node, x, plan),)


@register_op
class Tile(Op):
    """y = x repeated ``tiles`` times along ``axis``, whole blocks one after another (ABAB), like
    numpy.tile (tile_param)."""

    type = "Tile"
    param = "tile_param"

    @staticmethod
    def parse(ctx, p):
        return {"axis": p.axis, "tiles": p.tiles if p.has("tiles") else None}

    @staticmethod
    def infer(ctx, node: Node, x: Shape) -> tuple[Shape, ...]:
        axis = canonical_axis(node, node.attrs["axis"], len(x))
        tiles = node.attrs.get("tiles")
        if tiles is None or tiles <= 0:
            raise shape_error(node, f"tiles must be set and > 0, found {tiles}",
                              "set tile_param.tiles")
        return (x[:axis] + (x[axis] * tiles,) + x[axis + 1:],)

    @staticmethod
    def numpy(ctx, node: Node, x):
        axis = canonical_axis(node, node.attrs["axis"], x.ndim)
        reps = [1] * x.ndim
        reps[axis] = node.attrs["tiles"]
        return (np.tile(x, reps),)

    @staticmethod
    def tensorrt(ctx, node: Node, x):
        # numpy.tile on one axis = reading that axis tiles·dim long with wrap-around (ABAB)
        axis, tiles = canonical_axis(node, node.attrs["axis"], len(x.shape)), node.attrs["tiles"]
        dim = x.shape[axis]
        layer = ctx.network.add_slice(x, (0,), (max(dim, 0) * tiles,), (1,))
        layer.axes, layer.mode = (axis,), ctx.trt.SampleMode.WRAP
        if dim < 0:  # a dynamic axis: the size is computed at run time
            size = ctx.network.add_elementwise(ctx.dims(x, axis, axis + 1), ctx.ints([tiles]),
                                               ctx.trt.ElementWiseOperation.PROD)
            layer.set_input(2, ctx.out(size, "size"))
        return (ctx.out(layer),)

    @staticmethod
    def onnx(ctx, node: Node, x):
        # ONNX Tile repeats whole blocks like numpy.tile: repeats 1 except tiles on axis
        rank = len(node.inputs[0].shape)
        repeats = [1] * rank
        repeats[canonical_axis(node, node.attrs["axis"], rank)] = node.attrs["tiles"]
        return (ctx.add("Tile", [x, ctx.ints(repeats, "repeats")])[0],)


@register_op
class Silence(Op):
    """No tops, no computation (no param): swallows blobs nothing else reads."""

    type = "Silence"
    n_bottoms = (1, None)
    n_tops = (0, 0)

    @staticmethod
    def infer(ctx, node: Node, *shapes: Shape) -> tuple[Shape, ...]:
        if not shapes:
            raise shape_error(node, "expected at least 1 bottom, found 0")
        return ()

    @staticmethod
    def numpy(ctx, node: Node, *bottoms):
        return ()

    @staticmethod
    def tensorrt(ctx, node: Node, *bottoms):
        return ()

    @staticmethod
    def onnx(ctx, node: Node, *bottoms):
        return ()


@register_op
class Reduction(Op):
    """y[o] = coeff · Σ_k f(x[o, k]) over all axes from ``axis`` on (reduction_param).

    f is x (SUM), |x| (ASUM), x² (SUMSQ) or x / count(axis) (MEAN); the top keeps the axes
    before ``axis`` (shape () for axis 0).
    """

    type = "Reduction"
    param = "reduction_param"

    @staticmethod
    def parse(ctx, p):
        return {"operation": p.operation, "axis": p.axis, "coeff": p.coeff}

    @staticmethod
    def infer(ctx, node: Node, x: Shape) -> tuple[Shape, ...]:
        axis = canonical_axis(node, node.attrs["axis"], len(x))
        if node.attrs["operation"] not in REDUCTION_OPERATIONS:
            raise shape_error(node, f"operation {node.attrs['operation']!r} is unknown",
                              f"use one of {', '.join(REDUCTION_OPERATIONS)}")
        return (x[:axis],)

    @staticmethod
    def numpy(ctx, node: Node, x):
        axis = canonical_axis(node, node.attrs["axis"], x.ndim)
        rows = x.reshape(count(x.shape, 0, axis), count(x.shape, axis))
        operation, coeff = node.attrs["operation"], node.attrs["coeff"]
        if operation == "MEAN":
            coeff = coeff / rows.shape[1]  # Caffe folds the 1/count into coeff
        total = _REDUCTION_TERMS[operation](rows).sum(axis=1)
        return ((np.float32(coeff) * total).reshape(x.shape[:axis]),)

    @staticmethod
    def tensorrt(ctx, node: Node, x):
        axis, rank = canonical_axis(node, node.attrs["axis"], len(x.shape)), len(x.shape)
        operation, coeff = node.attrs["operation"], node.attrs["coeff"]
        ops, term = ctx.trt.ElementWiseOperation, x
        if operation == "ASUM":  # Σ|x|
            term = ctx.out(ctx.network.add_unary(x, ctx.trt.UnaryOperation.ABS), "abs")
        elif operation == "SUMSQ":  # Σx²
            term = ctx.out(ctx.network.add_elementwise(x, x, ops.PROD), "square")
        # MEAN = coeff · Σx / count = coeff · average
        kind = ctx.trt.ReduceOperation.AVG if operation == "MEAN" else ctx.trt.ReduceOperation.SUM
        mask = sum(1 << a for a in range(axis, rank))  # every axis from axis on
        y = ctx.out(ctx.network.add_reduce(term, kind, mask, False), "" if coeff == 1 else "sum")
        if coeff == 1:
            return (y,)
        factor = ctx.constant(np.full((1,) * axis, coeff, np.float32), "coeff")
        return (ctx.out(ctx.network.add_elementwise(y, factor, ops.PROD)),)

    @staticmethod
    def onnx(ctx, node: Node, x):
        rank = len(node.inputs[0].shape)
        axis = canonical_axis(node, node.attrs["axis"], rank)
        operation, coeff = node.attrs["operation"], node.attrs["coeff"]
        # y = coeff · Σ f(x) over the axes from axis on, those axes dropped: SUM Σx, ASUM Σ|x|
        # (ReduceL1), SUMSQ Σx² (ReduceSumSquare), MEAN Σx / count (ReduceMean)
        op_type = {"SUM": "ReduceSum", "ASUM": "ReduceL1", "SUMSQ": "ReduceSumSquare",
                   "MEAN": "ReduceMean"}[operation]
        y = ctx.reduce(op_type, x, list(range(axis, rank)), "" if coeff == 1 else "sum")
        if coeff == 1:
            return (y,)
        return (ctx.add("Mul", [y, ctx.scalar(coeff, "coeff")])[0],)


# ---- TensorRT helpers ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Copy:
    """An output dim of a reshape that copies input axis ``axis``."""

    axis: int


def _emit_reshape(ctx, x, plan: list):
    """An IShuffleLayer reshape to ``plan`` (literal dims, at most one -1, and _Copy).

    Static dims when every copied dim is known at build time, else a shape tensor whose dynamic
    pieces are read from x at run time.
    """
    dims = [x.shape[p.axis] if isinstance(p, _Copy) else p for p in plan]
    dynamic = [isinstance(p, _Copy) and d < 0 for p, d in zip(plan, dims)]
    if not any(dynamic):
        return ctx.reshape(x, dims, "")
    parts = [ctx.dims(x, p.axis, p.axis + 1) if dyn else d
             for p, d, dyn in zip(plan, dims, dynamic)]
    return ctx.reshape(x, ctx.concat_shape(parts), "")


def _onnx_reshape(ctx, node: Node, x: str, plan: list) -> str:
    """One ONNX Reshape to ``plan`` (literal dims, at most one −1, and _Copy).

    ONNX Reshape's 0 copies the input dim at the SAME index, Caffe's copy may move (a dim after
    the replaced range): a copy at its own index is written 0, a fixed one as its size, and a
    moved symbolic one is read at run time (Gather of the input's Shape).
    """
    value = node.inputs[0]
    parts: list = []
    for position, item in enumerate(plan):
        if not isinstance(item, _Copy):
            parts.append(item)
        elif item.axis == position:
            parts.append(0)
        else:
            parts.extend(ctx.dim_parts(x, value, [item.axis]))
    return ctx.add("Reshape", [x, ctx.shape_tensor(parts, "target_shape")])[0]


def _slice_axis(ctx, x, axis: int, start: int, size: int, suffix: str):
    """x[..., start:start + size, ...] on ``axis``; the other axes are taken whole."""
    layer = ctx.network.add_slice(x, (start,), (size,), (1,))
    layer.axes = (axis,)
    return ctx.out(layer, suffix)


def _static_dim(node: Node, x, axis: int) -> int:
    """x's dim on ``axis``, which must be known at build time (slice points depend on it)."""
    dim = x.shape[axis]
    if dim < 0:
        raise shape_error(node, f"axis {axis} is dynamic (-1) in the TensorRT network",
                          "keep this axis fixed in the build's shape ranges")
    return dim


def _top_suffix(node: Node, index: int) -> str:
    """``i`` for top ``lstm1/gate_i`` of node ``__lstm1/gate``: the top's own part of its name."""
    top = node.outputs[index].name.rsplit("/", 1)[-1]
    stem = node.name.rsplit("/", 1)[-1] + "_"
    return top[len(stem):] if top.startswith(stem) and len(top) > len(stem) else top


@register_op
class Crop(Op):
    """y = x[…, o_a : o_a + ref_a, …] for every axis a from ``axis`` on, the earlier axes whole
    (crop_param; bottom 1 is the reference whose dims the crop takes).

    ``offset`` is empty (all 0), one value for every cropped axis, or one per cropped axis.
    """

    type = "Crop"
    param = "crop_param"
    n_bottoms = (2, 2)

    @staticmethod
    def parse(ctx, p):
        return {"axis": p.axis, "offset": list(p.offset)}

    @staticmethod
    def infer(ctx, node: Node, x: Shape, ref: Shape) -> tuple[Shape, ...]:
        start, offsets = _crop_offsets(node, x, ref)
        for a, offset in enumerate(offsets, start=start):
            if offset + ref[a] > x[a]:
                raise shape_error(node, f"axis {a}: offset {offset} + crop size {ref[a]} exceeds "
                                  f"the bottom's {x[a]}", "lower the offset or check bottom 1")
        return (x[:start] + ref[start:],)

    @staticmethod
    def numpy(ctx, node: Node, x, ref):
        start, offsets = _crop_offsets(node, x.shape, ref.shape)
        index = tuple(slice(o, o + n) for o, n in zip(offsets, ref.shape[start:]))
        return (x[(slice(None),) * start + index],)

    @staticmethod
    def tensorrt(ctx, node: Node, x, ref):
        start, offsets = _crop_offsets(node, tuple(x.shape), tuple(ref.shape))
        dims = tuple(x.shape[:start]) + tuple(ref.shape[start:])
        layer = ctx.network.add_slice(x, (0,) * start + tuple(offsets),
                                      tuple(max(d, 0) for d in dims), (1,) * len(dims))
        if any(d < 0 for d in dims):  # dynamic dims: the size is read at run time
            layer.set_input(2, ctx.concat_shape([ctx.dims(x, 0, start), ctx.dims(ref, start)]))
        return (ctx.out(layer),)

    @staticmethod
    def onnx(ctx, node: Node, x, ref):
        x_value, ref_value = node.inputs
        start, offsets = _crop_offsets(node, x_value.shape, ref_value.shape)
        axes = list(range(start, len(x_value.shape)))
        # y = x[..., o_a : o_a + ref_a, ...] on the axes from start on; a symbolic ref dim is
        # read at run time (ends = offsets + Shape(ref)[axes])
        sizes = ctx.dim_parts(ref, ref_value, axes)
        if all(isinstance(d, int) for d in sizes):
            ends = ctx.ints([o + d for o, d in zip(offsets, sizes)], "ends")
        else:
            ref_dims = ctx.add("Gather", [ctx.shape_of(ref), ctx.ints(axes, "axes")],
                               suffix="ref_dims", axis=0)[0]
            ends = ctx.add("Add", [ref_dims, ctx.ints(offsets, "offsets")], suffix="ends")[0]
        return (ctx.add("Slice", [x, ctx.ints(offsets, "starts"), ends,
                                  ctx.ints(axes, "axes")])[0],)


def _crop_offsets(node: Node, x: Shape, ref: Shape) -> tuple[int, list[int]]:
    """The first cropped axis and one offset per cropped axis (crop_layer.cpp)."""
    if len(x) != len(ref):
        raise shape_error(node, f"bottom 0 {x} and bottom 1 {ref} differ in rank",
                          "crop against a blob with as many axes")
    start = canonical_axis(node, node.attrs["axis"], len(x))
    offsets, cropped = list(node.attrs["offset"]), len(x) - start
    if len(offsets) > 1 and len(offsets) != cropped:
        raise shape_error(node, f"{len(offsets)} offsets for {cropped} cropped axes",
                          "give one offset, or one per axis from crop_param.axis on")
    if any(o < 0 for o in offsets):
        raise shape_error(node, f"offsets must be ≥ 0, found {offsets}")
    return start, (offsets or [0]) * cropped if len(offsets) <= 1 else offsets


#: TensorRT's ITopKLayer handles k up to this.
_TRT_MAX_TOP_K = 3840


@register_op
class ArgMax(Op):
    """The indices (as floats) of the ``top_k`` largest values, largest first (argmax_param).

    With ``axis``: along that axis, whose dim becomes top_k; ``out_max_val`` gives the values
    instead. Without: over each item's count(1) values, top (N, 1, top_k, 1…) of rank ≥ 3;
    ``out_max_val`` then stacks indices and values as (N, 2, top_k, …). Equal values rank the
    higher index first (std::greater on (value, index) pairs, argmax_layer.cpp).
    """

    type = "ArgMax"
    param = "argmax_param"

    @staticmethod
    def parse(ctx, p):
        return {"out_max_val": p.out_max_val, "top_k": p.top_k,
                "axis": p.axis if p.has("axis") else None}

    @staticmethod
    def infer(ctx, node: Node, x: Shape) -> tuple[Shape, ...]:
        k, axis = node.attrs["top_k"], _argmax_axis(node, x)
        dim = count(x, 1) if axis is None else x[axis]
        if not 1 <= k <= dim:
            raise shape_error(node, f"top_k {k} must be in [1, {dim}] for bottom {x}",
                              "lower argmax_param.top_k")
        if axis is not None:
            return (x[:axis] + (k,) + x[axis + 1:],)
        rows = 2 if node.attrs["out_max_val"] else 1
        return ((x[0], rows, k) + (1,) * (len(x) - 3),)

    @staticmethod
    def numpy(ctx, node: Node, x):
        axis, k = _argmax_axis(node, x.shape), node.attrs["top_k"]
        data = x if axis is not None else x.reshape(x.shape[0], -1)
        along = 1 if axis is None else axis
        # descending by value, ties to the higher index: a stable sort of the flipped axis
        order = np.argsort(-np.flip(data, along), axis=along, kind="stable")
        index = data.shape[along] - 1 - np.take(order, np.arange(k), axis=along)
        values = np.take_along_axis(data, index, axis=along)
        if axis is not None:
            return ((values if node.attrs["out_max_val"] else index).astype(np.float32),)
        rows = [index, values] if node.attrs["out_max_val"] else [index]
        top = np.stack(rows, axis=1).astype(np.float32)
        return (top.reshape(ArgMax.infer(ctx, node, x.shape)[0]),)

    @staticmethod
    def tensorrt(ctx, node: Node, x):
        axis, k = _argmax_axis(node, tuple(x.shape)), node.attrs["top_k"]
        if k > _TRT_MAX_TOP_K:
            raise shape_error(node, f"top_k {k} exceeds TensorRT's limit {_TRT_MAX_TOP_K}")
        data = x if axis is not None else ctx.reshape(x, (0, -1), "flatten")
        along = 1 if axis is None else axis
        layer = ctx.named(ctx.network.add_topk(data, ctx.trt.TopKOperation.MAX, k, 1 << along),
                          "topk")
        values, index = layer.get_output(0), layer.get_output(1)
        if axis is not None:
            return (values if node.attrs["out_max_val"] else ctx.cast(index, ctx.float_trt, ""),)
        rows = [ctx.cast(index, ctx.float_trt, "index")]
        if node.attrs["out_max_val"]:
            rows.append(values)
        stacked = ctx.network.add_concatenation([ctx.unsqueeze(r, 1, f"row{i}")
                                                 for i, r in enumerate(rows)])
        stacked.axis = 1
        top = ctx.out(stacked, "stack")
        return (ctx.reshape(top, (0, len(rows), k) + (1,) * (len(x.shape) - 3), ""),)

    @staticmethod
    def onnx(ctx, node: Node, x):
        value = node.inputs[0]
        axis, k = _argmax_axis(node, value.shape), node.attrs["top_k"]
        data = x if axis is not None else ctx.add(
            "Reshape", [x, ctx.ints([0, -1], "flat_shape")], suffix="flatten")[0]
        along = 1 if axis is None else axis
        # ONNX TopK ranks equal values lower index first, Caffe higher index first: TopK runs
        # on the axis reversed (element j there is element dim − 1 − j), index = dim − 1 − j
        flipped = ctx.add("Slice", [data, ctx.ints([-1], "starts"),
                                    ctx.ints([np.iinfo(np.int64).min], "ends"),
                                    ctx.ints([along], "axes"), ctx.ints([-1], "steps")],
                          suffix="reversed")[0]
        values, j = ctx.add("TopK", [flipped, ctx.ints([k], "k")], 2, suffix="topk",
                            axis=along, largest=1, sorted=1)
        fixed = [ctx.static_dim(value, a) for a in
                 ((axis,) if axis is not None else range(1, len(value.shape)))]
        last = (ctx.ints([count(fixed) - 1], "last") if None not in fixed
                else _onnx_last_index(ctx, data, along))
        index = ctx.add("Sub", [last, j], suffix="index_int")[0]
        index = ctx.add("Cast", [index], suffix="" if axis is not None else "index", to=1)[0]
        if axis is not None:
            return (values if node.attrs["out_max_val"] else index,)
        # no axis: rows index (and values) stacked on axis 1, then (N, rows, k, 1, ...)
        rows = [index, values] if node.attrs["out_max_val"] else [index]
        stacked = ctx.add("Concat", [ctx.unsqueeze(r, [1], f"row{i}") for i, r in
                                     enumerate(rows)], suffix="stack", axis=1)[0]
        shape = ctx.ints([0, len(rows), k] + [1] * (len(value.shape) - 3), "top_shape")
        return (ctx.add("Reshape", [stacked, shape])[0],)


def _onnx_last_index(ctx, data: str, along: int) -> str:
    """dim − 1 of ``data`` on axis ``along``, read at run time, as a 1-D int64 tensor."""
    dim = ctx.add("Gather", [ctx.shape_of(data), ctx.ints([along], "along")], suffix="dim",
                  axis=0)[0]
    return ctx.add("Sub", [dim, ctx.ints([1], "one")], suffix="last")[0]


def _argmax_axis(node: Node, x: Shape) -> int | None:
    axis = node.attrs.get("axis")
    return None if axis is None else canonical_axis(node, axis, len(x))
