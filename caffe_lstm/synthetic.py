"""Seeded synthetic weights for every learnable layer of a net (to try a pipeline early)."""

from __future__ import annotations

import numpy as np

from caffe_lstm.ir.graph import Graph


def synthetic_weights(graph: Graph, seed: int, scale: float = 0.5) -> list[
        tuple[str, str, list[np.ndarray]]]:
    """``(layer name, type, blobs)`` for every node with learnable blobs.

    Values are uniform in [-scale, scale), non-symmetric, from one seeded generator walked in
    node order, so the same net and seed always give the same file.
    """
    rng = np.random.default_rng(seed)
    return [
        (node.name, node.op,
         [rng.uniform(-scale, scale, size=v.shape).astype(np.float32) for v in node.weights])
        for node in graph.nodes if node.weights
    ]
