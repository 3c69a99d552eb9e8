"""The recurrent surgery as a pass: every recurrent node (an op with an ``expand`` facet: LSTM,
RNN, the fork's Lstm) is replaced by the primitive layers and the one Loop its facet builds
(ops/recurrent/expansion.py holds the equations written as layers)."""

from __future__ import annotations

from caffe_lstm.ir.graph import Graph
from caffe_lstm.ops import get_op
from caffe_lstm.ops.builder import NodeBuilder


def expand_recurrent(graph: Graph) -> bool:
    """Replaces every recurrent node of ``graph`` in place. Returns whether anything changed.

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
