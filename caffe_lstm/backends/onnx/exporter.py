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
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Mapping, Sequence

import numpy as np

from caffe_lstm.analysis.shapes import infer_shapes
from caffe_lstm.backends.onnx.context import Dim, OnnxContext, OnnxGraphParts
from caffe_lstm.errors import CaffeLstmError, ShapeError, UnsupportedLayerError
from caffe_lstm.files import atomic_output
from caffe_lstm.ir.graph import Graph, Node, Value
from caffe_lstm.ops import get_op

#: The opsets the exporter writes: 13 is the first with Split/Squeeze/Unsqueeze/ReduceSum
#: taking their sizes and axes as inputs and Softmax on one axis; 21 the newest checked here
#: with onnxruntime and onnx's checker.
MIN_OPSET, MAX_OPSET, DEFAULT_OPSET = 13, 21, 17
#: (min, opt, max) shapes of one dynamic input, as ``convert --shape`` takes them.
Profile = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]

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


def check_opset(opset: int) -> None:
    """Refuses an opset outside [MIN_OPSET, MAX_OPSET] in one line."""
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise CaffeLstmError(f"ONNX opset {opset} is not supported", "--opset",
                             f"use an opset from {MIN_OPSET} to {MAX_OPSET} "
                             f"(default {DEFAULT_OPSET})")


def check_exportable(graph: Graph) -> None:
    """Lists, in one error, every node (loop bodies included) that has no ONNX form."""
    missing: dict[str, list[str]] = defaultdict(list)
    for node in graph.all_nodes():
        if get_op(node.op).onnx is None:
            missing[node.op].append(node.name)
    if missing:
        listing = "; ".join(f"{op} ({', '.join(names)}): {get_op(op).onnx_missing_reason}"
                            for op, names in missing.items())
        raise UnsupportedLayerError(f"cannot export these layers to ONNX: {listing}",
                                    "the rewritten graph",
                                    "cut them off with --outputs, or report the layer type")


# ---- symbolic dims ------------------------------------------------------------------------------


@dataclass
class DimTable:
    """The dims of every value of a graph (loop bodies included) as the model declares them."""

    dims: dict[int, tuple[Dim, ...]]

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
        for index, which in ((0, "MIN"), (2, "MAX"), (1, "OPT")):
            for value in graph.inputs:
                if value.name in profiles:
                    value.shape = tuple(profiles[value.name][index])
            try:
                infer_shapes(graph)
            except ShapeError as exc:
                raise ShapeError(f"at the --shape {which} sizes: {exc.what}", exc.where,
                                 "keep dims that the layers or weights fix out of --shape "
                                 "ranges") from None
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
        return DimTable(dims)


def _dim(triple: tuple[int, ...], names: dict[tuple[int, ...], str | None]) -> Dim:
    return triple[0] if len(set(triple)) == 1 else names.get(triple)


def _all_values(graph: Graph) -> list[Value]:
    """Every value of ``graph`` and of the loop bodies inside it, once each."""
    found: dict[int, Value] = {id(v): v for v in graph.inputs}
    for node in graph.all_nodes():
        body = node.attrs.get("body")
        body_inputs = body.inputs if isinstance(body, Graph) else []
        found.update((id(v), v) for v in [*node.inputs, *node.outputs, *body_inputs])
    return list(found.values())


# ---- the walk -----------------------------------------------------------------------------------


def build_model(graph: Graph, opset: int = DEFAULT_OPSET,
                profiles: Mapping[str, Profile] | None = None, producer: str = "caffe-lstm"
                ) -> tuple[Any, list[np.ndarray]]:
    """The ONNX ModelProto of the rewritten ``graph`` and the arrays its initializers were
    copied from (keep them referenced until the model is written).

    Raises:
        UnsupportedLayerError: layers with no ONNX form (all of them listed).
        CaffeLstmError: an opset outside the supported range, or one too old for a layer.
    """
    check_opset(opset)
    check_exportable(graph)
    onnx = import_module("onnx")
    table = DimTable.ranged(graph, dict(profiles or {}))
    ctx = OnnxContext(onnx, opset)
    ctx.value_dims = table.of
    values = _all_values(graph)
    walker = _Walker(ctx, {value.name for value in values})
    ctx.subgraph_builder = walker.subgraph
    for value in values:  # the IR's names go to the tensors computing them, nothing else
        ctx.reserve(value.name)
    for node in graph.all_nodes():
        for value in node.weights:
            ctx.reserve(value.name)
    outputs = walker.walk(graph, [v.name for v in graph.inputs])
    outputs = [_as_output(ctx, value.name, name)
               for value, name in zip(graph.outputs, outputs)]
    helper = onnx.helper
    proto = helper.make_graph(
        ctx.parts.nodes, graph.name or "caffe-lstm",
        [ctx.tensor_info(v.name, v) for v in graph.inputs],
        [ctx.tensor_info(name, value) for value, name in zip(graph.outputs, outputs)],
        initializer=ctx.parts.initializers)
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(proto, opset_imports=opsets, producer_name=producer)
    model.ir_version = helper.find_min_ir_version_for(opsets)
    return model, ctx.keep_alive


def _as_output(ctx: OnnxContext, wanted: str, name: str) -> str:
    """A graph output carries the blob's own name: an alias (Dropout of a net input, two Split
    tops) is copied by an Identity of that name. (A net input that is also an output needs
    none: onnx, onnxruntime and TensorRT's parser accept one name in both lists.)"""
    if name != wanted:
        ctx.add("Identity", [name], [wanted], suffix="copy")
    return wanted


