"""Attaching caffemodel blobs to the graph's weight values, by layer name as Caffe does."""

from __future__ import annotations

from pathlib import Path
from collections.abc import Sequence

from caffe_lstm.errors import ModelLoadError
from caffe_lstm.frontend.caffemodel import LayerBlobs
from caffe_lstm.ir.graph import Graph, Node


def attach_weights(graph: Graph, layers: Sequence[LayerBlobs], path: str | Path) -> list[str]:
    """Gives every node with learnable blobs the data of the same-named caffemodel layer.

    Caffe matches by layer name only (the first layer with the name), requires the same number of
    blobs, and applies its legacy 4-D shape rule; layers of the file that the net does not have
    are ignored. Nodes inside loop bodies get theirs the same way (their names are unique in
    the net).

    Returns:
        Names of the nodes that need weights but whose layer is not in the file.

    Raises:
        ModelLoadError: a blob count or shape that does not fit the layer.
    """
    by_name: dict[str, LayerBlobs] = {}
    for layer in layers:
        by_name.setdefault(layer.name, layer)
    missing = []
    for node in graph.all_nodes():
        if not node.weights:
            continue
        if node.name not in by_name:
            missing.append(node.name)
            continue
        _attach(node, by_name[node.name], path)
    return missing


def _attach(node: Node, layer: LayerBlobs, path: str | Path) -> None:
    if len(layer.blobs) != len(node.weights):
        raise ModelLoadError(
            f"the caffemodel has {len(layer.blobs)} blobs for this layer, the net needs "
            f"{len(node.weights)} ({', '.join(_describe(v) for v in node.weights)})",
            f"{node.label}, weights {path}",
            "check that the weights were trained for this prototxt")
    for index, (value, blob) in enumerate(zip(node.weights, layer.blobs)):
        if not blob.fits(value.shape):
            raise ModelLoadError(
                f"blob {index} has shape {blob.shape}, the net needs {_describe(value)}",
                f"{node.label}, weights {path}",
                "check that the weights were trained for this prototxt")
        value.data = blob.array(value.shape)


def _describe(value) -> str:
    return f"{value.name.rsplit('/', 1)[-1]} {tuple(value.shape)}"
