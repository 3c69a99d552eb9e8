"""The Caffe writer: a graph back to a NetParameter (the prototxt) and its weights (caffemodel).

The inverse of the reader, in the frontend because the frontend is the only place that knows
protobuf (a format at the edge). Every node becomes one layer: the node's name, its op as the
type, its input and output values as bottoms and tops, and its attributes in the type's param
message: the op's ``caffe`` facet gives them as plain fields (the inverse of its ``parse``),
set here by name. The net inputs become one ``Input`` layer.

Weights: a layer declares ``param { name: "<weight value name>" }`` for each of its blobs, so
weights used by several nodes (W_hc in every unrolled step: one Value) share a name, which is
how Caffe shares them; the caffemodel still stores every layer's own copy of all its blobs,
because Caffe loads weights by layer name and wants each layer's blobs.

A Loop node becomes a layer of our own type ``Loop`` whose ``loop_param`` holds the body's
layers, which its facet asks this writer for (``run_subgraph``); their names start with
``__<layer>/``, unique in the net, so their blobs are stored in the caffemodel under those
names. Only an unrolled graph is plain upstream Caffe.

The caffemodel's bytes are those protobuf would produce (every blob as packed float ``data``
then ``shape``, as Caffe saves them), but the float data goes from numpy to the file as one
buffer per blob: no per-float Python work, so vocabulary-sized weights write in a moment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, BinaryIO
from collections.abc import Sequence

import numpy as np
from google.protobuf import text_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from caffe_lstm.files import atomic_output
from caffe_lstm.ir.graph import Graph, Node
from caffe_lstm.ir.walk import GraphWalker
from caffe_lstm.frontend.plugin_params import has_own_message
from caffe_lstm.ops import PluginError, get_op
from caffe_lstm.ops.plugins import plugin_of, wrong_result
from caffe_lstm.proto import caffe_pb2

#: One caffemodel entry: (layer name, layer type, blobs), as ``write_caffemodel`` takes them.
LayerWeights = tuple[str, str, list[np.ndarray]]

LayerParameter = caffe_pb2.LayerParameter


def to_net_parameter(graph: Graph) -> tuple[caffe_pb2.NetParameter, list[LayerWeights]]:
    """The net definition of ``graph`` and the caffemodel entries of its weighted layers.

    Layers whose weights have no data (no caffemodel was loaded for them) get no entry.
    Blobs that nothing reads and that are not net outputs go to one final Silence layer, so
    that the written net's outputs (Caffe: the unconsumed blobs) are the graph's outputs.
    """
    net = caffe_pb2.NetParameter(name=graph.name)
    if graph.inputs:
        _add_input_layer(net, graph)
    net.layer.extend(CaffeWriter().run_subgraph(graph))
    _add_silence(net, graph)
    return net, layer_weights(graph)


def layer_weights(graph: Graph) -> list[LayerWeights]:
    """``(name, type, blobs)`` of every node with weights, loop bodies included."""
    return [(node.name, node.op, [v.data for v in node.weights])
            for node in graph.all_nodes()
            if node.weights and all(v.data is not None for v in node.weights)]


def write_prototxt(path: str | Path, net: caffe_pb2.NetParameter, comment: str = "") -> None:
    """Writes ``net`` as protobuf text, after ``# comment`` lines; atomically."""
    header = "".join(f"# {line}\n" for line in comment.splitlines())
    text = header + text_format.MessageToString(net, as_utf8=True)
    with atomic_output(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


# ---- layers ------------------------------------------------------------------------------------


def _add_input_layer(net: caffe_pb2.NetParameter, graph: Graph) -> None:
    """One Input layer (named ``input``, as Caffe's upgrade names it) with a shape per top."""
    taken = {node.name for node in graph.nodes}
    name = "input" if "input" not in taken else "__input"
    layer = net.layer.add(name=name, type="Input", top=[v.name for v in graph.inputs])
    for value in graph.inputs:
        layer.input_param.shape.add(dim=[int(d) for d in value.shape])


class CaffeWriter(GraphWalker[str]):
    """The walker calling each node's ``caffe`` facet: one LayerParameter per node, and
    ``run_subgraph`` for an op that holds a graph (a Loop's body); what travels along the
    edges are blob names."""

    facet = "caffe"

    def __init__(self) -> None:
        #: the layers of the graph being written (a body's while its Loop is written)
        self.layers: list[LayerParameter] = []

    def run_subgraph(self, graph: Graph) -> list[LayerParameter]:
        """The layers of ``graph`` (the net's, or a body's), for a repeated LayerParameter
        field."""
        outer, self.layers = self.layers, []
        try:
            self.walk_values(graph, [value.name for value in graph.inputs])
            return self.layers
        finally:
            self.layers = outer

    def visit(self, node: Node, bottoms: list[str]) -> list[str]:
        """Appends the node's layer; its tops are its values' names."""
        tops = [value.name for value in node.outputs]
        layer = LayerParameter(name=node.name, type=node.op, bottom=bottoms, top=tops)
        for weight in node.weights:
            layer.param.add(name=weight.name)
        op = get_op(node.op)
        fields = op.caffe(self, node)
        if fields and has_own_message(op):
            # caffe.proto's LayerParameter has no field of that name, and protobuf's text
            # writer prints only fields of the schema: the layer cannot be written as read.
            raise PluginError(f"the plugin's param message '{op.param}' is not in Caffe's "
                              "schema, so the layer cannot be written back to a prototxt",
                              node.label, "rewrite is not available for this net; the other "
                              "commands take the plugin as it is")
        if fields:
            try:
                _set_fields(getattr(layer, op.param), fields)
            except ValueError as exc:  # a field the schema lacks (a fork's, declared)
                if plugin_of(node.op) is None:
                    raise
                raise wrong_result(node, "caffe", f"returned what Caffe's schema cannot hold "
                                   f"({exc}), so the layer cannot be written back to a "
                                   "prototxt") from None
        self.layers.append(layer)
        return tops


def _add_silence(net: caffe_pb2.NetParameter, graph: Graph) -> None:
    """A Silence layer for the blobs no layer reads that are not outputs: final states of a Loop,
    inputs whose only reader a pass removed (Caffe would make both net outputs)."""
    read = {id(v) for node in graph.nodes for v in node.inputs}
    read.update(id(v) for v in graph.outputs)
    produced = [v for node in graph.nodes for v in node.outputs]
    unused = [v.name for v in graph.inputs + produced if id(v) not in read]
    if unused:
        net.layer.add(name="__silence", type="Silence", bottom=unused)


# ---- the param messages: fields by name ---------------------------------------------------


def _set_fields(message: Message, values: dict[str, Any]) -> None:
    """Sets fields by name: a dict fills a nested message, a list a repeated field (of dicts:
    one message each), enum values arrive as names, messages are copied."""
    for name, value in values.items():
        if value is None:
            continue
        field = message.DESCRIPTOR.fields_by_name.get(name)
        if field is None:  # a bug: an op's parse made an attr the writer does not know
            raise ValueError(f"{message.DESCRIPTOR.name} has no field {name!r}")
        if isinstance(value, dict):
            _set_fields(getattr(message, name), value)
        elif isinstance(value, (list, tuple)):
            _extend(getattr(message, name), field, value)
        else:
            setattr(message, name, _field_value(field, value))


def _extend(repeated: Any, field: FieldDescriptor, items: list | tuple) -> None:
    for item in items:
        if isinstance(item, dict):
            _set_fields(repeated.add(), item)
        elif isinstance(item, Message):
            repeated.add().CopyFrom(item)
        else:
            repeated.append(_field_value(field, item))


def _field_value(field: FieldDescriptor, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_ENUM:
        return field.enum_type.values_by_name[value].number
    return value


# ---- the caffemodel: blobs written from their arrays ----------------------------------------

# Field numbers from caffe.proto: NetParameter.layer, LayerParameter.blobs, BlobProto.data/shape.
_NET_LAYER, _LAYER_BLOBS, _BLOB_DATA, _BLOB_SHAPE = 100, 7, 5, 7
_LEN = 2  # the length-delimited wire type


def write_caffemodel(path: str | Path, layers: Sequence[tuple[str, str, Sequence[np.ndarray]]],
                     net_name: str = "") -> None:
    """Writes ``(layer name, layer type, blobs)`` entries as Caffe does (shape + float data).

    The file is written beside ``path`` first and renamed onto it when complete.
    """
    with atomic_output(path) as tmp, open(tmp, "wb") as stream:
        stream.write(caffe_pb2.NetParameter(name=net_name).SerializeToString())
        for name, layer_type, blobs in layers:
            _write_layer(stream, name, layer_type, blobs)


def _write_layer(stream: BinaryIO, name: str, layer_type: str,
                 blobs: Sequence[np.ndarray]) -> None:
    """One ``layer`` entry: its name and type, then one ``blobs`` entry per array."""
    head = caffe_pb2.LayerParameter(name=name, type=layer_type).SerializeToString()
    parts = [head]
    for array in blobs:
        blob = _blob_parts(_float32_c_order(array))
        parts += [_tag_and_length(_LAYER_BLOBS, sum(len(p) for p in blob)), *blob]
    stream.write(_tag_and_length(_NET_LAYER, sum(len(p) for p in parts)))
    for part in parts:
        stream.write(part)


def _blob_parts(data: np.ndarray) -> list:
    """A BlobProto as byte chunks: packed ``data`` (a view of the array), then ``shape``."""
    shape = caffe_pb2.BlobShape(dim=[int(d) for d in data.shape]).SerializeToString()
    raw = memoryview(data).cast("B") if data.size else b""
    data_field = [_tag_and_length(_BLOB_DATA, len(raw)), raw] if data.size else []
    return data_field + [_tag_and_length(_BLOB_SHAPE, len(shape)), shape]


def _float32_c_order(array: np.ndarray) -> np.ndarray:
    """Little-endian float32 in C order; a 0-axis (scalar) blob keeps its empty shape."""
    data = np.asarray(array, dtype="<f4")
    return data if data.flags.c_contiguous else data.copy(order="C")


def _tag_and_length(number: int, length: int) -> bytes:
    """The key of a length-delimited field followed by its payload length."""
    return _varint((number << 3) | _LEN) + _varint(length)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
