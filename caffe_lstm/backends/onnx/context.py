"""The ONNX exporter's walker, which is what an op's ``onnx`` facet gets as ``ctx``: it walks
the graph, appends ONNX nodes and initializers, and exports a Loop's body (``run_subgraph``).

The facet signature (every op, like the ``tensorrt`` facet)::

    @staticmethod
    def onnx(ctx: OnnxContext, node: Node, *inputs: str) -> tuple[str, ...]

``inputs`` are the ONNX tensor names of the node's bottoms followed by the initializer names of
its weights (``node.weights``, in order); the facet returns one tensor name per top. Op modules
never import onnx: they call ``ctx.add`` with the operator's type and attributes as plain Python
values, and ``ctx.constant`` for arrays. An op with no ONNX form sets ``onnx = None`` and
``onnx_missing_reason``; the exporter lists all such nodes at once before anything is written.

Names trace back to Caffe: a node made for ``__lstm1/gate_input`` is called ``lstm1/gate_input``
(with a suffix when a layer needs several ONNX nodes), its outputs keep the IR values' names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from caffe_lstm.errors import CaffeLstmError
from caffe_lstm.ir.graph import Graph, Node, Shape, Value
from caffe_lstm.ir.walk import GraphWalker
from caffe_lstm.ops import get_op
from caffe_lstm.ops.plugins import built_fault, checked_results, wrong_result

#: A dim as the exported model knows it: a size, a symbolic name, or None (varies, unnamed).
Dim = int | str | None


@dataclass
class OnnxGraphParts:
    """The pieces of one ONNX graph being built (the main graph, or a Scan body)."""

    nodes: list[Any] = field(default_factory=list)
    initializers: list[Any] = field(default_factory=list)


@dataclass
class Streamed:
    """A main-graph initializer kept out of the model: its TensorProto without data, and the
    array whose bytes ``save_model`` writes."""

    header: Any
    array: np.ndarray


def _static_dims(value: Value) -> tuple[Dim, ...]:
    return tuple(value.shape)


class OnnxContext(GraphWalker[str]):
    """The state of one export (the onnx module, the opset, the graph being filled, names) and
    the walk calling each node's ``onnx`` facet; what travels along the edges are tensor names.

    Args:
        onnx: the ``onnx`` module (imported lazily by the exporter).
        opset: the default-domain opset the model declares.
        value_dims: the dims of an IR value as the model declares them (ints, or a str/None
            where they vary); default: its shape.
        value_names: the names of the graph's IR values, which no initializer may take.
        stream_bytes: weights this large become main-graph initializers left out of the model
            (``streamed``: ``save_model`` writes them from their arrays); None: none are.
        largest: the shapes of the graph's values at the profile's MAX sizes, by id of the
            value; empty without a profile.
        int32_indices: the model is for TensorRT's ONNX parser, which reads int64 indices as
            INT32 (a facet gathering from a large table checks it against 2³¹).
    """

    facet = "onnx"

    def __init__(self, onnx: Any, opset: int,
                 value_dims: Callable[[Value], tuple[Dim, ...]] = _static_dims,
                 value_names: Iterable[str] = (), stream_bytes: int | None = None,
                 largest: dict[int, Shape] | None = None, int32_indices: bool = False
                 ) -> None:
        self.onnx, self.opset = onnx, opset
        self.value_dims = value_dims
        self._largest, self.int32_indices = largest or {}, int32_indices
        self.stream_bytes = stream_bytes
        #: where nodes and initializers go (swapped while a subgraph is exported)
        self.parts = OnnxGraphParts()
        self.node: Node | None = None
        self._names: set[str] = set()
        #: Arrays given to initializers stay referenced until the model is written.
        self.keep_alive: list[np.ndarray] = []
        self._shapes: dict[tuple[int, str], str] = {}
        #: weight value -> initializer name, per enclosing graph (inner graphs see outer ones)
        self._scopes: list[dict[int, str]] = [{}]
        #: names no initializer may take: the IR values', and those given to initializers
        self._taken = set(value_names)
        #: with ``stream_bytes``: the large weights, written by save_model from their arrays
        self.streamed: list[Streamed] = []

    def largest_shape(self, value: Value) -> Shape:
        """The shape ``value`` takes at the profile's MAX sizes; its shape without a profile."""
        return self._largest.get(id(value), value.shape)

    # ---- naming ------------------------------------------------------------------------------

    def unique(self, wanted: str) -> str:
        """``wanted``, or ``wanted_1``, ``wanted_2``... when taken (node and tensor names)."""
        name, repeat = wanted, 0
        while name in self._names:
            repeat += 1
            name = f"{wanted}_{repeat}"
        self._names.add(name)
        return name

    def reserve(self, name: str) -> None:
        """Marks ``name`` as taken (graph inputs, IR value names)."""
        self._names.add(name)

    def base_name(self) -> str:
        """``lstm1/gate_input`` for node ``__lstm1/gate_input``."""
        name = self.node.name if self.node is not None else "graph"
        return name[2:] if name.startswith("__") else name

    # ---- building ----------------------------------------------------------------------------

    def add(self, op_type: str, inputs: Sequence[str], outputs: int | Sequence[str] = 1,
            suffix: str = "", **attrs: Any) -> list[str]:
        """Appends one node ``op_type`` (default domain); returns its output tensor names.

        ``outputs`` is a count (fresh names ``<layer>/<suffix>...``) or the names to use.
        Attribute values are plain Python (ints, floats, strings, lists of them, GraphProto).
        """
        base = self.base_name() + (f"/{suffix}" if suffix else "")
        if isinstance(outputs, int):
            outputs = [self.unique(base if outputs == 1 else f"{base}:{k}")
                       for k in range(outputs)]
        node = self.onnx.helper.make_node(op_type, list(inputs), list(outputs),
                                          name=self.unique(f"{base}#node"), **attrs)
        self.parts.nodes.append(node)
        return list(outputs)

    def constant(self, array: np.ndarray, suffix: str = "const") -> str:
        """An initializer holding ``array`` (its dtype kept); returns its name."""
        name = self.unique(f"{self.base_name()}/{suffix}")
        self.parts.initializers.append(self.initializer(name, array))
        return name

    def ints(self, values: Sequence[int] | int, suffix: str = "ints") -> str:
        """An int64 initializer (shapes, axes, split sizes); a bare int gives a scalar."""
        return self.constant(np.asarray(values, dtype=np.int64), suffix)

    def tensor_header(self, name: str, array: np.ndarray) -> Any:
        """A TensorProto named ``name`` with the dtype and dims of ``array`` and no data."""
        tensor = self.onnx.TensorProto()
        tensor.name = name
        tensor.data_type = self.onnx.helper.np_dtype_to_tensor_dtype(array.dtype)
        tensor.dims.extend(array.shape)
        return tensor

    def initializer(self, name: str, array: np.ndarray) -> Any:
        """A TensorProto named ``name`` whose raw bytes come from ``array`` in one copy (no
        Python object per element)."""
        array = np.ascontiguousarray(array)
        self.keep_alive.append(array)
        tensor = self.tensor_header(name, array)
        tensor.raw_data = array.tobytes()
        return tensor

    def run_subgraph(self, graph: Graph, inputs: Sequence[Any], outputs: Sequence[Any],
                     name: str, input_order: Sequence[int] | None = None) -> Any:
        """Exports ``graph`` (a Loop's body) as a GraphProto whose inputs are ``inputs``
        (ValueInfoProtos, in order, for the body's inputs) and whose outputs are ``outputs``
        (ValueInfoProtos for the body's outputs), walking it like the main graph.

        An entry of ``inputs`` may instead be a plain tensor name of the enclosing graph: that
        body input then reads the outer value directly (ONNX subgraphs see outer-scope names)
        and is no input of the GraphProto. ``input_order`` lists the GraphProto's inputs as
        indices into ``inputs`` (ONNX Scan wants the states first); default: as given."""
        outer_parts, outer_node = self.parts, self.node
        self.parts = OnnxGraphParts()
        self._scopes.append({})
        try:
            names = [item if isinstance(item, str) else item.name for item in inputs]
            results = self.walk(graph, names)
            for result, info in zip(results, outputs):
                if result != info.name:  # an alias, or the same value output twice
                    self.node = outer_node
                    self.add("Identity", [result], [info.name], suffix="step_output")
            order = range(len(inputs)) if input_order is None else input_order
            graph_inputs = [inputs[i] for i in order if not isinstance(inputs[i], str)]
            return self.onnx.helper.make_graph(self.parts.nodes, name, graph_inputs,
                                               list(outputs), initializer=self.parts.initializers)
        finally:
            self.parts, self.node = outer_parts, outer_node
            self._scopes.pop()

    def visit(self, node: Node, names: list[str]) -> list[str]:
        """The node's ONNX nodes, from its ``onnx`` facet on its bottoms' tensor names then its
        weights' initializers; each result takes the name of the IR value it computes."""
        weights = [self._weight(value) for value in node.weights]
        outer, self.node = self.node, node
        try:
            results = checked_results(node, "onnx", get_op(node.op).onnx(self, node, *names,
                                                                         *weights),
                                      lambda item: isinstance(item, str), "tensor name")
            tops = []
            for value, result in zip(node.outputs, results):
                if result not in names and result != value.name:
                    self._rename_result(node, result, value.name)
                    result = value.name
                tops.append(result)
            return tops
        except Exception as exc:
            if (fault := built_fault(node, "onnx", exc)) is not None:
                raise fault from exc  # bad attrs a plugin gave b.add
            exc.add_note(f"while exporting {node.name} ({node.op})")
            raise
        finally:
            self.node = outer

    def _rename_result(self, node: Node, result: str, name: str) -> None:
        """``rename`` for a facet's result: a name nothing in this graph makes is the facet's
        bug, said as such (not as rename's KeyError)."""
        try:
            self.rename(result, name)
        except KeyError:
            raise wrong_result(node, "onnx", f"returned the tensor name {result!r}, which no "
                               "node, initializer or bottom of the graph makes") from None

    def _weight(self, value: Value) -> str:
        """The initializer of a weight, made once per graph scope (the array in one copy).

        An initializer takes its weight's name unless a value or another initializer has it."""
        for scope in reversed(self._scopes):
            if id(value) in scope:
                return scope[id(value)]
        if value.data is None:  # a bug: the API checks for missing weights first
            raise ValueError(f"weight {value.name} has no data")
        name = self.unique(value.name) if value.name in self._taken else value.name
        self._taken.add(name)
        array = np.asarray(value.data, dtype=np.float32)  # float32 already: no copy
        if self.stream_bytes is not None and array.nbytes >= self.stream_bytes:
            # the main graph's: every body sees it as an outer-scope value
            self.streamed.append(Streamed(self.tensor_header(name, array), array))
            self._scopes[0][id(value)] = name
            return name
        self.parts.initializers.append(self.initializer(name, array))
        self._scopes[-1][id(value)] = name
        return name

    # ---- shapes: a symbolic T or N is never baked into a constant ------------------------------

    def static_dim(self, value: Value, axis: int) -> int | None:
        """Dim ``axis`` of the IR ``value`` when the exported model fixes it, else None."""
        dim = self.value_dims(value)[axis]
        return dim if isinstance(dim, int) else None

    def tensor_info(self, name: str, value: Value) -> Any:
        """A float32 ValueInfoProto named ``name`` with the dims of the IR ``value``."""
        return self.onnx.helper.make_tensor_value_info(
            name, self.onnx.TensorProto.FLOAT, list(self.value_dims(value)))

    def shape_of(self, x: str) -> str:
        """The run-time shape of tensor ``x`` (one Shape node per tensor and graph)."""
        key = (id(self.parts), x)
        if key not in self._shapes:
            self._shapes[key] = self.add("Shape", [x], suffix="shape")[0]
        return self._shapes[key]

    def dim_parts(self, x: str, value: Value, axes: Sequence[int]) -> list[int | str]:
        """Dims ``axes`` of tensor ``x`` (IR ``value``): an int where fixed, else a 1-D int64
        tensor read from ``x`` at run time (Gather of its Shape)."""
        parts: list[int | str] = []
        for axis in axes:
            dim = self.static_dim(value, axis)
            parts.append(dim if dim is not None else self.add(
                "Gather", [self.shape_of(x), self.ints([axis], "axis")], suffix=f"dim{axis}",
                axis=0)[0])
        return parts

    def shape_tensor(self, parts: Sequence[int | str], suffix: str = "shape") -> str:
        """A 1-D int64 shape from ints and 1-D int64 tensors: one constant when all are ints,
        else a Concat (runs of ints become one constant each)."""
        pieces: list[str] = []
        run: list[int] = []
        for part in parts:
            if isinstance(part, str):
                if run:
                    pieces.append(self.ints(run, f"{suffix}_part"))
                    run = []
                pieces.append(part)
            else:
                run.append(int(part))
        if not pieces:
            return self.ints(run, suffix)
        if run:
            pieces.append(self.ints(run, f"{suffix}_part"))
        return pieces[0] if len(pieces) == 1 else self.add("Concat", pieces, suffix=suffix,
                                                            axis=0)[0]

    def scalar(self, value: float, suffix: str = "value") -> str:
        """A float32 scalar (shape ()): ONNX broadcasts it against any tensor."""
        return self.constant(np.array(value, dtype=np.float32), suffix)

    def unsqueeze(self, x: str, axes: Sequence[int], suffix: str = "unsqueeze") -> str:
        """``x`` with size-1 axes inserted at ``axes`` (positions in the result)."""
        return self.add("Unsqueeze", [x, self.ints(list(axes), "axes")], suffix=suffix)[0]

    def squeeze(self, x: str, axes: Sequence[int], suffix: str = "squeeze") -> str:
        """``x`` without its size-1 axes ``axes``."""
        return self.add("Squeeze", [x, self.ints(list(axes), "axes")], suffix=suffix)[0]

    def reduce(self, op_type: str, x: str, axes: Sequence[int], suffix: str = "") -> str:
        """``op_type`` (ReduceSum, ReduceMean, ReduceL1, ReduceSumSquare) over ``axes``, the
        reduced axes dropped. Axes are an input from opset 13 (ReduceSum) or 18 (the others),
        an attribute before."""
        axes = list(axes)
        if op_type == "ReduceSum" or self.opset >= 18:
            return self.add(op_type, [x, self.ints(axes, "axes")], suffix=suffix,
                            keepdims=0)[0]
        return self.add(op_type, [x], suffix=suffix, axes=axes, keepdims=0)[0]

    def zeros(self, shape: str, suffix: str = "zeros") -> str:
        """float32 zeros of the run-time shape ``shape`` (a 1-D int64 tensor)."""
        zero = self.onnx.helper.make_tensor("value", self.onnx.TensorProto.FLOAT, [1], [0.0])
        return self.add("ConstantOfShape", [shape], suffix=suffix, value=zero)[0]

    def require_opset(self, opset: int, what: str) -> None:
        """Refuses an export whose opset is below ``opset``, which ``what`` needs."""
        if self.opset < opset:
            where = self.node.label if self.node is not None else ""
            raise CaffeLstmError(f"{what} needs ONNX opset {opset} or newer, the export asks "
                                 f"for {self.opset}", where, f"pass opset={opset} or newer")

    def rename(self, old: str, new: str) -> None:
        """Gives the tensor ``old`` (a node output or an initializer of the current graph) the
        name ``new``: a facet's result takes the name of the IR value it computes."""
        for node in reversed(self.parts.nodes):
            for index, output in enumerate(node.output):
                if output == old:
                    node.output[index] = new
                    return
        for tensor in self.parts.initializers:
            if tensor.name == old:
                tensor.name = new
                return
        raise KeyError(f"no node or initializer of this graph makes {old!r}")
