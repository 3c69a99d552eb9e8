"""Editing a caffemodel: a copy of it with one layer's blobs replaced (``weights import``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from caffe_lstm.frontend.caffemodel import LayerBlobs, read_caffemodel
from caffe_lstm.frontend.caffe_writer import write_caffemodel
from caffe_lstm.frontend.loader import layer_types
from caffe_lstm.ir.graph import Graph, Node


def write_with_layer_replaced(output: str | Path, weights: str | Path, prototxt: str | Path,
                              graph: Graph, target: Node, new_blobs: list[np.ndarray]) -> int:
    """Writes ``output``: the caffemodel ``weights`` (the net ``graph`` was loaded from, with
    ``prototxt``) with ``target``'s blobs replaced by ``new_blobs``. Returns the number of the
    other layers copied."""
    types = layer_types(prototxt) | {node.name: node.op for node in graph.all_nodes()}
    layers = replace_layer(read_caffemodel(weights), graph, target, new_blobs, types)
    write_caffemodel(output, layers, net_name=graph.name)
    return len(layers) - 1


def replace_layer(stored: list[LayerBlobs], graph: Graph, target: Node,
                  new_blobs: list[np.ndarray], types: dict[str, str]
                  ) -> list[tuple[str, str, list[np.ndarray]]]:
    """Every layer of the caffemodel in file order, ``target``'s blobs replaced (or appended
    when the file lacks it).

    Layers of the net keep the blobs loaded for them, reshaped to the net's shapes (a legacy
    4-D blob becomes e.g. (4H, I)); Caffe reads only the first layer of a name, so later
    duplicates and layers the net does not use keep their stored dims.
    """
    loaded = {node.name: node for node in graph.all_nodes() if node.weights}
    layers, seen = [], set()
    for layer in stored:
        first = layer.name not in seen
        seen.add(layer.name)
        if first and layer.name == target.name:
            blobs = new_blobs
        elif first and layer.name in loaded:
            blobs = [value.data for value in loaded[layer.name].weights]
        else:
            blobs = [blob.data.reshape(blob.shape) for blob in layer.blobs]
        layers.append((layer.name, types.get(layer.name, ""), blobs))
    if target.name not in seen:
        layers.append((target.name, target.op, new_blobs))
    return layers
