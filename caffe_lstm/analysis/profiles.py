"""Shape profiles: the (min, opt, max) shapes of dynamic inputs, checked against the net.

A profile must fit every layer at its MIN and at its MAX (weights fix some dims); exposed state
inputs ``(1, N, H)`` get a profile that follows the batch range of the dynamic inputs.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from caffe_lstm.analysis.shapes import infer_shapes
from caffe_lstm.errors import ShapeError
from caffe_lstm.ir.graph import Graph
from caffe_lstm.options import Profile


def checked_profiles(graph: Graph, shapes: Mapping[str, Sequence[Sequence[int]]] | None
                     ) -> dict[str, Profile]:
    """The profiles of ``shapes`` (input name -> (min, opt, max)) for every net input of
    ``graph``, checked against the layers at MIN and MAX; ``graph`` is left shaped for OPT.
    Without ``shapes``: no profiles (static shapes).

    Raises:
        ShapeError: a name that is not a net input, a rank that differs from the input's, or
            sizes a layer refuses.
    """
    profiles = input_profiles(graph, {name: Profile(*(tuple(dims) for dims in ranges))
                                      for name, ranges in (shapes or {}).items()})
    for _ in shape_at_profile_sizes(graph, profiles):
        pass
    return profiles


def input_profiles(graph: Graph, shapes: Mapping[str, Profile]) -> dict[str, Profile]:
    """``shapes`` checked against the net inputs, plus matching ranges for the other inputs:
    exposed state inputs (1, N, H) follow the batch range of the dynamic inputs."""
    inputs = {v.name: v for v in graph.inputs}
    for name, (low, _, _) in shapes.items():
        if name not in inputs:
            raise ShapeError(f"shapes= names '{name}', which is not a net input",
                             "shapes=", f"the net inputs are {', '.join(inputs)}")
        if len(low) != len(inputs[name].shape):
            raise ShapeError(f"shapes[{name!r}] has {len(low)} dims, the input has "
                             f"{len(inputs[name].shape)} {inputs[name].shape}", "shapes=",
                             "give one dim per axis")
    profiles = dict(shapes)
    batch = next(((p[0][1], p[1][1], p[2][1]) for p in shapes.values() if len(p[0]) > 1), None)
    for value in graph.inputs:
        if value.name not in profiles and shapes:
            profiles[value.name] = state_profile(value.shape, batch)
    return profiles


def state_profile(shape: tuple[int, ...], batch: tuple[int, int, int] | None) -> Profile:
    """A static input keeps its shape; a (1, N, H) state input follows the batch range."""
    if batch is None or len(shape) != 3 or shape[0] != 1:
        return Profile(shape, shape, shape)
    return Profile(*((1, n, shape[2]) for n in batch))


def shape_at_profile_sizes(graph: Graph, profiles: Mapping[str, Sequence[Sequence[int]]]
                           ) -> Iterator[str]:
    """Shapes ``graph`` at the MIN, the MAX and then the OPT sizes of ``profiles`` (input name
    -> (min, opt, max)), yielding "MIN", "MAX", "OPT" after each; the graph is left at OPT.

    Raises:
        ShapeError: a layer refuses one of the sizes (e.g. weights fix a feature dim); the
            message says which.
    """
    for index, which in ((0, "MIN"), (2, "MAX"), (1, "OPT")):
        for value in graph.inputs:
            if value.name in profiles:
                value.shape = tuple(profiles[value.name][index])
        try:
            infer_shapes(graph)
        except ShapeError as exc:
            raise ShapeError(f"at the shapes= {which} sizes: {exc.what}", exc.where,
                             "keep dims that the layers or weights fix out of shapes= ranges"
                             ) from None
        yield which
