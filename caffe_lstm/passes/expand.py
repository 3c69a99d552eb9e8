"""The expansion pass: every node of a type with an ``expand`` facet is replaced by the
primitive layers that facet builds — the recurrent layers LSTM, RNN and the fork's Lstm (one
Loop each; ops/recurrent/expansion.py holds their equations written as layers) and caffe_ocr's
fused DenseBlock (BatchNorm, Scale, ReLU, Convolution and Concat; ops/dense_block.py)."""

from __future__ import annotations

from collections.abc import Callable

from caffe_lstm.ir.graph import Graph, Node
from caffe_lstm.ops import get_op, has_facet
from caffe_lstm.ops.builder import NodeBuilder


def expand_layers(graph: Graph, keep: Callable[[Node], bool] | None = None) -> bool:
    """Replaces every expandable node of ``graph`` in place. Returns whether anything changed.

    ``keep`` picks nodes to leave whole (the ONNX export with ``--lstm-op native`` keeps the
    recurrent layers, whose ``onnx`` facet is ONNX's own LSTM/RNN operator).

    Postcondition: no node of a type with an ``expand`` facet remains, but those ``keep`` picks.
    """
    nodes, changed = [], False
    for node in graph.nodes:
        op = get_op(node.op)
        if not has_facet(op, "expand") or (keep is not None and keep(node)):
            nodes.append(node)
            continue
        scratch = Graph()
        op.expand(NodeBuilder(scratch, node.name, node.where), node)
        nodes.extend(scratch.nodes)
        changed = True
    graph.nodes = nodes
    return changed
