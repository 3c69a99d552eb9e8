"""Seeded synthetic weights for every learnable layer of a net (to try a pipeline early)."""

from __future__ import annotations

import numpy as np

from caffe_lstm.ir.graph import Graph, Node
from caffe_lstm.ops import get_op


def synthetic_weights(graph: Graph, seed: int, scale: float = 0.5) -> list[
        tuple[str, str, list[np.ndarray]]]:
    """``(layer name, type, blobs)`` for every node with learnable blobs (loop bodies too).

    Values are uniform in [-scale, scale), non-symmetric, from one seeded generator walked in
    node order, so the same net and seed always give the same file.
    """
    rng = np.random.default_rng(seed)
    return [(node.name, node.op, _blobs(node, rng, scale))
            for node in graph.all_nodes() if node.weights]


def _blobs(node: Node, rng: np.random.Generator, scale: float) -> list[np.ndarray]:
    """The op's own synthetic blobs where it has a rule, else uniform noise."""
    blobs = get_op(node.op).synthetic(node, rng, scale)
    if blobs is not None:
        return [np.asarray(b, np.float32) for b in blobs]
    return [rng.uniform(-scale, scale, size=v.shape).astype(np.float32) for v in node.weights]
