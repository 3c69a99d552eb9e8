"""Layers of the Caffe forks that recurrent models use (caffe_semantics.md §4, §6):
Permute (SSD, crnn.caffe), Transpose and Reverse (caffe_ocr, CTPN; Transpose's grid-LSTM modes
of Charleen777/caffecode in ``grid_transpose``), ContinuationIndicator (warpctc-caffe,
crnn.caffe, jolibrain/caffe), Convert (Curve-Text-Detector)."""

from __future__ import annotations

import numpy as np

from caffe_lstm.errors import UnsupportedLayerError
from caffe_lstm.ir.graph import Node, Shape
from caffe_lstm.ops import grid_transpose
from caffe_lstm.ops.registry import (Op, canonical_axis, count, onnx_fixed_dims, register_op,
                                     shape_error, trt_fixed_dims)


def _check_permutation(node: Node, order: list[int], rank: int, field: str) -> None:
    if sorted(order) != list(range(rank)):
        raise shape_error(node, f"{field} {order} is not a permutation of the {rank} axes "
                          f"0..{rank - 1}", f"list each axis once in {field}")


def _permuted(x: Shape, order: list[int]) -> Shape:
    return tuple(x[axis] for axis in order)


def _trt_transpose(ctx, x, order: list[int]):
    if order == list(range(len(order))):
        return x  # the identity: no layer, the emitter keeps the input's name
    return ctx.transpose(x, order, "")


@register_op
class Permute(Op):
    """y = x with output axis i = input axis order[i] (permute_param, SSD lineage).

    ``order`` may list only the first axes: the missing ones follow in increasing order.
    """

    type = "Permute"
    origin = "SSD, weiliu89/caffe@4817bf8 (also xmfbit/warpctc-caffe@3e47d1f)"
    param = "permute_param"

    @staticmethod
    def parse(ctx, p):
        return {"order": list(p.order)}

    @staticmethod
    def infer(ctx, node: Node, x: Shape) -> tuple[Shape, ...]:
        return (_permuted(x, _full_order(node, len(x))),)

    @staticmethod
    def numpy(ctx, node: Node, x):
        return (np.transpose(x, _full_order(node, x.ndim)),)

    @staticmethod
    def tensorrt(ctx, node: Node, x):
        return (_trt_transpose(ctx, x, _full_order(node, len(x.shape))),)

    @staticmethod
    def onnx(ctx, node: Node, x: str):
        return (ctx.add("Transpose", [x], perm=_full_order(node, len(node.inputs[0].shape)))[0],)


def _full_order(node: Node, rank: int) -> list[int]:
    """``order`` (each axis < rank, no repeats) followed by the axes it does not list."""
    order = list(node.attrs["order"])
    if any(not 0 <= axis < rank for axis in order) or len(set(order)) != len(order):
        raise shape_error(node, f"order {order} repeats an axis or leaves the {rank} axes",
                          f"list distinct axes below {rank}")
    return order + [axis for axis in range(rank) if axis not in order]


