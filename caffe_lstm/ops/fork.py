"""Layers of the Caffe forks that recurrent models use (caffe_semantics.md §4, §6):
Permute (SSD, crnn.caffe), Transpose and Reverse (caffe_ocr, CTPN), ContinuationIndicator
(warpctc-caffe, crnn.caffe)."""

from __future__ import annotations

import numpy as np

from caffe_lstm.errors import UnsupportedLayerError
from caffe_lstm.ir.graph import Node, Shape
from caffe_lstm.ops.registry import Op, register_op, shape_error


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
    caffe_ocr and CTPN)."""

    type = "Transpose"
    origin = "caffe_ocr, senlinuc/caffe_ocr@81642f6 (also tianzhi0549/CTPN@f77ec9e)"
    param = "transpose_param"

    @staticmethod
    def parse(ctx, p):
        return {"dim": list(p.dim)}

    @staticmethod
    def infer(ctx, node: Node, x: Shape) -> tuple[Shape, ...]:
        _check_permutation(node, node.attrs["dim"], len(x), "dim")
        return (_permuted(x, node.attrs["dim"]),)

    @staticmethod
    def numpy(ctx, node: Node, x):
        return (np.transpose(x, node.attrs["dim"]),)

    @staticmethod
    def tensorrt(ctx, node: Node, x):
        return (_trt_transpose(ctx, x, node.attrs["dim"]),)

    @staticmethod
    def onnx(ctx, node: Node, x: str):
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
    """A constant (time_step, batch_size) top: 0 at t = 0, 1 for t ≥ 1, no bottoms
    (continuation_indicator_param, warpctc-caffe / crnn.caffe).

    It feeds an LSTM's ``cont``: every forward pass starts from a zero state.
    """

    type = "ContinuationIndicator"
    origin = "warpctc-caffe, xmfbit/warpctc-caffe@3e47d1f (also yalecyu/crnn.caffe@0d95ba2)"
    limits = ("continuation_indicator_param.axis other than 0 is refused: no public fork "
              "source says what it selects")
    param = "continuation_indicator_param"
    n_bottoms = (0, 0)

    @staticmethod
    def parse(ctx, p):
        attrs = {"time_step": p.time_step, "batch_size": p.batch_size}
        if p.axis != 0:  # kept only to be refused by infer: never written back
            attrs["axis"] = p.axis
        return attrs

    @staticmethod
    def infer(ctx, node: Node) -> tuple[Shape, ...]:
        # axis: 0 is the layer's own time-major (T, N) top. No public source of a fork says
        # what another axis selects (searched: BVLC-derived forks, warpctc-caffe, crnn.caffe;
        # jolibrain's ncnn port of the layer reads axis and never uses it).
        if "axis" in node.attrs:
            raise UnsupportedLayerError(
                f"continuation_indicator_param.axis is {node.attrs['axis']}: no public source "
                "of the fork that writes this field says what it selects (jolibrain's ncnn "
                "port reads it and ignores it); only axis 0, the time-major (time_step, "
                "batch_size) top, is implemented", node.label,
                "drop the field, or implement the fork's layer as a plugin (docs/plugins.md)")
        steps, batch = node.attrs["time_step"], node.attrs["batch_size"]
        if steps <= 0 or batch <= 0:
            raise shape_error(node, f"time_step {steps} and batch_size {batch} must be > 0",
                              "set both in continuation_indicator_param")
        return ((steps, batch),)

    @staticmethod
    def numpy(ctx, node: Node):
        cont = np.ones((node.attrs["time_step"], node.attrs["batch_size"]), np.float32)
        cont[0] = 0
        return (cont,)

    @staticmethod
    def tensorrt(ctx, node: Node):
        return (ctx.constant(ContinuationIndicator.numpy(None, node)[0], ""),)

    @staticmethod
    def onnx(ctx, node: Node):
        # a constant: T and N are the layer's own attributes, never the data's
        cont = ctx.constant(ContinuationIndicator.numpy(None, node)[0], "value")
        return (ctx.add("Identity", [cont])[0],)
