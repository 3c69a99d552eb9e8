"""The TensorRT emitter: one more walk over the graph, calling each op's ``tensorrt`` facet.

Network inputs and outputs keep the Caffe blob names; layers are named after the Caffe layer
they came from (``lstm1/gate_input``). With fp16 the inputs are cast to HALF after entering
and the outputs back to FLOAT before leaving, so callers always exchange float32.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Mapping, Sequence

from caffe_lstm.backends.tensorrt.context import EmitContext
from caffe_lstm.ir.graph import Graph, Node
from caffe_lstm.ops import check_facet, get_op


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
    outputs = emit_graph(ctx, graph, inputs)
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


def emit_graph(ctx: EmitContext, graph: Graph, inputs: Sequence[Any]) -> list[Any]:
    """Emits ``graph``'s nodes given tensors for its inputs; returns its output tensors.

    Also what ``EmitContext.run_subgraph`` does for a Loop's body.
    """
    env = {id(value): tensor for value, tensor in zip(graph.inputs, inputs)}
    for node in graph.nodes:
        _emit_node(ctx, node, env)
    return [env[id(value)] for value in graph.outputs]


def _emit_node(ctx: EmitContext, node: Node, env: dict[int, Any]) -> None:
    tensors = [env[id(value)] for value in node.inputs]
    arrays = [value.data for value in node.weights]
    outer, ctx.node = ctx.node, node
    try:
        results = get_op(node.op).tensorrt(ctx, node, *tensors, *arrays)
    except Exception as exc:
        exc.add_note(f"while emitting {node.name} ({node.op})")
        raise
    finally:
        ctx.node = outer
    taken = {tensor.name for tensor in tensors}
    for value, tensor in zip(node.outputs, results):
        if tensor.name not in taken:  # an identity op hands its input through: keep that name
            tensor.name = value.name
        env[id(value)] = tensor
