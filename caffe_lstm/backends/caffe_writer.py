"""The Caffe writer: a graph back to a NetParameter (the prototxt) and its weights (caffemodel).

The inverse of the frontend, and besides it the only place that knows protobuf (a format at the
edge). Every node becomes one layer: the node's name, its op as the type, its input and output
values as bottoms and tops, and its attributes in the type's param message (the inverse of the
op's ``parse``: one small writer per type in ``PARAM_WRITERS``). The net inputs become one
``Input`` layer.

Weights: a layer declares ``param { name: "<weight value name>" }`` for each of its blobs, so
weights used by several nodes (W_hc in every unrolled step: one Value) share a name, which is
how Caffe shares them; the caffemodel still stores every layer's own copy of all its blobs,
because Caffe loads weights by layer name and wants each layer's blobs.

A Loop node becomes a layer of our own type ``Loop`` whose ``loop_param`` holds the body's
layers (their names start with ``__<layer>/``, unique in the net, so their blobs are stored
in the caffemodel under those names). Only an unrolled graph is plain upstream Caffe.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np
from google.protobuf import text_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from caffe_lstm.files import atomic_output
from caffe_lstm.ir.graph import Graph, Node
from caffe_lstm.ops import get_op
from caffe_lstm.ops.loop import LoopLayout
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
    _add_layers(net.layer, graph.nodes)
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


def _add_layers(layers, nodes: list[Node]) -> None:
    """Appends one LayerParameter per node to the repeated field ``layers``."""
    for node in nodes:
        layer = layers.add(name=node.name, type=node.op, bottom=[v.name for v in node.inputs],
                           top=[v.name for v in node.outputs])
        for weight in node.weights:
            layer.param.add(name=weight.name)
        writer = PARAM_WRITERS.get(node.op)
        if writer is None:  # a bug: every registered op has a writer (tests check it)
            raise NotImplementedError(f"no Caffe writer for op {node.op!r} (node {node.name})")
        writer(layer, node)


def _add_silence(net: caffe_pb2.NetParameter, graph: Graph) -> None:
    """A Silence layer for the blobs no layer reads that are not outputs: final states of a Loop,
    inputs whose only reader a pass removed (Caffe would make both net outputs)."""
    read = {id(v) for node in graph.nodes for v in node.inputs}
    read.update(id(v) for v in graph.outputs)
    produced = [v for node in graph.nodes for v in node.outputs]
    unused = [v.name for v in graph.inputs + produced if id(v) not in read]
    if unused:
        net.layer.add(name="__silence", type="Silence", bottom=unused)


# ---- the param messages: the inverse of each op's ``parse`` ---------------------------------


def _param_message(layer: LayerParameter, node: Node) -> Message:
    """The node's param message in ``layer`` (``inner_product_param`` for InnerProduct)."""
    return getattr(layer, get_op(node.op).param)


def _fields_named_like_attrs(layer: LayerParameter, node: Node) -> None:
    """Most ops: every attr is the param field of the same name (None: left unset)."""
    _set_fields(_param_message(layer, node), node.attrs)


def _no_params(layer: LayerParameter, node: Node) -> None:
    """Split, Silence: no param message, so no attrs."""
    if node.attrs:
        raise ValueError(f"{node.op} node {node.name} has attrs {sorted(node.attrs)}")


def _dummy_data(layer: LayerParameter, node: Node) -> None:
    """shapes -> one ``shape`` each; values -> one constant ``data_filler`` each."""
    p = layer.dummy_data_param
    for shape in node.attrs["shapes"]:
        p.shape.add(dim=[int(d) for d in shape])
    for value in node.attrs["values"]:
        p.data_filler.add(type="constant", value=value)


def _reshape(layer: LayerParameter, node: Node) -> None:
    """shape (a list of dims) -> ``shape { dim }``; axis and num_axes by name."""
    attrs = dict(node.attrs)
    layer.reshape_param.shape.dim.extend(int(d) for d in attrs.pop("shape"))
    _set_fields(layer.reshape_param, attrs)


def _recurrent(layer: LayerParameter, node: Node) -> None:
    """LSTM, RNN: num_output, expose_hidden and the extension fields that were set."""
    attrs = dict(node.attrs)
    extensions = attrs.pop("extensions", {})
    _set_fields(layer.recurrent_param, {**attrs, **extensions})


