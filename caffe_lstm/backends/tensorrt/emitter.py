"""The TensorRT emitter: one more walk over the graph, calling each op's ``tensorrt`` facet.

Network inputs and outputs keep the Caffe blob names; layers are named after the Caffe layer
they came from (``lstm1/gate_input``). With fp16 the inputs are cast to HALF after entering
and the outputs back to FLOAT before leaving, so callers always exchange float32.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Mapping, Sequence

from caffe_lstm.backends.tensorrt.context import EmitContext
from caffe_lstm.ir.graph import Graph
from caffe_lstm.ops import check_facet


def check_emittable(graph: Graph) -> None:
    """Lists, in one error, every node (loop bodies included) that has no TensorRT emission."""
    check_facet(graph, "tensorrt", "cannot build these layers in TensorRT")


def emit_network(ctx: EmitContext, graph: Graph,
                 dynamic: Mapping[str, Sequence[int]] | None = None) -> None:
    """Fills ``ctx.network`` with ``graph``.

    Args:
        dynamic: for each dynamic input, its dims with -1 where they vary.
    """
    check_emittable(graph)
    trt, dynamic = ctx.trt, dynamic or {}
    inputs = []
    for value in graph.inputs:
        dims = tuple(dynamic.get(value.name, value.shape))
        tensor = ctx.network.add_input(value.name, trt.DataType.FLOAT, dims)
        inputs.append(_cast(ctx, tensor, ctx.float_trt, f"{value.name}/to_half"))
        ctx.half_inputs[inputs[-1].name] = tensor  # (fp32: maps the input to itself)
    outputs = ctx.run_subgraph(graph, inputs)
    for value, tensor in zip(graph.outputs, outputs):
        if ctx.fp16:  # the HALF tensor gives its name to the FLOAT output made from it
            if tensor.name == value.name:
                tensor.name = f"{value.name}/half"
            tensor = _cast(ctx, tensor, trt.DataType.FLOAT, f"{value.name}/to_float")
        elif tensor.name != value.name:
            # an alias (Dropout of a net input, two Split tops): an input cannot be an output
            # and a tensor has one name, so a copy carries the output
            layer = ctx.network.add_identity(tensor)
            layer.name = f"{value.name}/copy"
            tensor = layer.get_output(0)
        tensor.name = value.name
        ctx.network.mark_output(tensor)


def _cast(ctx: EmitContext, tensor: Any, dtype: Any, name: str) -> Any:
    if not ctx.fp16:
        return tensor
    layer = ctx.network.add_cast(tensor, dtype)
    layer.name = name
    return layer.get_output(0)
