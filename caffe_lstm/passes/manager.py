"""Runs passes by name; after each one the graph is verified and its shapes inferred again."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from caffe_lstm.analysis.shapes import infer_shapes
from caffe_lstm.ir.graph import Graph, Node
from caffe_lstm.analysis.verify import verify
from caffe_lstm.passes.expand import expand_layers
from caffe_lstm.passes.expose_state import expose_recurrent_state
from caffe_lstm.passes.unroll import unroll_loops

PASSES: dict[str, Callable[[Graph], bool]] = {
    "expose-state": expose_recurrent_state,
    "expand": expand_layers,
    # the pass's name while it expanded the recurrent layers only, kept for scripts
    "expand-recurrent": expand_layers,
    "unroll": unroll_loops,
}

#: What `run`, `rewrite`, `dot` and `verify` apply by default.
DEFAULT_PIPELINE = ("expand",)


def run_passes(graph: Graph, names: Sequence[str] = DEFAULT_PIPELINE,
               keep: Callable[[Node], bool] | None = None) -> Graph:
    """Applies the passes ``names`` in order to ``graph`` (in place) and returns it; the
    expansion leaves the nodes ``keep`` picks whole (``export --lstm-op native``)."""
    for name in names:
        run = PASSES[name]
        changed = run(graph, keep) if run is expand_layers and keep is not None else run(graph)
        if changed:
            verify(graph)
            infer_shapes(graph)
    return graph
