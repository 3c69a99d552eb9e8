"""Dead-node removal: nodes none of whose outputs is used or a net output."""

from __future__ import annotations

from caffe_lstm.ir.graph import Graph


def remove_dead_nodes(graph: Graph) -> bool:
    """Drops dead nodes, last to first so that chains disappear in one walk."""
    live = {id(v) for v in graph.outputs}
    kept = []
    for node in reversed(graph.nodes):
        if any(id(v) in live for v in node.outputs):
            kept.append(node)
            live.update(id(v) for v in node.inputs)
    changed = len(kept) != len(graph.nodes)
    graph.nodes = kept[::-1]
    return changed
