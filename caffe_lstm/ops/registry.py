"""The op registry: everything about one Caffe layer type lives in one class.

An op class (a subclass of ``Op``, registered with ``@register_op``) has static facets with
fixed signatures; docs/ops.md is their public contract. The rule for the first argument:

- a facet that a walker calls while walking the graph takes that walker first, as ``ctx``:
  ``parse(ctx, p)`` (the importer), ``infer(ctx, node, *shapes)`` and ``blobs(ctx, node,
  *shapes)`` (shape inference), ``numpy(ctx, node, *arrays)`` (the numpy executor),
  ``tensorrt(ctx, node, ...)``, ``onnx(ctx, node, ...)``, ``caffe(ctx, node)``, ``dot(ctx,
  node)``. What each walker offers is ``ops/contexts.py``; ``ops/`` never imports a walker.
  Outside a walk (tests, folding a constant) ``parse``, ``infer``, ``blobs`` and ``numpy`` of an
  op that holds no subgraph may be called with ``ctx=None``: only ``holds_subgraph`` ops use it.
- ``expand(b, node)`` takes the rewrite's NodeBuilder first: it is the rewrite's context.
- a facet that answers a question about one node outside any walk takes the node first:
  ``onnx_refusal(node)``, ``synthetic(node, rng, scale)``,
  ``calibrate(node, rng, inputs, blobs)``.

A recurrent type's weight roles (``weights export|import``) are its ``RecurrentSpec``'s
``roles`` and ``file_order``: the Op base knows nothing of any cell.

Every facet is declared on ``Op`` with its signature. ``parse``, ``blobs``, ``caffe``, ``dot``,
``onnx_refusal``, ``synthetic`` and ``calibrate`` have working defaults; the others raise
MissingFacetError unless overridden. Which facets an op must override follows from what it
declares (``claimed_facets``), and ``register_op`` refuses a class that lacks one.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from caffe_lstm.errors import ShapeError, UnsupportedLayerError
from caffe_lstm.ir.graph import Graph, Node, Shape, Value
from caffe_lstm.ops.contexts import (CaffeContext, DotContext, ExpandContext, ImportContext,
                                     NumpyContext, OnnxContext, ParamView, ShapeContext,
                                     TensorRTContext)

_REGISTRY: dict[str, type[Op]] = {}

#: Every facet, in the order docs/ops.md lists them.
FACETS = ("parse", "infer", "blobs", "numpy", "tensorrt", "onnx", "onnx_refusal", "caffe", "dot",
          "synthetic", "calibrate", "expand")


class MissingFacetError(NotImplementedError):
    """A facet was called on an op that does not have it (a bug of the caller, which should
    have asked ``has_facet`` first)."""


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
        roles: ``(node, blobs) -> weights``: the layer's blobs (Caffe's order) by role (an
            ``LstmWeights``, a ``GruWeights``), for ``weights export|import``; None: the type
            has no weight layouts.
        file_order: ``(node, weights) -> blobs``: the inverse of ``roles``.
    """

    states: tuple[str, ...]
    cont_bottom: int | None = 1
    static_bottom: int | None = 2
    exposable: bool = True
    #: The widths of the carried states of a node, in ``states`` order (needed when exposable).
    widths: Callable[[Node], tuple[int, ...]] | None = None
    #: Which nodes of an exposable type can expose their states (None: every one).
    exposable_if: Callable[[Node], bool] | None = None
    #: The full shapes of the exposed states of a node, (1, ...) each, in ``states`` order, for
    #: states that are not (1, N, width): a convolutional state (1, D, H, W), say. None: the
    #: shapes are (1, N, width) from ``widths``, N being axis 1 of the first bottom.
    shapes: Callable[[Node], tuple[Shape, ...]] | None = None
    #: Whether Caffe starts each Forward from the previous one's final state (recurrent_layer.cpp
    #: without expose_hidden), so that ``state="auto"`` exposes the states where cont may be
    #: non-zero at t = 0; False: every Forward starts from zeros or its initial-state bottoms.
    carries_state: bool = True

    #: The blobs by role, and back (``weights export|import``); both or neither.
    roles: Callable[[Node, list], Any] | None = None
    file_order: Callable[[Node, Any], list] | None = None

    @property
    def has_layouts(self) -> bool:
        """Whether ``weights export|import`` moves the type's weights (roles declared)."""
        return self.roles is not None and self.file_order is not None

    def can_expose(self, node: Node) -> bool:
        """Whether ``--state io`` can make this node's states inputs and outputs."""
        return self.exposable and (self.exposable_if is None or self.exposable_if(node))

    def state_shapes(self, node: Node) -> tuple[Shape, ...]:
        """The shapes of the node's exposed states: ``shapes``, or (1, N, width) each."""
        if self.shapes is not None:
            return tuple(tuple(shape) for shape in self.shapes(node))
        if self.widths is None:
            raise ValueError(f"{node.op} declares neither the widths nor the shapes of its "
                             "states")
        batch = node.inputs[0].shape[1]
        return tuple((1, batch, width) for width in self.widths(node))

    def is_exposed(self, node: Node) -> bool:
        """Whether the node's states are bottoms and tops already (``expose_hidden``)."""
        return bool(node.attrs.get("expose_hidden"))

    def expose(self, node: Node) -> tuple[list[Value], list[Value]]:
        """Switches ``expose_hidden`` on: appends the initial states ``<layer>/<state>_0``
        (``state_shapes``: (1, N, width), or any shape the type declares) as bottoms and the
        final states ``<layer>/<state>_T`` as tops; returns both lists, for the caller to make
        them net inputs and outputs."""
        if not self.can_expose(node):
            raise ValueError(f"{node.op} node {node.name} has no states to expose")
        shapes = self.state_shapes(node)
        initial = [Value(f"{node.name}/{name}_0", shape)
                   for name, shape in zip(self.states, shapes)]
        finals = [Value(f"{node.name}/{name}_T", shape, producer=node)
                  for name, shape in zip(self.states, shapes)]
        node.inputs.extend(initial)
        node.outputs.extend(finals)
        node.attrs["expose_hidden"] = True
        return initial, finals


