"""``caffe-lstm weights``: one LSTM layer's weights to and from other frameworks' layouts
(``export``, ``import``), and seeded synthetic weights for a whole net (``init``)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

import click
import numpy as np

from caffe_lstm.cli import cli
from caffe_lstm.cli.options import (
    AppState,
    load,
    net_argument,
    pass_state,
    selection_options,
    weights_option,
)
from caffe_lstm.errors import CaffeLstmError, ModelLoadError
from caffe_lstm.files import load_npz, save_npz
from caffe_lstm.frontend.caffemodel import LayerBlobs, read_caffemodel
from caffe_lstm.frontend.caffemodel_writer import write_caffemodel
from caffe_lstm.frontend.prototxt import read_prototxt
from caffe_lstm.frontend.upgrade import upgrade_net
from caffe_lstm.ir.graph import Graph, Node
from caffe_lstm.layouts import (
    LAYOUTS,
    CaffeLstmBlobs,
    LayoutError,
    blobs_of_layer,
    import_arrays,
    layer_arrays,
    zeros_like_layer,
)
from caffe_lstm.ops.recurrent import LstmVariant
from caffe_lstm.synthetic import synthetic_weights

#: The layer types whose weights have layouts: Caffe's LSTM and the junhyukoh fork's Lstm.
LSTM_TYPES = ("LSTM", "Lstm")

_OUTPUT_FILE = click.Path(dir_okay=False, path_type=Path)


def _layer_option(func):
    return click.option("--layer", required=True, metavar="NAME",
                        help="The LSTM layer, by its name in the prototxt.")(func)


def _layout_option(func):
    return click.option(
        "--layout", required=True, type=click.Choice(list(LAYOUTS)),
        help="The framework's layout: caffe, pytorch (nn.LSTM state_dict), onnx (LSTM node "
             "W/R/B/P), keras (LSTM), keras-cudnn (legacy CuDNNLSTM), cudnn (8 matrices, 8 "
             "biases), tf (LSTMCell/LSTMBlockCell built with forget_bias=0).")(func)


@cli.group()
def weights() -> None:
    """Move one LSTM layer's weights to and from other frameworks, or make synthetic ones."""


@weights.command("export")
@net_argument
@weights_option(required=True)
@selection_options
@_layer_option
@_layout_option
@click.option("-o", "--output", required=True, type=_OUTPUT_FILE,
              help="The arrays (.npz), under the framework's own names.")
@pass_state
def export_command(state: AppState, net: Path, weights: Path, outputs: str, phase: str,
                   stages: tuple[str, ...], layer: str, layout: str, output: Path) -> None:
    """Write one LSTM layer's weights in another framework's layout (.npz)."""
    loaded = load(net, weights, outputs, phase, stages)
    node = _lstm_layer(loaded.graph, layer, net)
    if node.name in loaded.missing_weights:
        raise ModelLoadError("the caffemodel has no weights for this layer",
                             f"{node.label}, weights {weights}",
                             "check that -w holds the weights of this net")
    with _at_layer(node):
        arrays = LAYOUTS[layout].export(_layer_blobs(node, [v.data for v in node.weights]))
    save_npz(output, arrays)
    names = ", ".join(f"{name} {array.shape}" for name, array in arrays.items())
    state.say(f"wrote {len(arrays)} array(s) of layer '{node.name}' ({layout} layout) to "
              f"{output}: {names}")


@weights.command("import")
@net_argument
@weights_option(required=True)
@selection_options
@_layer_option
@_layout_option
@click.option("--from", "source", required=True, metavar="IN.npz",
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The arrays, named as `weights export` names them for this layout.")
@click.option("-o", "--output", required=True, type=_OUTPUT_FILE,
              help="The new caffemodel: a copy of -w with this layer's blobs replaced.")
@pass_state
def import_command(state: AppState, net: Path, weights: Path, outputs: str, phase: str,
                   stages: tuple[str, ...], layer: str, layout: str, source: Path,
                   output: Path) -> None:
    """Replace one LSTM layer's weights with arrays in another framework's layout.

    Two-bias layouts are summed into Caffe's one bias. Every other layer is copied from -w.
    """
    loaded = load(net, weights, outputs, phase, stages)
    node = _lstm_layer(loaded.graph, layer, net)
    template = zeros_like_layer([v.shape for v in node.weights], node.op, *_variant(node))
    with _at_layer(node, f"arrays {source}"):
        blobs = import_arrays(LAYOUTS[layout], load_npz(source), template)
    layers = _replace_layer(read_caffemodel(weights), loaded.graph, node,
                            layer_arrays(node.op, blobs), _layer_types(net, loaded.graph))
    write_caffemodel(output, layers, net_name=loaded.graph.name)
    state.say(f"wrote {output}: layer '{node.name}' from {source} ({layout} layout), "
              f"{len(layers) - 1} other layer(s) copied from {weights}")


@weights.command("init")
@net_argument
@selection_options
@click.option("-o", "--output", required=True, type=_OUTPUT_FILE,
              help="The caffemodel to write.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the weights: the same net and seed give the same file.")
@pass_state
def init_command(state: AppState, net: Path, outputs: str, phase: str, stages: tuple[str, ...],
                 output: Path, seed: int) -> None:
    """Write seeded synthetic weights for every learnable layer of the net.

    Values are uniform in [-0.5, 0.5), so a pipeline can be tried before real weights exist.
    """
    graph = load(net, None, outputs, phase, stages).graph
    layers = synthetic_weights(graph, seed)
    write_caffemodel(output, layers, net_name=graph.name)
    state.say(f"wrote synthetic weights (seed {seed}) for {len(layers)} layer(s) to {output}")


# ---- helpers ----------------------------------------------------------------------------------


def _lstm_layer(graph: Graph, name: str, net: Path) -> Node:
    """The LSTM node called ``name``, or an error listing the net's LSTM layers."""
    node = graph.node(name)
    lstms = [n.name for n in graph.nodes if n.op in LSTM_TYPES]
    hint = (f"the LSTM layers of this net: {', '.join(lstms)}" if lstms
            else "this net has no LSTM layer")
    if node is None:
        raise CaffeLstmError(f"--layer: the net has no LSTM layer named '{name}'", str(net),
                             hint)
    if node.op not in LSTM_TYPES:
        raise CaffeLstmError("--layer must name an LSTM layer", node.label, hint)
    return node


def _variant(node: Node) -> tuple[bool, int]:
    """(peephole, num_proj) of an LSTM node (the fork's Lstm has neither)."""
    variant = LstmVariant.of(node)
    return variant.peephole, variant.num_proj


def _layer_blobs(node: Node, arrays: list[np.ndarray]) -> CaffeLstmBlobs:
    return blobs_of_layer(node.op, arrays, *_variant(node))


@contextlib.contextmanager
def _at_layer(node: Node, detail: str = "") -> Iterator[None]:
    """Gives a LayoutError raised inside the layer's name (and ``detail``) as its ``where``."""
    try:
        yield
    except LayoutError as exc:
        where = ", ".join(part for part in (node.label, detail) if part)
        raise LayoutError(exc.what, where, exc.hint) from None


def _layer_types(net: Path, graph: Graph) -> dict[str, str]:
    """Layer name -> type for every layer of the prototxt (any phase) and of the graph."""
    _, layers = upgrade_net(*read_prototxt(net), str(net))
    types = {source.layer.name: source.layer.type for source in layers}
    return types | {node.name: node.op for node in graph.all_nodes()}


def _replace_layer(stored: list[LayerBlobs], graph: Graph, target: Node,
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
