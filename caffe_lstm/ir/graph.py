"""The format-free graph: Value, Node, Graph.

Every value has exactly one producer (a node, or none for net inputs and weights); Caffe's
in-place tops are renamed on import. Weights are Values that hold an array. Node types keep
Caffe's spelling (``InnerProduct``, ``Eltwise``...).
"""

from __future__ import annotations

import copy
import weakref
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Iterable, Iterator

import numpy as np

Shape = tuple[int, ...]


@dataclass(eq=False)
class Value:
    """A blob: a net input, a node output, or a weight (``data`` set, or ``is_weight``)."""

    name: str
    shape: Shape | None = None
    data: np.ndarray | None = None
    is_weight: bool = False
    producer: Node | None = field(default=None, repr=False)

    @property
    def is_constant(self) -> bool:
        return self.data is not None

    def __repr__(self) -> str:
        return f"Value({self.name!r}, {self.shape})"


@dataclass(eq=False)
class Node:
    """One operation. ``inputs`` are the bottoms, ``weights`` the learnable blobs, in Caffe order.

    ``origin`` is the Caffe layer the node came from (for a node inserted by a rewrite, the
    layer it expands; such nodes have names starting with ``__``). ``where`` is a source
    location for messages (``net.prototxt:12``) when known. ``built_by`` names, for a layer a
    plugin's expansion built, that plugin and its ``b.add`` call (``the plugin 'x' (file) at
    x.py:19``) and ``built_for`` the layer it expanded: a built-in facet failing on such a
    layer is the plugin's error (bad attrs given to the builder), at that call.
    """

    name: str
    op: str
    inputs: list[Value]
    outputs: list[Value]
    attrs: dict[str, Any] = field(default_factory=dict)
    weights: list[Value] = field(default_factory=list)
    origin: str = ""
    where: str = ""
    built_by: str = ""
    built_for: str = ""

    def __post_init__(self) -> None:
        for value in self.outputs:
            value.producer = self
        self.origin = self.origin or self.name

    @property
    def subgraphs(self) -> list[Graph]:
        """The graphs the node holds among its attributes (a Loop's step body), in order."""
        return [value for value in self.attrs.values() if isinstance(value, Graph)]

    @property
    def label(self) -> str:
        """How messages name the node: ``layer 'lstm1' (LSTM) at net.prototxt:12``."""
        label = f"layer '{self.name}' ({self.op})"
        return f"{label} at {self.where}" if self.where else label

    def __repr__(self) -> str:
        return f"Node({self.name!r}, {self.op})"


@dataclass(eq=False)
class Graph:
    """Nodes in execution order, the net's input values and its output values."""

    name: str = ""
    nodes: list[Node] = field(default_factory=list)
    inputs: list[Value] = field(default_factory=list)
    outputs: list[Value] = field(default_factory=list)

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def values(self) -> Iterator[Value]:
        """Every value once: inputs, then weights and outputs in node order."""
        seen: set[int] = set()
        for value in self._all_values():
            if id(value) not in seen:
                seen.add(id(value))
                yield value

    def _all_values(self) -> Iterable[Value]:
        yield from self.inputs
        for node in self.nodes:
            yield from node.inputs
            yield from node.weights
            yield from node.outputs

    def value(self, name: str) -> Value | None:
        """The value called ``name``, or None."""
        return next((v for v in self.values() if v.name == name), None)

    def node(self, name: str) -> Node | None:
        """The node called ``name``, or None."""
        return next((n for n in self.nodes if n.name == name), None)

    def all_nodes(self) -> Iterator[Node]:
        """Every node, descending into the subgraphs a node holds (a Loop's step), right after
        that node."""
        for node in self.nodes:
            yield node
            for body in node.subgraphs:
                yield from body.all_nodes()

    def users(self, value: Value) -> list[Node]:
        """Nodes that read ``value`` as a bottom."""
        return [n for n in self.nodes if any(v is value for v in n.inputs)]

    def weight_values(self) -> list[Value]:
        """Every weight value once, in node order."""
        return [v for v in self.values() if v.is_weight]


def clone_graph(graph: Graph) -> Graph:
    """A deep copy of ``graph`` (nodes, values, loop bodies) that shares the weight arrays: a
    caffemodel's memory-mapped blobs are never copied."""
    arrays = {id(v.data): v.data for node in graph.all_nodes()
              for v in node.inputs + node.outputs + node.weights if v.data is not None}
    return copy.deepcopy(graph, memo=dict(arrays))


#: The aligned copies of unaligned weight arrays, by id of the array they copy (see ``aligned``).
_ALIGNED_COPIES: dict[int, np.ndarray] = {}


def aligned(array: np.ndarray) -> np.ndarray:
    """``array`` itself when its items start at a multiple of their size, else an aligned copy,
    made on first use and reused while ``array`` lives.

    A caffemodel's packed floats are zero-copy views into the mapped file and start at any byte
    offset; numpy's matmul leaves BLAS for an unaligned operand (about 10x slower on a recurrent
    product). Loading stays zero-copy; whatever computes on a weight asks for it through here,
    so each unaligned blob is copied once per loaded net (the clones of a graph share its
    arrays, hence the copy keyed by the array, not by the value).
    """
    if array.flags.aligned:
        return array
    key = id(array)
    copied = _ALIGNED_COPIES.get(key)
    if copied is None:
        copied = np.array(array, order="C")  # numpy allocates aligned memory
        copied.flags.writeable = array.flags.writeable  # read-only like the view it stands for
        _ALIGNED_COPIES[key] = copied
        weakref.finalize(array, _ALIGNED_COPIES.pop, key, None)
    return copied
