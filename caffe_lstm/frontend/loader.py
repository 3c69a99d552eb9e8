"""The frontend's entry point: prototxt (+ caffemodel) -> a shaped IR graph with weights."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Sequence

from caffe_lstm.analysis.limits import check_memory
from caffe_lstm.analysis.shapes import infer_shapes
from caffe_lstm.frontend.caffemodel import read_caffemodel
from caffe_lstm.frontend.importer import import_layers
from caffe_lstm.frontend.netstate import LayerSelection, filter_layers
from caffe_lstm.frontend.prototxt import read_prototxt
from caffe_lstm.frontend.upgrade import upgrade_net
from caffe_lstm.frontend.weights import attach_weights
from caffe_lstm.ir.graph import Graph


@dataclass
class LoadedNet:
    """A loaded net: its graph, and the layers that need weights the caffemodel lacks."""

    graph: Graph
    missing_weights: list[str] = field(default_factory=list)


def load_net(prototxt: str | Path, weights: str | Path | None = None, *,
             selection: LayerSelection = LayerSelection(),
             outputs: Sequence[str] = ()) -> LoadedNet:
    """Reads, upgrades, filters, imports and shapes a net, then attaches its weights.

    Args:
        prototxt: the net definition.
        weights: the trained .caffemodel, or None (weights stay empty; shapes still known).
        selection: the phase and stages that select layers (Caffe's NetState).
        outputs: blob names to make the outputs (layers not needed for them are dropped).

    Raises:
        CaffeLstmError: an unreadable or invalid net or caffemodel, or a net whose blobs need
            more memory than ``analysis.limits.max_bytes()``.
    """
    net, lines = read_prototxt(prototxt)
    head, layers = upgrade_net(net, lines, str(prototxt))
    layers = filter_layers(layers, selection, str(prototxt))
    graph = import_layers(layers, str(prototxt), outputs, name=head.name)
    infer_shapes(graph)
    check_memory(graph, str(prototxt))  # before any weight or input of these shapes exists
    missing: list[str] = []
    if weights is not None:
        missing = attach_weights(graph, read_caffemodel(weights), weights)
    return LoadedNet(graph, missing)


def layer_types(prototxt: str | Path) -> dict[str, str]:
    """Layer name -> type for every layer of the prototxt, whatever its phase."""
    _, layers = upgrade_net(*read_prototxt(prototxt), str(prototxt))
    return {source.layer.name: source.layer.type for source in layers}
