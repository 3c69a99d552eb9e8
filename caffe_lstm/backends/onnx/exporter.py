"""The ONNX exporter: one more walk over the REWRITTEN graph, calling each op's ``onnx`` facet.

Graph inputs and outputs keep the Caffe blob names (the keys of ``run``'s .npz files) and are
float32; every other tensor keeps the name of the IR value it computes (``lstm1/gate_input``),
so a layer is found by name in Netron. Weights become initializers from their (memory-mapped)
arrays in one copy each. Each Loop becomes one ONNX ``Scan`` (``ops/loop.py``).

Dims that vary (``--shape`` ranges) become symbolic: the graph is shaped at the MIN, MAX and
OPT sizes, and every dim that differs is written as a ``dim_param`` (``<input>_dim<axis>`` for
the input dims and every dim equal to one of them at all three sizes) or left unnamed.
"""

from __future__ import annotations

import importlib
import mmap
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np

from caffe_lstm.analysis.profiles import shape_at_profile_sizes
from caffe_lstm.backends.onnx.scan_tuning import (inputs_into_steps, tune_scans,
                                                  weights_into_bodies)
from caffe_lstm.backends.onnx.context import Dim, OnnxContext, OnnxGraphParts, Streamed
from caffe_lstm.errors import CaffeLstmError, ModelLoadError, UnsupportedLayerError
from caffe_lstm.files import atomic_output
from caffe_lstm.ir.graph import Graph, Shape, Value
from caffe_lstm.ir.walk import Progress
from caffe_lstm.ops import check_facet, get_op
from caffe_lstm.options import DEFAULT_OPSET, Profile, check_opset

_INSTALL_HINT = "install it: pip install 'caffe-lstm[onnx]'"


class OnnxUnavailableError(CaffeLstmError):
    """The onnx (or onnxruntime) Python module cannot be imported."""


