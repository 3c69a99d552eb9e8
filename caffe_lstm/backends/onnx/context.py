"""What an op's ``onnx`` facet gets: a context that appends ONNX nodes and initializers.

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
from collections.abc import Sequence

import numpy as np

from caffe_lstm.ir.graph import Node


@dataclass
class OnnxGraphParts:
    """The pieces of one ONNX graph being built (the main graph, or a Scan body)."""

    nodes: list[Any] = field(default_factory=list)
    initializers: list[Any] = field(default_factory=list)


class OnnxContext:
    """The state of one export: the onnx module, the opset, the graph being filled, names.

    Args:
        onnx: the ``onnx`` module (imported lazily by the exporter).
        opset: the default-domain opset the model declares.
        parts: where nodes and initializers go (swapped while a subgraph is built).
    """

    def __init__(self, onnx: Any, opset: int, parts: OnnxGraphParts | None = None) -> None:
        self.onnx, self.opset = onnx, opset
        self.parts = parts or OnnxGraphParts()
        self.node: Node | None = None
        self._names: set[str] = set()
        #: Arrays given to initializers stay referenced until the model is written.
        self.keep_alive: list[np.ndarray] = []
        #: set by the exporter: builds a subgraph (a Loop's body) and returns its GraphProto
        self.subgraph_builder: Any = None

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

    def initializer(self, name: str, array: np.ndarray) -> Any:
        """A TensorProto named ``name`` whose raw bytes come from ``array`` in one copy (no
        Python object per element)."""
        array = np.ascontiguousarray(array)
        self.keep_alive.append(array)
        tensor = self.onnx.TensorProto()
        tensor.name = name
        tensor.data_type = self.onnx.helper.np_dtype_to_tensor_dtype(array.dtype)
        tensor.dims.extend(array.shape)
        tensor.raw_data = array.tobytes()
        return tensor

    def run_subgraph(self, graph: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                     name: str) -> Any:
        """Exports ``graph`` (a Loop's body) as a GraphProto whose inputs are ``inputs``
        (ValueInfoProtos, in order, for the body's inputs) and whose outputs are ``outputs``
        (ValueInfoProtos for the body's outputs): the exporter walks it like the main graph."""
        return self.subgraph_builder(graph, inputs, outputs, name)
