"""The op registry: everything about one Caffe layer type lives in one class.

An op class has static facets with fixed signatures:

- ``parse(p: Params) -> dict``: the node's attributes from the layer's parameter message
  (``p`` is the format-free view the frontend makes of ``<param>``; see ``frontend/params.py``).
- ``infer(node, *bottom_shapes) -> tuple[Shape, ...]``: the shape of every top; raises
  ShapeError naming the node when the bottoms cannot be accepted.
- ``blobs(node, *bottom_shapes) -> tuple[tuple[str, Shape], ...]``: the learnable blobs the
  layer owns, named and in Caffe's order (empty for layers without parameters).
- ``numpy(node, *bottoms, *blobs) -> tuple[np.ndarray, ...]``: the forward pass.
- ``tensorrt(ctx, node, *bottom_tensors, *blob_arrays) -> tuple[ITensor, ...]``: the layers
  that compute the op in a TensorRT network (``ctx`` is ``backends/tensorrt/context.py``'s
  EmitContext; op modules never import tensorrt). None where an op has no emission, e.g. LSTM,
  which the rewrite expands first.
- ``caffe(ctx, node) -> dict | None``: the fields of the layer's ``param`` message when the node
  is written back as Caffe (the inverse of ``parse``; nested messages as dicts, repeated ones as
  lists). The default writes every attribute to the field of the same name.
- ``dot(ctx, node) -> None``: how the DOT writer draws the node; the default is one record.
- ``onnx(ctx, node, *input_names, *weight_names) -> tuple[str, ...]``: the ONNX operators that
  compute the op (``ctx`` is ``backends/onnx/context.py``'s OnnxContext; op modules never import
  onnx). None where an op has no ONNX form. The recurrent layers' facet is ONNX's own
  LSTM/RNN operator, called only with ``export --lstm-op native`` (by default the rewrite
  expands them into a Scan first); ``onnx_refusal(node) -> str | None`` says why that operator
  would not compute a given node exactly, and the exporter refuses such nodes before writing.

Ops that hold a subgraph (the Loop's body) set ``needs_context``: the walkers then pass
themselves as the keyword argument ``ctx`` to ``parse``, ``infer`` and ``numpy`` too, and the op
asks that context to run its body (``ctx.run_subgraph``), as ONNX's reference evaluator does
for its control-flow operators. The ``tensorrt``, ``caffe`` and ``dot`` facets always get the
walker's context first. ``ops/`` never imports the walkers.

Recurrent layers also carry ``recurrent``: declarative metadata (their states, which bottom is
``cont``, which is the static input) that the rewrite, ``--state io`` and the feeds read, and
``expand(b, node)``, which replaces the node by primitive layers and one Loop.

Adding a layer type touches one class; ``tests/test_registry.py`` checks that every
registered op has every facet.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, ClassVar

from caffe_lstm.errors import ShapeError, UnsupportedLayerError
from caffe_lstm.ir.graph import Graph, Node, Shape

_REGISTRY: dict[str, type[Op]] = {}


@dataclass(frozen=True)
class RecurrentSpec:
    """What every pass needs to know of a recurrent layer type, declared on its op class.

    Attributes:
        states: the carried states in Caffe's bottom order (``("h", "c")``); ``--state io``
            exposes them as ``<layer>/<state>_0`` inputs and ``<layer>/<state>_T`` outputs.
        cont_bottom: the index of the sequence-continuation bottom (``cont``, the fork's
            ``clip``), or None.
        static_bottom: the index of the optional static input (``x_static``), or None.
        exposable: whether ``expose_hidden`` (and so ``--state io``) applies to the type.
        has_layouts: whether ``weights export|import`` moves its weights to other frameworks.
    """

    states: tuple[str, ...]
    cont_bottom: int | None = 1
    static_bottom: int | None = 2
    exposable: bool = True
    has_layouts: bool = False


class Op:
    """Base class of the op facets. Subclasses set ``type`` and override what they need."""

    type: ClassVar[str] = ""
    #: The LayerParameter field the op reads its attributes from (``"inner_product_param"``).
    param: ClassVar[str | None] = None
    #: Allowed number of bottoms and of tops, as (min, max); max None = unbounded.
    n_bottoms: ClassVar[tuple[int, int | None]] = (1, 1)
    n_tops: ClassVar[tuple[int, int | None]] = (1, 1)
    #: True for ops holding a subgraph: walkers pass themselves as ``ctx=`` (see above).
    needs_context: ClassVar[bool] = False
    #: Recurrent layer types: their declarative metadata (None for every other op).
    recurrent: ClassVar[RecurrentSpec | None] = None
    #: ``expand(b: NodeBuilder, node)``: replaces a recurrent node by primitives (the rewrite).
    expand: ClassVar[Any] = None

    @staticmethod
    def parse(p: Any) -> dict[str, Any]:
        return {}

    #: The shape rule and the numpy forward: every op defines both (tests/test_registry.py).
    infer: ClassVar[Any] = None
    numpy: ClassVar[Any] = None

    @staticmethod
    def blobs(node: Node, *shapes: Shape) -> tuple[tuple[str, Shape], ...]:
        return ()

    #: The TensorRT facet, a static method like the others; None = no emission.
    tensorrt: ClassVar[Any] = None
    #: ``synthetic(node, rng, scale) -> list[np.ndarray]``: plausible random blobs for
    #: ``weights init`` where uniform noise would not do (BatchNorm needs variances > 0);
    #: None = uniform in [-scale, scale).
    synthetic: ClassVar[Any] = None
    #: Why an op has no TensorRT emission, for the error that lists such nodes.
    tensorrt_missing_reason: ClassVar[str] = "no TensorRT emission yet"
    #: ``onnx(ctx, node, *input_names, *weight_names) -> tuple[str, ...]``: the ONNX nodes
    #: that compute the op (``backends/onnx/context.py``'s OnnxContext); None = no ONNX form.
    onnx: ClassVar[Any] = None
    #: Why an op has no ONNX form, for the error that lists such nodes.
    onnx_missing_reason: ClassVar[str] = "no ONNX form yet"
    #: ``onnx_refusal(node) -> str | None``: why the ``onnx`` facet cannot compute this node
    #: exactly (None: it can); None = the facet takes every node of the type.
    onnx_refusal: ClassVar[Any] = None

    @classmethod
    def caffe(cls, ctx: Any, node: Node) -> dict[str, Any] | None:
        """The param message's fields: each attribute under its own name (None: left unset).

        An op without a param message has no attributes to write.
        """
        if cls.param is None:
            if node.attrs:  # a bug: parse made attrs that nothing can hold
                raise ValueError(f"{node.op} node {node.name} has attrs {sorted(node.attrs)}")
            return None
        return dict(node.attrs)

    @staticmethod
    def dot(ctx: Any, node: Node) -> None:
        """One record ``{name | op | output shapes}`` with an edge from every bottom."""
        ctx.draw_record(node)


def register_op(cls: type[Op]) -> type[Op]:
    """Class decorator: registers ``cls`` under its Caffe type string."""
    if not cls.type or cls.type in _REGISTRY:
        raise ValueError(f"op type {cls.type!r} is empty or registered twice")
    _REGISTRY[cls.type] = cls
    return cls


def get_op(op_type: str) -> type[Op] | None:
    """The op class registered under ``op_type``, or None."""
    return _REGISTRY.get(op_type)


def registered_types() -> list[str]:
    """Every registered type string, sorted."""
    return sorted(_REGISTRY)


def recurrent_types() -> tuple[str, ...]:
    """The registered types that carry ``recurrent`` metadata, sorted."""
    return tuple(t for t in sorted(_REGISTRY) if _REGISTRY[t].recurrent is not None)


def recurrent_spec(op_type: str) -> RecurrentSpec | None:
    """The recurrent metadata of ``op_type``, or None for a non-recurrent (or unknown) type."""
    op = _REGISTRY.get(op_type)
    return None if op is None else op.recurrent


# ---- helpers shared by the op families -------------------------------------------------------


def check_facet(graph: Graph, facet: str, refusal: str) -> None:
    """Lists, in one error that starts with ``refusal``, every node (loop bodies included)
    whose op lacks ``facet`` ("tensorrt", "onnx"), by type with its ``<facet>_missing_reason``."""
    missing: dict[str, list[str]] = defaultdict(list)
    for node in graph.all_nodes():
        if getattr(get_op(node.op), facet) is None:
            missing[node.op].append(node.name)
    if missing:
        listing = "; ".join(
            f"{op} ({', '.join(names)}): {getattr(get_op(op), f'{facet}_missing_reason')}"
            for op, names in missing.items())
        raise UnsupportedLayerError(f"{refusal}: {listing}",
                                    "the rewritten graph",
                                    "cut them off with --outputs, or report the layer type")


def canonical_axis(node: Node, axis: int, rank: int, what: str = "axis") -> int:
    """Caffe's CanonicalAxisIndex: a negative axis counts from the end; must land in [0, rank)."""
    resolved = axis + rank if axis < 0 else axis
    if not 0 <= resolved < rank:
        raise ShapeError(
            f"{what} {axis} is out of range for a {rank}-axis bottom",
            node.label,
            f"use an axis in [{-rank}, {rank})",
        )
    return resolved


def count(shape: Shape, start: int = 0, end: int | None = None) -> int:
    """Caffe's count(start, end): the product of the dims in [start, end)."""
    result = 1
    for dim in shape[start:end]:
        result *= dim
    return result


def shape_error(node: Node, what: str, hint: str = "") -> ShapeError:
    """A ShapeError located at ``node``."""
    return ShapeError(what, node.label, hint)
