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

Adding a layer type touches one class; ``tests/test_registry.py`` checks that every
registered op has every facet.
"""

from __future__ import annotations

from typing import Any, ClassVar

from caffe_lstm.errors import ShapeError
from caffe_lstm.ir.graph import Node, Shape

_REGISTRY: dict[str, type[Op]] = {}


class Op:
    """Base class of the op facets. Subclasses set ``type`` and override what they need."""

    type: ClassVar[str] = ""
    #: The LayerParameter field the op reads its attributes from (``"inner_product_param"``).
    param: ClassVar[str | None] = None
    #: Allowed number of bottoms and of tops, as (min, max); max None = unbounded.
    n_bottoms: ClassVar[tuple[int, int | None]] = (1, 1)
    n_tops: ClassVar[tuple[int, int | None]] = (1, 1)

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


# ---- helpers shared by the op families -------------------------------------------------------


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
