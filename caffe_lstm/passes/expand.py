"""The expansion pass: every node of a type with an ``expand`` facet is replaced by the
primitive layers that facet builds — the recurrent layers LSTM, RNN and the fork's Lstm (one
Loop each; ops/recurrent/expansion.py holds their equations written as layers) and caffe_ocr's
fused DenseBlock (BatchNorm, Scale, ReLU, Convolution and Concat; ops/dense_block.py)."""

from __future__ import annotations

from caffe_lstm.ir.graph import Graph
from caffe_lstm.ops import get_op
from caffe_lstm.ops.builder import NodeBuilder


def expand_layers(graph: Graph) -> bool:
    """Replaces every expandable node of ``graph`` in place. Returns whether anything changed.

    Postcondition: no node of a type with an ``expand`` facet remains.
    """
    nodes, changed = [], False
    for node in graph.nodes:
        expand = get_op(node.op).expand
        if expand is None:
            nodes.append(node)
            continue
        scratch = Graph()
        expand(NodeBuilder(scratch, node.name, node.where), node)
        nodes.extend(scratch.nodes)
        changed = True
    graph.nodes = nodes
    return changed