def _missing(facet: str, node: Node) -> MissingFacetError:
    return MissingFacetError(f"{node.op} node {node.name} has no {facet} facet")


class Op:
    """Base class of the op facets. Subclasses set ``type`` and override what they need."""

    type: ClassVar[str] = ""
    #: The LayerParameter field the op reads its attributes from (``"inner_product_param"``).
    param: ClassVar[str | None] = None
    #: Allowed number of bottoms and of tops, as (min, max); max None = unbounded.
    n_bottoms: ClassVar[tuple[int, int | None]] = (1, 1)
    n_tops: ClassVar[tuple[int, int | None]] = (1, 1)
    #: True for ops holding a subgraph: their facets run it through ``ctx.run_subgraph``.
    holds_subgraph: ClassVar[bool] = False
    #: Recurrent layer types: their declarative metadata (None for every other op).
    recurrent: ClassVar[RecurrentSpec | None] = None
    #: Where the layer's semantics come from: "BVLC Caffe", or for a fork's layer the fork's
    #: repository and the commit its math was read from ("caffe_ocr, senlinuc/caffe_ocr@81642f6").
    origin: ClassVar[str] = "BVLC Caffe"
    #: What the op does not support, in one sentence ("" when nothing).
    limits: ClassVar[str] = ""
    #: Fields caffe-lstm's schema lacks, read from the prototxt's text by name: field name ->
    #: ``ops.plugins.ParamField``. With ``param`` not in the schema, the fields of that message
    #: (a plugin's own); with ``param`` in it, those a fork adds inside it. None: no such field.
    param_fields: ClassVar[dict[str, Any] | None] = None
    #: True when the tops depend on the bottoms' shapes only, never on their values (jolibrain's
    #: ContinuationIndicator): such a top is a constant wherever the shapes are fixed.
    reads_shapes_only: ClassVar[bool] = False
    #: Why an op has no ``tensorrt`` facet ("" = it has one), for the error listing such nodes.
    tensorrt_missing_reason: ClassVar[str] = ""
    #: Why an op has no ``onnx`` facet ("" = it has one), for the error listing such nodes.
    onnx_missing_reason: ClassVar[str] = ""

    @staticmethod
    def parse(ctx: ImportContext | None, p: ParamView | None) -> dict[str, Any]:
        """The node's attributes from the layer's param message (``p``: the frontend's
        format-free view of it, None for an op without ``param``). Default: none."""
        return {}

    @staticmethod
    def infer(ctx: ShapeContext | None, node: Node, *shapes: Shape) -> tuple[Shape, ...]:
        """The shape of every top; raises ShapeError naming the node on bad bottoms."""
        raise _missing("infer", node)

    @staticmethod
    def blobs(ctx: ShapeContext | None, node: Node,
              *shapes: Shape) -> tuple[tuple[str, Shape], ...]:
        """The learnable blobs, named and in Caffe's order. Default: none."""
        return ()

    @staticmethod
    def numpy(ctx: NumpyContext | None, node: Node, *arrays: np.ndarray
              ) -> tuple[np.ndarray, ...]:
        """The forward pass on the bottoms then the blobs; one array per top."""
        raise _missing("numpy", node)

    @staticmethod
    def tensorrt(ctx: TensorRTContext, node: Node, *inputs: Any) -> tuple[Any, ...]:
        """The TensorRT layers computing the op on the bottom tensors then the blob arrays;
        one ITensor per top."""
        raise _missing("tensorrt", node)

    @staticmethod
    def onnx(ctx: OnnxContext, node: Node, *names: str) -> tuple[str, ...]:
        """The ONNX nodes computing the op on the bottom then the weight tensor names; one
        tensor name per top."""
        raise _missing("onnx", node)

    @staticmethod
    def onnx_refusal(node: Node) -> str | None:
        """Why the ``onnx`` facet would not compute this node exactly; None: it would."""
        return None

    @classmethod
    def caffe(cls, ctx: CaffeContext, node: Node) -> dict[str, Any] | None:
        """The param message's fields: each attribute under its own name (None: left unset).

        An op without a param message has no attributes to write.
        """
        if cls.param is None:
            if node.attrs:  # a bug: parse made attrs that nothing can hold
                raise ValueError(f"{node.op} node {node.name} has attrs {sorted(node.attrs)}")
            return None
        return dict(node.attrs)

    @staticmethod
    def dot(ctx: DotContext, node: Node) -> None:
        """One record ``{name | op | output shapes}`` with an edge from every bottom."""
        ctx.draw_record(node)

    @staticmethod
    def synthetic(node: Node, rng: np.random.Generator, scale: float) -> list[np.ndarray] | None:
        """Plausible random blobs for ``weights init`` where uniform noise would not do
        (BatchNorm needs variances > 0). Default None: uniform noise."""
        return None

    @staticmethod
    def calibrate(node: Node, rng: np.random.Generator, inputs: list[np.ndarray],
                  blobs: list[np.ndarray]) -> list[np.ndarray] | None:
        """The blobs ``weights init`` gives the node by default (its unit-scale walk), from
        the drawn ``blobs`` and the node's bottoms ``inputs`` on the net's random inputs, for a
        layer whose trained values follow from the data or sit near a known point
        (BatchNorm's statistics are its input's). Default None: the drawn blobs, the matrices
        then rescaled to unit output."""
        return None

    @staticmethod
    def expand(b: ExpandContext, node: Node) -> None:
        """Replaces ``node`` by primitive layers appended through ``b`` (the rewrite)."""
        raise _missing("expand", node)


