"""Shape profiles: the (min, opt, max) shapes of dynamic inputs, checked against the net.

A profile must fit every layer at its MIN and at its MAX (weights fix some dims). The exposed
state inputs of recurrent layers (``--state io``) that a profile does not name follow their
layer: at each of MIN, OPT and MAX a state takes the shape its layer gives it at the shapes its
own bottoms get there (shape inference through the front end: a CNN's images (T·N, C, H, W)
reshaped to (T, N, I) give N, never a net input's axis).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence

from caffe_lstm.analysis.shapes import ShapeInference, infer_shapes
from caffe_lstm.errors import ShapeError
from caffe_lstm.ir.graph import Graph, Node, Shape, Value
from caffe_lstm.ops import recurrent_spec
from caffe_lstm.options import Profile


def checked_profiles(graph: Graph, shapes: Mapping[str, Sequence[Sequence[int]]] | None
                     ) -> dict[str, Profile]:
    """The profiles of ``shapes`` (input name -> (min, opt, max)) for every net input of
    ``graph``, checked against the layers at MIN and MAX; ``graph`` is left shaped for OPT.
    Without ``shapes``: no profiles (static shapes). Exposed states not in ``shapes`` follow
    their layer's bottoms (the module's rule); other inputs keep their shape.

    Raises:
        ShapeError: a name that is not a net input, a rank that differs from the input's, or
            sizes a layer refuses.
    """
    given = {name: Profile(*(tuple(dims) for dims in ranges))
             for name, ranges in (shapes or {}).items()}
    _check_names(graph, given)
    if not given:
        return {}
    followed: dict[str, list[Shape]] = {}
    for _ in shape_at_profile_sizes(graph, given):
        for name, shape in state_inputs(graph, given).items():
            followed.setdefault(name, []).append(shape)
    states = {name: _as_profile(sizes) for name, sizes in followed.items()}
    return {value.name: given.get(value.name) or states.get(value.name)
            or Profile(value.shape, value.shape, value.shape) for value in graph.inputs}


def _check_names(graph: Graph, shapes: Mapping[str, Profile]) -> None:
    inputs = {v.name: v for v in graph.inputs}
    for name, (low, _, _) in shapes.items():
        if name not in inputs:
            raise ShapeError(f"shapes= names '{name}', which is not a net input",
                             "shapes=", f"the net inputs are {', '.join(inputs)}")
        if len(low) != len(inputs[name].shape):
            raise ShapeError(f"shapes[{name!r}] has {len(low)} dims, the input has "
                             f"{len(inputs[name].shape)} {inputs[name].shape}", "shapes=",
                             "give one dim per axis")


def _as_profile(sizes: list[Shape]) -> Profile:
    """MIN, MAX, OPT (the order shape_at_profile_sizes walks them) as a Profile."""
    low, high, opt = sizes
    return Profile(low, opt, high)


def state_inputs(graph: Graph, given: Collection[str] = ()) -> dict[str, Shape]:
    """The exposed state inputs of ``graph``'s recurrent layers that are net inputs and not in
    ``given``, with their current shapes (after ``follow_states``: the ones their layer gives)."""
    inputs = {id(value) for value in graph.inputs}
    return {value.name: value.shape for node in graph.nodes
            for value in _state_bottoms(node)
            if id(value) in inputs and value.name not in given}


def _state_bottoms(node: Node) -> list[Value]:
    """The initial-state bottoms of an exposed recurrent layer (none for any other node)."""
    spec = recurrent_spec(node.op)
    if spec is None or not spec.can_expose(node) or not spec.is_exposed(node):
        return []
    return node.inputs[len(node.inputs) - len(spec.states):]


def follow_states(graph: Graph, given: Collection[str] = ()) -> Graph:
    """``infer_shapes``, except that each exposed state input not in ``given`` first takes the
    shape its layer gives it at the shapes the layer's other bottoms have just got (the rule
    of ``RecurrentSpec.expose``), instead of its own."""
    return infer_shapes(graph, walker=_FollowingStates(given))


class _FollowingStates(ShapeInference):
    """Shape inference that sets the free state bottoms of an exposed recurrent layer from its
    other bottoms before the layer's own ``infer`` checks them."""

    def __init__(self, given: Collection[str]) -> None:
        super().__init__()
        self.given = set(given)

    def visit(self, node: Node, shapes: list[Shape | None]) -> list[Shape | None]:
        states = _state_bottoms(node)
        if states:
            first = len(node.inputs) - len(states)
            for offset, (value, shape) in enumerate(zip(states, _expected_states(node))):
                if value.producer is None and value.name not in self.given:
                    value.shape = shapes[first + offset] = shape
        return super().visit(node, shapes)


def _expected_states(node: Node) -> list[Shape]:
    """The initial-state shapes ``RecurrentSpec.expose`` gives ``node`` at its bottoms' current
    shapes (asked of a stand-in without the states, so the rule stays the spec's)."""
    spec = recurrent_spec(node.op)
    count = len(spec.states)
    stand_in = Node(node.name, node.op, list(node.inputs[:-count]), [],
                    {**node.attrs, "expose_hidden": False}, origin=node.origin)
    initial, _ = spec.expose(stand_in)
    return [value.shape for value in initial]


def shape_at_profile_sizes(graph: Graph, profiles: Mapping[str, Sequence[Sequence[int]]]
                           ) -> Iterator[str]:
    """Shapes ``graph`` at the MIN, the MAX and then the OPT sizes of ``profiles`` (input name
    -> (min, opt, max)), yielding "MIN", "MAX", "OPT" after each; the graph is left at OPT.
    Exposed states that ``profiles`` does not name follow their layer (``follow_states``).

    Raises:
        ShapeError: a layer refuses one of the sizes (e.g. weights fix a feature dim); the
            message says which.
    """
    for which in ("MIN", "MAX", "OPT"):
        shape_at(graph, profiles, which)
        yield which


#: Where each of a profile's sizes is in its (min, opt, max).
_PROFILE_INDEX = {"MIN": 0, "OPT": 1, "MAX": 2}


def shape_at(graph: Graph, profiles: Mapping[str, Sequence[Sequence[int]]], which: str) -> None:
    """Shapes ``graph`` at the ``which`` ("MIN", "OPT" or "MAX") sizes of ``profiles``.

    Raises:
        ShapeError: a layer refuses those sizes; the message says which.
    """
    for value in graph.inputs:
        if value.name in profiles:
            value.shape = tuple(profiles[value.name][_PROFILE_INDEX[which]])
    try:
        follow_states(graph, profiles)
    except ShapeError as exc:
        raise ShapeError(f"at the shapes= {which} sizes: {exc.what}", exc.where,
                         "keep dims that the layers or weights fix out of shapes= ranges"
                         ) from None