@register_op
class Transpose(Op):
    """y = x with output axis i = input axis dim[i]; ``dim`` lists every axis (transpose_param,
    caffe_ocr and CTPN). With ``transposetype`` instead, the grid-LSTM layouts of
    Charleen777/caffecode (``grid_transpose``): LSTMINPUT (N, C, H, W) → (N·H·W, C) rows,
    LSTMOUTPUT rows → (batch_size, C, height, ·), GRIDLSTM each row's 8 neighbours' blocks."""

    type = "Transpose"
    origin = ("caffe_ocr, senlinuc/caffe_ocr@81642f6 (also tianzhi0549/CTPN@f77ec9e); "
              "transposetype: Charleen777/caffecode@bd3648c (transpose_layer.cpp)")
    limits = ("transposetype GRIDLSTMSUM is refused (no public net uses it); GRIDLSTM needs "
              "local_connected_num 8 (the fork's CHECK) and channels divisible by 8; TensorRT "
              "and ONNX need LSTMINPUT's C, H and W, and the other modes' rows and channels, "
              "fixed")
    param = "transpose_param"

    @staticmethod
    def parse(ctx, p):
        if p.has("transposetype"):
            return grid_transpose.parse(p)
        return {"dim": list(p.dim)}

    @staticmethod
    def infer(ctx, node: Node, x: Shape) -> tuple[Shape, ...]:
        if "transposetype" in node.attrs:
            return (grid_transpose.infer(node, x),)
        _check_permutation(node, node.attrs["dim"], len(x), "dim")
        return (_permuted(x, node.attrs["dim"]),)

    @staticmethod
    def numpy(ctx, node: Node, x):
        if "transposetype" in node.attrs:
            return (grid_transpose.numpy(node, x),)
        return (np.transpose(x, node.attrs["dim"]),)

    @staticmethod
    def tensorrt(ctx, node: Node, x):
        if "transposetype" in node.attrs:
            return (grid_transpose.tensorrt(ctx, node, x),)
        return (_trt_transpose(ctx, x, node.attrs["dim"]),)

    @staticmethod
    def onnx(ctx, node: Node, x: str):
        if "transposetype" in node.attrs:
            return (grid_transpose.onnx(ctx, node, x),)
        return (ctx.add("Transpose", [x], perm=list(node.attrs["dim"]))[0],)


@register_op
class Reverse(Op):
    """y = x flipped along ``axis`` (reverse_param, caffe_ocr and CTPN; axis ≥ 0, default 0).

    Reverse(axis 0) → Lstm → Reverse(axis 0) is how those nets run an LSTM backwards in time.
    """

    type = "Reverse"
    origin = "caffe_ocr, senlinuc/caffe_ocr@81642f6 (also tianzhi0549/CTPN@f77ec9e)"
    param = "reverse_param"

    @staticmethod
    def parse(ctx, p):
        return {"axis": p.axis}

    @staticmethod
    def infer(ctx, node: Node, x: Shape) -> tuple[Shape, ...]:
        axis = node.attrs["axis"]
        if not 0 <= axis < len(x):
            raise shape_error(node, f"axis {axis} is out of range for a {len(x)}-axis bottom",
                              f"use an axis in [0, {len(x)}) (the fork has no negative axes)")
        return (x,)

    @staticmethod
    def numpy(ctx, node: Node, x):
        return (np.flip(x, node.attrs["axis"]).copy(),)

    @staticmethod
    def tensorrt(ctx, node: Node, x):
        # ISliceLayer on the axis only: start at dim − 1, dim elements, stride −1
        axis, dim = node.attrs["axis"], x.shape[node.attrs["axis"]]
        layer = ctx.network.add_slice(x, (max(dim - 1, 0),), (max(dim, 0),), (-1,))
        layer.axes = (axis,)
        if dim < 0:  # a dynamic axis: start and size are computed at run time
            size = ctx.dims(x, axis, axis + 1)
            start = ctx.network.add_elementwise(size, ctx.ints([1], "one"),
                                                ctx.trt.ElementWiseOperation.SUB)
            layer.set_input(1, ctx.out(start, "start"))
            layer.set_input(2, size)
        return (ctx.out(layer),)

    @staticmethod
    def onnx(ctx, node: Node, x: str):
        # Slice with step −1 on the axis only: start −1 (the last element), end below −dim
        # (clamped to "before element 0"), so any size, fixed or symbolic, is flipped whole
        axis = node.attrs["axis"]
        inputs = [ctx.ints([-1], "start"), ctx.ints([_INT64_MIN], "end"), ctx.ints([axis], "axis"),
                  ctx.ints([-1], "step")]
        return (ctx.add("Slice", [x, *inputs])[0],)


#: Slice's "past the beginning" bound for a negative step.
_INT64_MIN = int(np.iinfo(np.int64).min)