def has_facet(op: type[Op], facet: str) -> bool:
    """Whether ``op`` (or a base class of it other than ``Op``) defines ``facet`` (as other
    than None: ``onnx = None`` says the op has no ONNX form)."""
    for cls in op.__mro__:
        if facet in vars(cls):
            return cls is not Op and vars(cls)[facet] is not None
    raise AttributeError(f"no facet {facet!r}")


def claimed_facets(op: type[Op]) -> tuple[str, ...]:
    """The facets ``op`` must define, from what it declares: ``infer`` and ``numpy`` always;
    ``tensorrt`` and ``onnx`` unless it gives a reason why not; ``expand`` when recurrent.
    (``parse`` is optional: a
    param message may hold nothing the op computes with, e.g. sigmoid_param's engine.)"""
    claimed = ["infer", "numpy"]
    claimed += [f for f in ("tensorrt", "onnx") if not getattr(op, f"{f}_missing_reason")]
    if op.recurrent is not None:
        claimed.append("expand")
    return tuple(claimed)


def missing_facets(op: type[Op]) -> list[str]:
    """The facets ``op`` claims but does not define."""
    return [facet for facet in claimed_facets(op) if not has_facet(op, facet)]


def register_op(cls: type[Op], *, override: bool = False) -> type[Op]:
    """Class decorator: registers ``cls`` under its Caffe type string (``override``: replacing
    the op registered under it; plugins go through ``ops.plugins.register_op``)."""
    if not cls.type or (cls.type in _REGISTRY and not override):
        raise ValueError(f"op type {cls.type!r} is empty or registered twice")
    if missing := missing_facets(cls):
        raise TypeError(f"op {cls.type} claims facets it does not define: {', '.join(missing)} "
                        "(define them, or give a tensorrt/onnx_missing_reason)")
    _REGISTRY[cls.type] = cls
    return cls


