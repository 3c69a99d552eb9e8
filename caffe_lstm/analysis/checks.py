"""What a loaded net must have before something is produced from it: layers to compute, and
the weights of every layer that needs them."""

from __future__ import annotations

from collections.abc import Sequence

from caffe_lstm.errors import GraphError, ModelLoadError
from caffe_lstm.ir.graph import Graph


def require_layers(graph: Graph, where: str) -> None:
    """Refuses a net with nothing to compute: no layers, or none left for its outputs (the
    outputs asked for are net inputs). ``where``: the net's file."""
    if graph.nodes:
        return
    if graph.outputs:
        raise GraphError(f"nothing is left to compute: the outputs "
                         f"{', '.join(v.name for v in graph.outputs)} are net inputs", where,
                         "name blobs that layers compute in outputs=")
    raise GraphError("the net has no layers to compute", where,
                     "check that this is the net definition, with its layers")


def require_weights(missing: Sequence[str], where: str, purpose: str) -> None:
    """Refuses to ``purpose`` (e.g. "build an engine") when layers ``missing`` have no weights
    in the caffemodel (``where``)."""
    if missing:
        raise ModelLoadError(
            f"the caffemodel has no weights for layer(s) {', '.join(missing)}", where,
            f"to {purpose}, pass the caffemodel trained for this prototxt (or make "
            "synthetic ones with `caffe-lstm weights init`)")