@register_op
class ContinuationIndicator(Op):
    """cont for an LSTM: a (T, N) top, 0 at t = 0 and 1 for t ≥ 1 (continuation_indicator_param),
    so every forward pass starts from a zero state. T = time_step; N = batch_size without a
    bottom (warpctc-caffe, crnn.caffe), or with one bottom its size at ``axis`` (jolibrain/caffe:
    N follows the data, Blob::shape(axis), a negative axis counting from the end).
    """

    type = "ContinuationIndicator"
    origin = ("warpctc-caffe, xmfbit/warpctc-caffe@3e47d1f (also yalecyu/crnn.caffe@0d95ba2); "
              "with a bottom jolibrain/caffe@23928c0")
    param = "continuation_indicator_param"
    n_bottoms = (0, 1)
    reads_shapes_only = True  # the bottom gives N, never values

    @staticmethod
    def parse(ctx, p):
        return {"time_step": p.time_step, "batch_size": p.batch_size, "axis": p.axis}

    @staticmethod
    def infer(ctx, node: Node, *bottom: Shape) -> tuple[Shape, ...]:
        steps, batch = node.attrs["time_step"], _indicator_batch(node, bottom)
        if steps <= 0 or batch <= 0:
            where = "the bottom's size at axis" if bottom else "batch_size"
            raise shape_error(node, f"time_step {steps} and {where} {batch} must be > 0",
                              "set time_step (and batch_size without a bottom) in "
                              "continuation_indicator_param")
        return ((steps, batch),)

    @staticmethod
    def numpy(ctx, node: Node, *bottom):
        return (_indicator(node.attrs["time_step"],
                           _indicator_batch(node, tuple(np.shape(x) for x in bottom))),)

    @staticmethod
    def tensorrt(ctx, node: Node, *bottom):
        steps = node.attrs["time_step"]
        if bottom:
            return (_trt_indicator(ctx, steps, bottom[0], _bottom_axis(node, len(bottom[0].shape)),
                                   ""),)
        return (ctx.constant(_indicator(steps, node.attrs["batch_size"]), ""),)

    @staticmethod
    def onnx(ctx, node: Node, *bottom: str):
        steps = node.attrs["time_step"]
        if bottom:
            axis = _bottom_axis(node, len(node.inputs[0].shape))
            return (_onnx_indicator(ctx, steps, bottom[0], node.inputs[0], axis),)
        # a constant: T and N are the layer's own attributes, never the data's
        cont = ctx.constant(_indicator(steps, node.attrs["batch_size"]), "value")
        return (ctx.add("Identity", [cont])[0],)


def _indicator(steps: int, batch: int) -> np.ndarray:
    """The (steps, batch) cont: 0 at t = 0, 1 after."""
    cont = np.ones((steps, batch), np.float32)
    cont[0] = 0
    return cont


def _trt_indicator(ctx, steps: int, x, axis: int, suffix: str):
    """The (steps, N) cont with N = dim ``axis`` of tensor ``x``: a constant where N is fixed,
    else zeros (steps, N) plus the constant column (steps, 1) of 0, 1, 1, ..."""
    if x.shape[axis] >= 0:
        return ctx.constant(_indicator(steps, x.shape[axis]), suffix)
    zeros = ctx.zeros(ctx.concat_shape([steps, ctx.dims(x, axis, axis + 1)]))
    column = ctx.constant(_indicator(steps, 1), "column")
    return ctx.out(ctx.network.add_elementwise(zeros, column, ctx.trt.ElementWiseOperation.SUM),
                   suffix)


def _onnx_indicator(ctx, steps: int, x: str, value, axis: int) -> str:
    """``_trt_indicator`` in ONNX: a constant, or the column broadcast to a symbolic N."""
    (batch,) = ctx.dim_parts(x, value, [axis])
    column = ctx.constant(_indicator(steps, 1 if isinstance(batch, str) else batch), "value")
    if not isinstance(batch, str):
        return ctx.add("Identity", [column])[0]
    return ctx.add("Add", [ctx.zeros(ctx.shape_tensor([steps, batch])), column])[0]