def snapshot_registry() -> dict[str, type[Op]]:
    """A copy of the registry, for ``restore_registry`` (a plugin load that fails, tests)."""
    return dict(_REGISTRY)


def restore_registry(snapshot: dict[str, type[Op]]) -> None:
    """The registry as ``snapshot_registry`` found it."""
    _REGISTRY.clear()
    _REGISTRY.update(snapshot)


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


#: The reason ``check_facet`` gives for an op that has no ``<facet>_missing_reason``.
_NO_FORM = {"tensorrt": "no TensorRT emission yet", "onnx": "no ONNX form yet"}


def check_facet(graph: Graph, facet: str, refusal: str) -> None:
    """Lists, in one error that starts with ``refusal``, every node (loop bodies included)
    whose op lacks ``facet`` ("tensorrt", "onnx"), by type with its ``<facet>_missing_reason``."""
    missing: dict[str, list[str]] = defaultdict(list)
    for node in graph.all_nodes():
        if not has_facet(get_op(node.op), facet):
            missing[node.op].append(node.name)
    if missing:
        listing = "; ".join(
            f"{op} ({', '.join(names)}): "
            f"{getattr(get_op(op), f'{facet}_missing_reason') or _NO_FORM[facet]}"
            for op, names in missing.items())
        raise UnsupportedLayerError(f"{refusal}: {listing}",
                                    "the rewritten graph",
                                    "cut them off with outputs=, give them that facet in a plugin "
                                    "(plugins=[...], docs/plugins.md), or report the layer type")


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


def trt_fixed_dims(node: Node, dims: Sequence[int], what: str, hint: str) -> tuple[int, ...]:
    """A TensorRT tensor's ``dims`` for a form built for one size of them, refused in one
    line where the network leaves one dynamic (-1): the engine would compute wrong sizes."""
    if min(dims, default=0) < 0:
        raise shape_error(node, f"{what} is dynamic (-1) in the TensorRT network", hint)
    return tuple(dims)


def onnx_fixed_dims(ctx: OnnxContext, node: Node, value: Value, axes: Sequence[int], what: str,
                    hint: str) -> tuple[int, ...]:
    """Dims ``axes`` of ``value`` for an ONNX form built for one size of them (a reshape to
    them, a constant table of them), refused in one line where the export's shape ranges
    make one of them vary: the model would fail or compute wrong sizes at other sizes."""
    dims = tuple(ctx.static_dim(value, axis) for axis in axes)
    if None in dims:
        raise shape_error(node, f"{what} is not fixed in the ONNX export", hint)
    return dims
