"""A plain-data summary of a graph: what ``inspect`` prints as text or JSON."""

from __future__ import annotations

from typing import Any

from caffe_lstm.ir.graph import Graph, Node
from caffe_lstm.ops import recurrent_spec


def summarize(graph: Graph) -> dict[str, Any]:
    """``{"inputs": {name: shape}, "outputs": {name: shape}, "layers": [...],
    "recurrent": [...]}`` with shapes as lists of ints."""
    return {
        "inputs": {v.name: _shape(v.shape) for v in graph.inputs},
        "outputs": {v.name: _shape(v.shape) for v in graph.outputs},
        "layers": [_layer(node) for node in graph.nodes],
        "recurrent": [node.name for node in graph.nodes if recurrent_spec(node.op)],
    }


def _layer(node: Node) -> dict[str, Any]:
    """One layer; a Loop also lists its body's layers under ``body``."""
    layer = {
        "name": node.name,
        "type": node.op,
        "bottoms": [v.name for v in node.inputs],
        "tops": [v.name for v in node.outputs],
        "shapes": [_shape(v.shape) for v in node.outputs],
        "blobs": [_shape(v.shape) for v in node.weights],
    }
    if node.subgraphs:
        layer["body"] = [_layer(inner) for body in node.subgraphs for inner in body.nodes]
    return layer


def _shape(shape) -> list[int] | None:
    return None if shape is None else [int(d) for d in shape]
