"""DummyData: constant tops, as Caffe fills them (constant fillers); ZerosData (a fork's zeros).

Deploy nets use DummyData as placeholders that callers overwrite (pycaffe's
``net.blobs[name].data[...] = x``); here a ``run --inputs`` array named like a DummyData top
replaces the constant the same way (``feeds.apply_feeds``). Rewrites use DummyData for the zero
initial states of an unrolled recurrence, as Caffe's own unrolled net feeds zeros to h_0, c_0.
"""

from __future__ import annotations

import numpy as np

from caffe_lstm.ir.graph import Node, Shape
from caffe_lstm.ops.registry import Op, register_op, shape_error


@register_op
class DummyData(Op):
    """top_i = a constant ``values[i]`` of shape ``shapes[i]`` (dummy_data_param).

    Shapes come from ``shape`` (one for all tops, or one per top) or from the legacy
    num/channels/height/width lists; values from constant ``data_filler``s (default 0).
    Other filler types draw random numbers in Caffe; here they give their ``value`` too.
    """

    type = "DummyData"
    param = "dummy_data_param"
    n_bottoms = (0, 0)
    n_tops = (1, None)

    @staticmethod
    def parse(ctx, p):
        if p.shape:
            shapes = [[int(d) for d in s.dim] for s in p.shape]
        else:
            shapes = _legacy_shapes(p)
        return DummyData.make_attrs(shapes, [float(f.value) for f in p.data_filler])

    @staticmethod
    def make_attrs(shapes: list[list[int]], values: list[float]) -> dict:
        """The node attributes: one shape per top (or one for all), one constant per top (or
        one for all; none: 0)."""
        return {"shapes": [list(s) for s in shapes], "values": list(values)}

    @staticmethod
    def caffe(ctx, node: Node) -> dict:
        """One ``shape`` per entry of shapes and one constant ``data_filler`` per value."""
        return {"shape": [{"dim": [int(d) for d in shape]} for shape in node.attrs["shapes"]],
                "data_filler": [{"type": "constant", "value": value}
                                for value in node.attrs["values"]]}

    @staticmethod
    def infer(ctx, node: Node) -> tuple[Shape, ...]:
        shapes = _per_top(node, node.attrs["shapes"], "shape")
        for shape in shapes:
            if any(d < 0 for d in shape):
                raise shape_error(node, f"negative dim in shape {tuple(shape)}",
                                  "fix dummy_data_param")
        return tuple(tuple(s) for s in shapes)

    @staticmethod
    def numpy(ctx, node: Node):
        shapes = _per_top(node, node.attrs["shapes"], "shape")
        values = _per_top(node, node.attrs["values"] or [0.0], "data_filler")
        return tuple(np.full(s, v, np.float32) for s, v in zip(shapes, values))

    @staticmethod
    def tensorrt(ctx, node: Node):
        arrays = DummyData.numpy(None, node)  # constants of the static shapes
        if len(arrays) == 1:
            return (ctx.constant(arrays[0], ""),)
        return tuple(ctx.constant(a, str(i)) for i, a in enumerate(arrays))

    @staticmethod
    def onnx(ctx, node: Node):
        # initializers of the static shapes; the exporter names each after its top
        return tuple(ctx.constant(a, str(i)) for i, a in enumerate(DummyData.numpy(None, node)))


def _per_top(node: Node, items: list, what: str) -> list:
    """One entry for every top: a single entry is shared, else exactly one per top."""
    tops = len(node.outputs)
    if len(items) == 1:
        return items * tops
    if len(items) != tops:
        raise shape_error(node, f"{tops} tops but {len(items)} {what} entries",
                          f"give one {what}, or one per top")
    return items


def _legacy_shapes(p) -> list[list[int]]:
    """num/channels/height/width lists, each with one entry per top (or one shared)."""
    legacy = [list(p.num), list(p.channels), list(p.height), list(p.width)]
    n = max(len(dims) for dims in legacy)
    return [[dims[i] if len(dims) > 1 else (dims[0] if dims else 1) for dims in legacy]
            for i in range(n)]


@register_op
class ZerosData(Op):
    """A zero top (zeros_data_param.shape), the memory seed of Charleen777/caffecode's grid
    LSTM (zeros_data_layer.cpp): 4 entries or more give the 4-D top of the first four, 2 give a
    2-D top (1 and 3 read past the list there, and are refused here)."""

    type = "ZerosData"
    origin = "Charleen777/caffecode@bd3648c (dev; src/caffe/layers/zeros_data_layer.cpp)"
    param = "zeros_data_param"
    n_bottoms = (0, 0)

    @staticmethod
    def parse(ctx, p):
        return {"shape": [int(d) for d in p.shape]}

    @staticmethod
    def infer(ctx, node: Node) -> tuple[Shape, ...]:
        shape = node.attrs["shape"]
        if len(shape) != 2 and len(shape) < 4:
            raise shape_error(node, f"zeros_data_param has {len(shape)} shape entries, the fork "
                              "reads 2 (a 2-D top) or 4 (4-D)", "give 2 or 4 shape entries")
        return (tuple(shape[:4]),)

    @staticmethod
    def numpy(ctx, node: Node):
        return (np.zeros(ZerosData.infer(None, node)[0], np.float32),)

    @staticmethod
    def tensorrt(ctx, node: Node):
        return (ctx.constant(ZerosData.numpy(None, node)[0], ""),)

    @staticmethod
    def onnx(ctx, node: Node):
        return (ctx.constant(ZerosData.numpy(None, node)[0], "0"),)