def import_module(name: str) -> Any:
    """``onnx`` or ``onnxruntime``, or a one-line error with the install hint."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise OnnxUnavailableError(f"the {name} Python module cannot be imported ({exc})",
                                   "", _INSTALL_HINT) from None


def check_exportable(graph: Graph) -> None:
    """Lists, in one error, every node (loop bodies included) that has no ONNX form; then,
    in another, every layer whose ONNX form would compute something else."""
    check_facet(graph, "onnx", "cannot export these layers to ONNX")
    refused = [(node, reason) for node in graph.all_nodes()
               if (reason := get_op(node.op).onnx_refusal(node)) is not None]
    if refused:  # the recurrent layers left whole for ONNX's own operators (--lstm-op native)
        listing = "; ".join(f"{node.label}: {reason}" for node, reason in refused)
        raise UnsupportedLayerError(
            f"ONNX's own recurrent operator cannot compute exactly {listing}", "lstm_op='native'",
            "export with lstm_op='scan' (the default), whose Scan keeps Caffe's semantics")


# ---- symbolic dims ------------------------------------------------------------------------------


@dataclass
class DimTable:
    """The dims of every value of a graph (loop bodies included) as the model declares them."""

    dims: dict[int, tuple[Dim, ...]]
    #: each value's shape at the profiles' MAX sizes (empty: every dim fixed)
    largest: dict[int, Shape] = field(default_factory=dict)

    def of(self, value: Value) -> tuple[Dim, ...]:
        return self.dims[id(value)]

    @staticmethod
    def static(graph: Graph) -> DimTable:
        """Every dim fixed at the shapes the graph has now."""
        return DimTable({id(v): tuple(v.shape) for v in _all_values(graph)})

    @staticmethod
    def ranged(graph: Graph, profiles: Mapping[str, Profile]) -> DimTable:
        """Shapes ``graph`` at the MIN, MAX and OPT sizes of ``profiles`` (left at OPT); a dim
        that differs is symbolic, named after the first input dim it always equals."""
        if not profiles:
            return DimTable.static(graph)
        sizes: dict[int, list[tuple[int, ...]]] = defaultdict(list)
        values = _all_values(graph)
        for _ in shape_at_profile_sizes(graph, profiles):
            for value in values:
                sizes[id(value)].append(tuple(value.shape))
        return DimTable._named(graph, sizes)

    @staticmethod
    def _named(graph: Graph, sizes: dict[int, list[tuple[int, ...]]]) -> DimTable:
        """The first input dim varying over some (MIN, MAX, OPT) sizes, axis k of input x,
        names every dim varying alike ``x_dim<k>`` (the T of x and of cont are one dim), unless
        two axes of one input vary alike: their dims are then not taken to be equal (each input
        dim keeps its own name, other dims stay unnamed)."""
        names: dict[tuple[int, ...], str | None] = {}
        ambiguous: dict[tuple[int, int], str] = {}
        for value in graph.inputs:
            seen: set[tuple[int, ...]] = set()
            for axis, triple in enumerate(zip(*sizes[id(value)])):
                if len(set(triple)) == 1:
                    continue
                if triple in seen:
                    names[triple] = None
                names.setdefault(triple, f"{value.name}_dim{axis}")
                seen.add(triple)
        for value in graph.inputs:
            for axis, triple in enumerate(zip(*sizes[id(value)])):
                if len(set(triple)) > 1 and names[triple] is None:
                    ambiguous[(id(value), axis)] = f"{value.name}_dim{axis}"
        dims = {key: tuple(_dim(triple, names) for triple in zip(*shapes))
                for key, shapes in sizes.items()}
        for (key, axis), name in ambiguous.items():
            dims[key] = dims[key][:axis] + (name,) + dims[key][axis + 1:]
        return DimTable(dims, {key: shapes[1] for key, shapes in sizes.items()})  # MIN, MAX, OPT


def _dim(triple: tuple[int, ...], names: dict[tuple[int, ...], str | None]) -> Dim:
    return triple[0] if len(set(triple)) == 1 else names.get(triple)


def _all_values(graph: Graph) -> list[Value]:
    """Every value of ``graph`` and of the loop bodies inside it, once each."""
    found: dict[int, Value] = {id(v): v for v in graph.inputs}
    for node in graph.all_nodes():
        body_inputs = [value for body in node.subgraphs for value in body.inputs]
        found.update((id(v), v) for v in [*node.inputs, *node.outputs, *body_inputs])
    return list(found.values())


# ---- the walk -----------------------------------------------------------------------------------


def build_model(graph: Graph, opset: int = DEFAULT_OPSET,
                profiles: Mapping[str, Profile] | None = None, producer: str = "caffe-lstm",
                stream: bool = False, progress: Progress | None = None,
                for_tensorrt: bool = False) -> tuple[Any, list[Streamed]]:
    """The ONNX ModelProto of the rewritten ``graph``, and the weights left out of it.

    Without ``stream`` the model is complete (its initializers hold copies of the weights) and
    the list is empty. With ``stream`` every weight of ``STREAM_BYTES`` or more is an
    initializer of the main graph (loop bodies read it from the outer scope) that is NOT in
    the model: ``save_model`` writes its bytes straight from the (memory-mapped) array, so the
    weights are never copied into the protobuf. ``progress``: told of the layers done.
    ``for_tensorrt``: the model is for TensorRT's ONNX parser, which reads int64 indices as
    INT32 (a layer gathering from a table past 2³¹ elements at the profile's MAX is refused);
    the input projections stay one product of all steps before their Scans, as GPU RNN
    libraries compute them (the rule of ``inputs_into_steps``, which puts them in the step for
    onnxruntime, was measured on a CPU; no GPU here measures it for TensorRT).

    Raises:
        UnsupportedLayerError: layers with no ONNX form (all of them listed).
        CaffeLstmError: an opset outside the supported range, or one too old for a layer.
    """
    check_opset(opset)
    check_exportable(graph)
    onnx = import_module("onnx")
    table = DimTable.ranged(graph, dict(profiles or {}))
    values = _all_values(graph)
    ctx = OnnxContext(onnx, opset, table.of, {value.name for value in values},
                      STREAM_BYTES if stream else None, table.largest, for_tensorrt)
    for value in values:  # the IR's names go to the tensors computing them, nothing else
        ctx.reserve(value.name)
    for node in graph.all_nodes():
        for value in node.weights:
            ctx.reserve(value.name)
    ctx.progress = progress
    outputs = ctx.walk(graph, [v.name for v in graph.inputs])
    outputs = [_as_output(ctx, value.name, name)
               for value, name in zip(graph.outputs, outputs)]
    tune_scans(onnx, ctx.parts.nodes, ctx.parts.initializers,  # scan_tuning.py
               {item.header.name: len(item.header.dims) for item in ctx.streamed}, outputs)
    _drop_unread(ctx.parts, ctx.streamed, outputs)
    helper = onnx.helper
    proto = helper.make_graph(
        ctx.parts.nodes, graph.name or "caffe-lstm",
        [ctx.tensor_info(v.name, v) for v in graph.inputs],
        [ctx.tensor_info(name, value) for value, name in zip(graph.outputs, outputs)],
        initializer=ctx.parts.initializers)
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(proto, opset_imports=opsets, producer_name=producer)
    model.ir_version = helper.find_min_ir_version_for(opsets)
    # last, in place: a copy of the model would copy the weights moved into the Scan bodies
    weights = _weight_arrays(onnx, model.graph.initializer, ctx.streamed)
    unread = weights_into_bodies(onnx, model.graph, weights)
    if not for_tensorrt:
        shapes = {value.name: tuple(value.shape) for value in values}  # at OPT: see DimTable
        unread |= inputs_into_steps(onnx, model.graph, weights, lambda name: _step_rows(
            shapes.get(name)))
    for name in unread:
        remove_initializer(model.graph, name)
    ctx.streamed[:] = [item for item in ctx.streamed if item.header.name not in unread]
    return model, ctx.streamed


def _step_rows(shape: tuple[int, ...] | None) -> int | None:
    """The rows of one step of a (T, ..., K) sequence: the dims between the first and last."""
    return int(np.prod(shape[1:-1])) if shape is not None and len(shape) >= 3 else None


def _weight_arrays(onnx: Any, initializers: Any, streamed: list[Streamed]
                   ) -> Callable[[str], np.ndarray | None]:
    """name -> the array of a main-graph initializer, streamed or in the model, or None."""
    tensors = {tensor.name: tensor for tensor in initializers}
    arrays = {item.header.name: item for item in streamed}

    def weight(name: str) -> np.ndarray | None:
        if name in arrays:
            return np.asarray(arrays[name].array).reshape(tuple(arrays[name].header.dims))
        return onnx.numpy_helper.to_array(tensors[name]) if name in tensors else None
    return weight


def _drop_unread(parts: OnnxGraphParts, streamed: list[Streamed], outputs: Sequence[str]
                 ) -> None:
    """Drops the initializers (streamed ones too) that no node reads, subgraphs included, and
    no output is: a facet that computes from reordered copies of a layer's weights (ONNX's
    LSTM) leaves the originals unread."""
    read = set(outputs)
    pending = list(parts.nodes)
    while pending:
        node = pending.pop()
        read.update(node.input)
        for attribute in node.attribute:
            graphs = ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs)
            for sub in graphs:
                pending.extend(sub.node)
                read.update(out.name for out in sub.output)
    parts.initializers[:] = [t for t in parts.initializers if t.name in read]
    streamed[:] = [item for item in streamed if item.header.name in read]


def _as_output(ctx: OnnxContext, wanted: str, name: str) -> str:
    """A graph output carries the blob's own name: an alias (Dropout of a net input, two Split
    tops) is copied by an Identity of that name. (A net input that is also an output needs
    none: onnx, onnxruntime and TensorRT's parser accept one name in both lists.)"""
    if name != wanted:
        ctx.add("Identity", [name], [wanted], suffix="copy")
    return wanted


# ---- writing ------------------------------------------------------------------------------------

#: A protobuf message cannot exceed 2 GiB: larger initializers go to ``<name>.data`` beside it.
EXTERNAL_DATA_THRESHOLD = 2**31 - 2**24  # leaves room for the graph itself
#: Initializers smaller than this stay inside the model even when the rest goes outside.
_SMALL_TENSOR = 1024


#: With ``build_model(stream=True)``, weights this large are written straight from their arrays.
STREAM_BYTES = 1 << 20


def save_model(model: Any, path: str | Path, streamed: Sequence[Streamed] = (),
               threshold: int = EXTERNAL_DATA_THRESHOLD) -> Path | None:
    """Writes ``model`` (plus the ``streamed`` initializers) to ``path`` atomically; when the
    initializers hold ``threshold`` bytes or more, their data goes to ``<path>.data`` (ONNX
    external data, one file) and both files appear together or not at all. Returns the data
    file's path, or None.

    The streamed initializers never pass through protobuf: in one file each is appended as a
    ModelProto fragment ``graph { initializer { <header> raw_data: <bytes> } }``, which a
    parser merges into the model (protobuf concatenation: repeated fields append, embedded
    messages merge); with external data their bytes go to the data file. Either way the
    bytes come from the array (a memory map of the caffemodel) by one write.
    """
    path = Path(path)
    tensors = list(_initializers(model.graph))
    size = sum(len(t.raw_data) for t in tensors) + sum(s.array.nbytes for s in streamed)
    if size < threshold:
        with atomic_output(path) as tmp, open(tmp, "wb") as stream:
            stream.write(model.SerializeToString())
            for item in streamed:
                _write_fragment(stream, item)
        return None
    data_path = path.with_name(path.name + ".data")
    placed = False
    try:
        with atomic_output(path) as tmp_model:
            with atomic_output(data_path) as tmp_data:
                _move_to_external(tensors, tmp_data, data_path.name, streamed)
                for item in streamed:
                    model.graph.initializer.append(item.header)
                tmp_model.write_bytes(model.SerializeToString())
            placed = True  # the data file is in place; the model follows on leaving
    except BaseException:
        if placed:
            data_path.unlink(missing_ok=True)
        raise
    finally:
        for item in streamed:  # the model is the caller's again, without the headers
            remove_initializer(model.graph, item.header.name)
    return data_path


def set_metadata(model: Any, props: Mapping[str, str]) -> None:
    """Sets ``props`` as the model's ``metadata_props`` (key -> string; Netron shows them)."""
    for key, value in props.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value


#: ModelProto's field number of ``metadata_props`` (onnx.proto).
_METADATA_FIELD = 14


def read_metadata(path: str | Path) -> dict[str, str]:
    """The ``metadata_props`` of the ONNX file ``path``, read without parsing the graph: the
    top-level fields of the (memory-mapped) ModelProto are walked by their wire format and
    only the metadata entries are parsed, so a large model costs no more than a small one."""
    onnx = import_module("onnx")
    try:
        with open(path, "rb") as stream, mmap.mmap(stream.fileno(), 0,
                                                    access=mmap.ACCESS_READ) as data:
            entries = [onnx.StringStringEntryProto.FromString(data[start:end])
                       for field_number, start, end in _top_level_fields(data)
                       if field_number == _METADATA_FIELD]
    except Exception as exc:  # OSError, DecodeError, a truncated or foreign file
        raise ModelLoadError(f"cannot read the ONNX model ({' '.join(str(exc).split())[:200]})",
                             str(path), "give a model written by `caffe-lstm export`") from None
    return {entry.key: entry.value for entry in entries}


def _top_level_fields(data: Any) -> Iterator[tuple[int, int, int]]:
    """(field number, start, end) of each length-delimited field of a serialized message;
    varint and fixed-size fields are skipped."""
    position = 0
    while position < len(data):
        tag, position = _read_varint(data, position)
        wire_type = tag & 7
        if wire_type == 0:
            _, position = _read_varint(data, position)
        elif wire_type in (1, 5):
            position += 8 if wire_type == 1 else 4
        elif wire_type == 2:
            size, position = _read_varint(data, position)
            if position + size > len(data):
                raise ValueError("truncated protobuf")
            yield tag >> 3, position, position + size
            position += size
        else:
            raise ValueError(f"unexpected protobuf wire type {wire_type}")


def _read_varint(data: Any, position: int) -> tuple[int, int]:
    """Protobuf's base-128 varint at ``position``: (value, position after it)."""
    value = shift = 0
    while True:
        if position >= len(data) or shift > 63:
            raise ValueError("truncated protobuf")
        byte = data[position]
        value |= (byte & 0x7F) << shift
        position, shift = position + 1, shift + 7
        if not byte & 0x80:
            return value, position


def complete_model(model: Any, streamed: Sequence[Streamed]) -> Any:
    """``model`` with the streamed initializers copied in (for in-memory use)."""
    for item in streamed:
        tensor = model.graph.initializer.add()
        tensor.CopyFrom(item.header)
        tensor.raw_data = item.array.tobytes()
    return model


def _write_fragment(stream: Any, item: Streamed) -> None:
    """``graph { initializer { header, raw_data } }`` as ModelProto wire bytes, the raw data
    written from the array itself (little-endian float32, as ONNX's raw_data)."""
    data = memoryview(np.ascontiguousarray(item.array)).cast("B")
    header = item.header.SerializeToString()
    raw = _RAW_DATA_TAG + _varint(len(data))
    tensor_size = len(header) + len(raw) + len(data)
    graph = _INITIALIZER_TAG + _varint(tensor_size)
    stream.write(_GRAPH_TAG + _varint(len(graph) + tensor_size) + graph + header + raw)
    stream.write(data)


# Wire tags (field number << 3 | 2, length-delimited): ModelProto.graph = 7,
# GraphProto.initializer = 5, TensorProto.raw_data = 9.
_GRAPH_TAG, _INITIALIZER_TAG, _RAW_DATA_TAG = bytes([7 << 3 | 2]), bytes([5 << 3 | 2]), \
    bytes([9 << 3 | 2])


def _varint(value: int) -> bytes:
    """Protobuf's base-128 varint."""
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def remove_initializer(graph: Any, name: str) -> None:
    for index, tensor in enumerate(graph.initializer):
        if tensor.name == name:
            del graph.initializer[index]
            return


def _move_to_external(tensors: list[Any], data_file: Path, location: str,
                      streamed: Sequence[Streamed] = ()) -> None:
    """Appends every large tensor's bytes to ``data_file`` (4 KiB aligned, as onnx does) and
    points the tensor at them (``external_data``: location, offset, length); the streamed
    ones' bytes come from their arrays."""
    with open(data_file, "wb") as stream:
        for tensor in tensors:
            if len(tensor.raw_data) >= _SMALL_TENSOR:
                _place(stream, tensor, tensor.raw_data, location)
                tensor.ClearField("raw_data")
        for item in streamed:
            _place(stream, item.header, memoryview(np.ascontiguousarray(item.array)).cast("B"),
                   location)


def _place(stream: Any, tensor: Any, data: Any, location: str) -> None:
    """Writes ``data`` at the next 4 KiB boundary and records where on ``tensor``."""
    offset = -stream.tell() % 4096 + stream.tell()
    stream.seek(offset)
    stream.write(data)
    del tensor.external_data[:]
    for key, text in (("location", location), ("offset", str(offset)),
                      ("length", str(len(data)))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, text
    tensor.data_location = 1  # TensorProto.EXTERNAL


def _initializers(graph: Any):
    """The initializers of ``graph`` and of every subgraph held by its nodes' attributes."""
    yield from graph.initializer
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("g"):
                yield from _initializers(attribute.g)
            for sub in attribute.graphs:
                yield from _initializers(sub)


def value_dims(infos: Sequence[Any]) -> dict[str, tuple[int | str, ...]]:
    """name -> dims of ONNX ValueInfoProtos (a symbolic dim by its name, "?" unnamed)."""
    return {info.name: tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                             for d in info.type.tensor_type.shape.dim) for info in infos}
