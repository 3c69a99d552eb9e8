"""The frontend's entry point: prototxt (+ caffemodel) -> a shaped IR graph with weights."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from caffe_lstm.analysis.limits import check_memory
from caffe_lstm.analysis.shapes import infer_shapes
from caffe_lstm.errors import ShapeError
from caffe_lstm.frontend.caffemodel import read_caffemodel
from caffe_lstm.frontend.deploy import deploy_view
from caffe_lstm.frontend.fillers import filler_fields
from caffe_lstm.frontend.importer import check_supported, import_layers
from caffe_lstm.frontend.netstate import LayerSelection, check_selected_bottoms, filter_layers
from caffe_lstm.frontend.params import Params
from caffe_lstm.frontend.prototxt import read_prototxt
from caffe_lstm.frontend.unknown import SkippedField, check_converted_layers, skipped_fields
from caffe_lstm.frontend.upgrade import upgrade_net
from caffe_lstm.frontend.weights import attach_weights
from caffe_lstm.ir.graph import Graph
from caffe_lstm.ops.plugins import load_plugins
from caffe_lstm.ops.python_layer import bind_python_path


@dataclass
class LoadedNet:
    """A loaded net: its graph, the layers that need weights the caffemodel lacks, the notes
    on what loading changed (training layers dropped, data layers read as inputs), the unknown
    fields it skipped, and the net inputs whose shape is unknown (name -> their data layer)."""

    graph: Graph
    missing_weights: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: list[SkippedField] = field(default_factory=list)
    unshaped: dict[str, str] = field(default_factory=dict)


def load_net(prototxt: str | Path, weights: str | Path | None = None, *,
             selection: LayerSelection = LayerSelection(),
             outputs: Sequence[str] = (), shapes: Mapping[str, Sequence[int]] | None = None,
             allow_unknown_shapes: bool = False, plugins: Sequence[str | Path | type] = (),
             python_path: str | Path | None = None) -> LoadedNet:
    """Reads, upgrades, filters, imports and shapes a net, then attaches its weights.

    Args:
        prototxt: the net definition.
        weights: the trained .caffemodel, or None (weights stay empty; shapes still known).
        selection: the phase and stages that select layers (Caffe's NetState).
        outputs: blob names to make the outputs (layers not needed for them are dropped).
        shapes: net input name -> shape, replacing the prototxt's (or giving the shape a data
            layer leaves open).
        allow_unknown_shapes: keep going when a net input's shape is unknown (what ``inspect``
            shows as ``?``); otherwise that is an error naming the input.
        plugins: layer types from outside caffe-lstm (``.py`` files, modules, Op classes),
            loaded first (``ops.plugins.load_plugins``).
        python_path: the directory Python layers import their module from (user code is
            imported only when it is given).

    Raises:
        CaffeLstmError: an unreadable or invalid net or caffemodel, an unknown field that could
            change a converted layer, a net input without a shape, or a net whose blobs need
            more memory than ``analysis.limits.max_bytes()``.
    """
    file = str(prototxt)
    load_plugins(plugins)
    read = read_prototxt(prototxt)
    head, layers = upgrade_net(read.net, read.layers, file)
    selected = filter_layers(layers, selection, file)
    view = deploy_view(selected, outputs, shapes or {}, file)
    check_selected_bottoms(view.layers, layers, selected, selection, file)
    check_supported(view.layers, file, python_layers=python_path is not None)
    check_converted_layers(view.layers, file)
    graph = import_layers(view.layers, file, view.outputs, name=head.name,
                          python_layers=python_path is not None)
    bind_python_path(graph, python_path)
    unshaped = {v.name: view.unshaped[v.name] for v in graph.inputs if v.name in view.unshaped}
    if unshaped and not allow_unknown_shapes:
        raise unshaped_error(unshaped)
    infer_shapes(graph, allow_unknown=bool(unshaped))
    check_memory(graph, file)  # before any weight or input of these shapes exists
    missing: list[str] = []
    if weights is not None:
        missing = attach_weights(graph, read_caffemodel(weights), weights)
    converted = {id(source.layer) for source in view.layers}
    return LoadedNet(graph, missing, view.notes,
                     skipped_fields(layers, read.net_unknown, converted), unshaped)


def unshaped_error(unshaped: Mapping[str, str]) -> ShapeError:
    """The error for net inputs whose shape nothing gives: names them and their data layer."""
    where = next(iter(unshaped.values()))
    names = ", ".join(f"'{n}'" for n in unshaped)
    options = "shapes={" + ", ".join(f"{n!r}: DIMS" for n in unshaped) + "}"
    return ShapeError(
        f"the prototxt does not fix the shape of net input(s) {names} (read by a data layer)",
        where, f"give it with {options} (DIMS: the dims joined by 'x', like 10x3x227x227)")


def layer_types(prototxt: str | Path) -> dict[str, str]:
    """Layer name -> type for every layer of the prototxt, whatever its phase."""
    read = read_prototxt(prototxt)
    _, layers = upgrade_net(read.net, read.layers, str(prototxt))
    return {source.layer.name: source.layer.type for source in layers}


def layer_fillers(prototxt: str | Path) -> dict[str, dict[str, Params | None]]:
    """Layer name -> the filler fields of its param message (``fillers.filler_fields``), for
    every layer of the prototxt that has such fields, whatever its phase."""
    read = read_prototxt(prototxt)
    _, layers = upgrade_net(read.net, read.layers, str(prototxt))
    found: dict[str, dict[str, Params | None]] = {}
    for source in layers:
        fields = filler_fields(source.layer)
        if fields:
            found.setdefault(source.layer.name, fields)
    return found