def _loop(layer: LayerParameter, node: Node) -> None:
    """Our Loop layer: the body's layers, its input and output blobs, the counts, the states."""
    layout = LoopLayout.of(node)
    p = layer.loop_param
    _add_layers(p.layer, layout.body.nodes)
    p.input.extend(v.name for v in layout.body.inputs)
    p.output.extend(v.name for v in layout.body.outputs)
    p.num_iterated = layout.n_iterate
    p.num_sequence_outputs = layout.n_sequence_outputs
    for state in layout.states:
        p.state.add(name=state.name, size=state.size, has_initial=state.has_initial)


def _set_fields(message: Message, values: dict[str, Any]) -> None:
    """Sets fields by name: lists extend repeated fields, enum values arrive as names."""
    for name, value in values.items():
        if value is None:
            continue
        field = message.DESCRIPTOR.fields_by_name.get(name)
        if field is None:  # a bug: an op's parse made an attr the writer does not know
            raise ValueError(f"{message.DESCRIPTOR.name} has no field {name!r}")
        if isinstance(value, (list, tuple)):
            getattr(message, name).extend(_field_value(field, item) for item in value)
        else:
            setattr(message, name, _field_value(field, value))


def _field_value(field: FieldDescriptor, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_ENUM:
        return field.enum_type.values_by_name[value].number
    return value


#: Caffe type -> the function that fills the layer's param message from the node's attrs.
#: Total over the registered ops; a type missing here is a bug (NotImplementedError).
PARAM_WRITERS: dict[str, Callable[[LayerParameter, Node], None]] = {
    "InnerProduct": _fields_named_like_attrs,  # num_output, bias_term, axis, transpose
    "Embed": _fields_named_like_attrs,  # num_output, input_dim, bias_term
    "Eltwise": _fields_named_like_attrs,  # operation (enum), coeff
    "Scale": _fields_named_like_attrs,  # axis, num_axes, bias_term
    "Bias": _fields_named_like_attrs,  # axis, num_axes
    "Power": _fields_named_like_attrs,  # power, scale, shift
    "Slice": _fields_named_like_attrs,  # axis or slice_dim, slice_point
    "Concat": _fields_named_like_attrs,  # axis or concat_dim
    "Tile": _fields_named_like_attrs,  # axis, tiles
    "Flatten": _fields_named_like_attrs,  # axis, end_axis
    "Reduction": _fields_named_like_attrs,  # operation (enum), axis, coeff
    "ReLU": _fields_named_like_attrs,  # negative_slope
    "Dropout": _fields_named_like_attrs,  # dropout_ratio
    "Softmax": _fields_named_like_attrs,  # axis
    "Sigmoid": _fields_named_like_attrs,  # (none)
    "TanH": _fields_named_like_attrs,  # (none)
    "Clip": _fields_named_like_attrs,  # min, max (the LSTM variants' clipped ReLU and cell clip)
    "Lstm": _fields_named_like_attrs,  # lstm_param: num_output, batch_size
    # issue #6: every attr is the param field of the same name (None: unset)
    "Convolution": _fields_named_like_attrs,  # convolution_param
    "Deconvolution": _fields_named_like_attrs,  # convolution_param
    "Im2col": _fields_named_like_attrs,  # convolution_param
    "Pooling": _fields_named_like_attrs,  # pool, global_pooling, round_mode, kernel/stride/pad
    "LRN": _fields_named_like_attrs,  # local_size, alpha, beta, k, norm_region
    "BatchNorm": _fields_named_like_attrs,  # use_global_stats, eps
    "PReLU": _fields_named_like_attrs,  # channel_shared
    "ELU": _fields_named_like_attrs,  # alpha
    "Exp": _fields_named_like_attrs,  # base, scale, shift
    "Log": _fields_named_like_attrs,  # base, scale, shift
    "Crop": _fields_named_like_attrs,  # axis, offset
    "ArgMax": _fields_named_like_attrs,  # out_max_val, top_k, axis
    "Permute": _fields_named_like_attrs,  # order
    "Transpose": _fields_named_like_attrs,  # dim
    "Reverse": _fields_named_like_attrs,  # axis
    "ContinuationIndicator": _fields_named_like_attrs,  # time_step, batch_size
    "AbsVal": _no_params,
    "BNLL": _no_params,
    "Split": _no_params,
    "Silence": _no_params,
    "Reshape": _reshape,
    "DummyData": _dummy_data,
    "LSTM": _recurrent,
    "RNN": _recurrent,
    "Loop": _loop,
}