def _bottom_axis(node: Node, rank: int) -> int:
    """``axis`` of jolibrain's layer as Blob::shape reads it (negative: from the end)."""
    return canonical_axis(node, node.attrs.get("axis", 0), rank)


def _indicator_batch(node: Node, bottom: tuple[Shape, ...]) -> int:
    """N: the bottom's size at ``axis``, or batch_size without a bottom (where an ``axis``
    other than 0 has no meaning the forks give it)."""
    if bottom:
        return int(bottom[0][_bottom_axis(node, len(bottom[0]))])
    if node.attrs.get("axis", 0) != 0:
        raise UnsupportedLayerError(
            f"continuation_indicator_param.axis is {node.attrs['axis']} without a bottom: "
            "jolibrain/caffe reads N at that axis of its bottom; warpctc-caffe and crnn.caffe, "
            "whose layer has no bottom, have no axis", node.label,
            "give the layer the bottom whose axis holds N (jolibrain's layer), drop the field, "
            "or implement the fork's layer as a plugin (docs/plugins.md)")
    return node.attrs["batch_size"]


@register_op
class Convert(Op):
    """x (S, D, 1, ..., W) → a sequence (W, S, D) and its cont (W, S): 0 at t = 0, 1 after
    (Yuliang-Liu/Curve-Text-Detector's bundled caffe, convert_layer.cpp): the last axis becomes
    time, so an LSTM runs along each sample's W positions; no param message.
    top[w, s, d] = x[s·D·W + d·W + w]: the axes between D and W must be 1."""

    type = "Convert"
    origin = "Yuliang-Liu/Curve-Text-Detector@2126a66 (caffe/src/caffe/layers/convert_layer.cpp)"
    limits = "TensorRT and ONNX need every bottom axis but the first (S) fixed"
    n_tops = (2, 2)  # Forward_cpu writes the cont top whatever the net declares

    @staticmethod
    def infer(ctx, node: Node, x: Shape) -> tuple[Shape, ...]:
        samples, dims, width = _convert_sizes(node, x)
        return (width, samples, dims), (width, samples)

    @staticmethod
    def numpy(ctx, node: Node, x):
        samples, dims, width = _convert_sizes(node, x.shape)
        return x.reshape(samples, dims, width).transpose(2, 0, 1), _indicator(width, samples)

    @staticmethod
    def tensorrt(ctx, node: Node, x):
        trt_fixed_dims(node, tuple(x.shape[1:]), "an axis after the first",
                       "give the input fixed dims after the first (D and W)")
        samples, dims, width = _convert_sizes(node, node.inputs[0].shape)
        rows = ctx.reshape(x, [-1, dims, width], "rows")
        return (ctx.transpose(rows, (2, 0, 1), ""), _trt_indicator(ctx, width, x, 0, "cont"))

    @staticmethod
    def onnx(ctx, node: Node, x: str):
        onnx_fixed_dims(ctx, node, node.inputs[0], range(1, len(node.inputs[0].shape)),
                        "an axis after the first", "give the input fixed dims after the first "
                        "(D and W)")
        samples, dims, width = _convert_sizes(node, node.inputs[0].shape)
        rows = ctx.add("Reshape", [x, ctx.ints([-1, dims, width], "rows")], suffix="rows")[0]
        sequence = ctx.add("Transpose", [rows], perm=[2, 0, 1])[0]
        return sequence, _onnx_indicator(ctx, width, x, node.inputs[0], 0)


def _convert_sizes(node: Node, x: Shape) -> tuple[int, int, int]:
    """(S, D, W) of Convert's bottom: shape(0), shape(1) and the last axis, the rest 1."""
    if len(x) < 3 or count(x, 2, len(x) - 1) != 1:
        raise shape_error(node, f"expected (S, D, 1, ..., W), found {tuple(x)}",
                          "the fork reads x[s·D·W + d·W + w]: reshape so that the axes between "
                          "the second and the last are 1")
    return x[0], x[1], x[-1]
