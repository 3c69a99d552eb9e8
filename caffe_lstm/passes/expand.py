"""The expansion pass: every node of a type with an ``expand`` facet is replaced by the
primitive layers that facet builds — the recurrent layers LSTM, RNN and the fork's Lstm (one
Loop each; ops/recurrent/expansion.py holds their equations written as layers) and caffe_ocr's
fused DenseBlock (BatchNorm, Scale, ReLU, Convolution and Concat; ops/dense_block.py)."""

from __future__ import annotations

from collections.abc import Callable

from caffe_lstm.ir.graph import Graph, Node
from caffe_lstm.ops import PluginError, get_op, has_facet
from caffe_lstm.ops.plugins import plugin_of
from caffe_lstm.ops.builder import NodeBuilder
from caffe_lstm.passes.plugin_checks import check_plugin_expansion


#: How deep expansions may nest (a layer expanding into layers that expand...): deeper is an
#: expansion that never ends, a bug of the op that started it.
MAX_NESTING = 8


def expand_layers(graph: Graph, keep: Callable[[Node], bool] | None = None,
                  depth: int = 0) -> bool:
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
        scratch = _expanded(node)
        # an expansion may itself hold expandable layers (a plugin's layer written as LSTMs)
        _expand_nested(scratch, node, depth)
        nodes.extend(scratch.nodes)
        changed = True
    graph.nodes = nodes
    return changed


def _expanded(node: Node) -> Graph:
    """The layers ``node``'s expand facet builds (a plugin's, checked by their shapes)."""
    scratch = Graph()
    builder = NodeBuilder(scratch, node.name, node.where)
    get_op(node.op).expand(builder, node)
    plugin = plugin_of(node.op)
    if plugin is not None:
        check_plugin_expansion(scratch, node, builder.sites, plugin)
        _mark_built(scratch, builder.sites, f"the {plugin.label}", node.label)
    return scratch


def _mark_built(graph: Graph, sites: dict[int, str], plugin: str, layer: str) -> None:
    """Notes on each layer a plugin's expansion built (step bodies included) the plugin and its
    ``b.add`` call, for the built-in facets' faults on it (ops.plugins.built_fault)."""
    for built in graph.nodes:
        if id(built) in sites:
            built.built_by, built.built_for = f"{plugin} at {sites[id(built)]}", layer
        for body in built.subgraphs:
            _mark_built(body, sites, plugin, layer)


def _expand_nested(scratch: Graph, node: Node, depth: int) -> None:
    if not any(has_facet(get_op(n.op), "expand") for n in scratch.nodes):
        return
    if depth >= MAX_NESTING:  # only a plugin's expand can do this (built-ins nest once)
        plugin = plugin_of(node.op)
        owner = f"the {plugin.label}" if plugin is not None else f"layer type {node.op}"
        raise PluginError(f"the expansion by {owner} nests more than {MAX_NESTING} levels",
                          node.label, "an expand facet must not produce its own type again")
    expand_layers(scratch, depth=depth + 1)