class _Walker:
    """Exports nodes in order; the context calls ``subgraph`` for a Loop's body."""

    def __init__(self, ctx: OnnxContext, value_names: set[str]) -> None:
        self.ctx = ctx
        #: weight value -> initializer name, per enclosing graph (inner graphs see outer ones)
        self.scopes: list[dict[int, str]] = [{}]
        #: names no initializer may take: the IR values', and those given to initializers
        self.taken = set(value_names)

    def walk(self, graph: Graph, inputs: Sequence[str]) -> list[str]:
        """Exports ``graph``'s nodes given tensor names for its inputs; returns its outputs."""
        env = {id(value): name for value, name in zip(graph.inputs, inputs)}
        for node in graph.nodes:
            self._node(node, env)
        return [env[id(value)] for value in graph.outputs]

    def subgraph(self, graph: Graph, inputs: Sequence[Any], outputs: Sequence[Any], name: str,
                 input_order: Sequence[int] | None = None) -> Any:
        """The GraphProto of ``graph`` (see OnnxContext.run_subgraph)."""
        ctx = self.ctx
        outer_parts, outer_node = ctx.parts, ctx.node
        ctx.parts = OnnxGraphParts()
        self.scopes.append({})
        try:
            names = [item if isinstance(item, str) else item.name for item in inputs]
            results = self.walk(graph, names)
            for result, info in zip(results, outputs):
                if result != info.name:  # an alias, or the same value output twice
                    ctx.node = outer_node
                    ctx.add("Identity", [result], [info.name], suffix="step_output")
            order = range(len(inputs)) if input_order is None else input_order
            graph_inputs = [inputs[i] for i in order if not isinstance(inputs[i], str)]
            return ctx.onnx.helper.make_graph(ctx.parts.nodes, name, graph_inputs,
                                              list(outputs), initializer=ctx.parts.initializers)
        finally:
            ctx.parts, ctx.node = outer_parts, outer_node
            self.scopes.pop()

    def _weight(self, value: Value) -> str:
        """The initializer of a weight, made once per graph scope (the array in one copy)."""
        for scope in reversed(self.scopes):
            if id(value) in scope:
                return scope[id(value)]
        if value.data is None:  # a bug: the API checks for missing weights first
            raise ValueError(f"weight {value.name} has no data")
        name = self.ctx.unique(value.name) if value.name in self.taken else value.name
        self.taken.add(name)
        array = np.asarray(value.data, dtype=np.float32)  # float32 already: no copy
        self.ctx.parts.initializers.append(self.ctx.initializer(name, array))
        self.scopes[-1][id(value)] = name
        return name

    def _node(self, node: Node, env: dict[int, str]) -> None:
        ctx = self.ctx
        names = [env[id(value)] for value in node.inputs]
        weights = [self._weight(value) for value in node.weights]
        outer, ctx.node = ctx.node, node
        try:
            results = get_op(node.op).onnx(ctx, node, *names, *weights)
            for value, result in zip(node.outputs, results):
                if result not in names and result != value.name:
                    ctx.rename(result, value.name)  # the tensor takes the IR value's name
                    result = value.name
                env[id(value)] = result
        except Exception as exc:
            exc.add_note(f"while exporting {node.name} ({node.op})")
            raise
        finally:
            ctx.node = outer


# ---- writing ------------------------------------------------------------------------------------

#: A protobuf message cannot exceed 2 GiB: larger initializers go to ``<name>.data`` beside it.
EXTERNAL_DATA_THRESHOLD = 2**31 - 2**24  # leaves room for the graph itself
#: Initializers smaller than this stay inside the model even when the rest goes outside.
_SMALL_TENSOR = 1024


def save_model(model: Any, path: str | Path,
               threshold: int = EXTERNAL_DATA_THRESHOLD) -> Path | None:
    """Writes ``model`` to ``path`` atomically; when its initializers hold ``threshold`` bytes
    or more, their data goes to ``<path>.data`` (ONNX external data, one file) and both files
    appear together or not at all. Returns the data file's path, or None."""
    path = Path(path)
    tensors = list(_initializers(model.graph))
    if sum(len(t.raw_data) for t in tensors) < threshold:
        with atomic_output(path) as tmp:
            tmp.write_bytes(model.SerializeToString())
        return None
    data_path = path.with_name(path.name + ".data")
    placed = False
    try:
        with atomic_output(path) as tmp_model:
            with atomic_output(data_path) as tmp_data:
                _move_to_external(tensors, tmp_data, data_path.name)
                tmp_model.write_bytes(model.SerializeToString())
            placed = True  # the data file is in place; the model follows on leaving
    except BaseException:
        if placed:
            data_path.unlink(missing_ok=True)
        raise
    return data_path


def _move_to_external(tensors: list[Any], data_file: Path, location: str) -> None:
    """Appends every large tensor's bytes to ``data_file`` (4 KiB aligned, as onnx does) and
    points the tensor at them (``external_data``: location, offset, length)."""
    with open(data_file, "wb") as stream:
        for tensor in tensors:
            if len(tensor.raw_data) < _SMALL_TENSOR:
                continue
            offset = -stream.tell() % 4096 + stream.tell()
            stream.seek(offset)
            stream.write(tensor.raw_data)
            del tensor.external_data[:]
            for key, text in (("location", location), ("offset", str(offset)),
                              ("length", str(len(tensor.raw_data)))):
                entry = tensor.external_data.add()
                entry.key, entry.value = key, text
            tensor.data_location = 1  # TensorProto.EXTERNAL
            tensor.ClearField("raw_data")


def _initializers(graph: Any):
    """The initializers of ``graph`` and of every subgraph held by its nodes' attributes."""
    yield from graph.initializer
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("g"):
                yield from _initializers(attribute.g)
            for sub in attribute.graphs:
                yield from _initializers(sub)
