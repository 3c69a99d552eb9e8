"""``caffe-lstm weights``: one LSTM layer's weights to and from other frameworks' layouts
(``export``, ``import``), and seeded synthetic weights for a whole net (``init``)."""

from __future__ import annotations

from pathlib import Path

import click

from caffe_lstm.cli.group import cli
from caffe_lstm.cli.options import (GlobalOptions, load, net_argument, pass_options,
                                    selection_options, weights_option)
from caffe_lstm.files import save_npz
from caffe_lstm.layouts import LAYOUTS

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
@pass_options
def export_command(options: GlobalOptions, net: Path, weights: Path, outputs: str, phase: str,
                   stages: tuple[str, ...], layer: str, layout: str, output: Path) -> None:
    """Write one LSTM layer's weights in another framework's layout (.npz)."""
    arrays = load(net, weights, outputs, phase, stages).export_weights(layer, layout)
    save_npz(output, arrays)
    names = ", ".join(f"{name} {array.shape}" for name, array in arrays.items())
    options.say(f"wrote {len(arrays)} array(s) of layer '{layer}' ({layout} layout) to "
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
@pass_options
def import_command(options: GlobalOptions, net: Path, weights: Path, outputs: str, phase: str,
                   stages: tuple[str, ...], layer: str, layout: str, source: Path,
                   output: Path) -> None:
    """Replace one LSTM layer's weights with arrays in another framework's layout.

    Two-bias layouts are summed into Caffe's one bias. Every other layer is copied from -w.
    """
    copied = load(net, weights, outputs, phase, stages).import_weights(layer, layout, source,
                                                                        output)
    options.say(f"wrote {output}: layer '{layer}' from {source} ({layout} layout), {copied} "
                f"other layer(s) copied from {weights}")


@weights.command("init")
@net_argument
@selection_options
@click.option("-o", "--output", required=True, type=_OUTPUT_FILE,
              help="The caffemodel to write.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the weights (and of the inputs they are scaled on): the same net "
                   "and seed give the same file.")
@click.option("--fillers", is_flag=True,
              help="Keep the weights as drawn (the prototxt's fillers as written), without "
                   "rescaling each layer's output to unit scale.")
@pass_options
def init_command(options: GlobalOptions, net: Path, outputs: str, phase: str,
                 stages: tuple[str, ...], output: Path, seed: int, fillers: bool) -> None:
    """Write seeded synthetic weights for every learnable layer of the net.

    Drawn from the prototxt's own fillers where it gives them, filled as Caffe fills them;
    elsewhere uniform in ±1/sqrt(fan_in). Then, layer by layer in graph order, each learnable
    layer's matrices are rescaled so that its output has unit standard deviation on the net's
    seeded random inputs (as LSUV initialisation does; recurrent layers keep theirs), so the
    outputs depend on the inputs as a trained net's do. So a pipeline can be tried before real
    weights exist.
    """
    count = load(net, None, outputs, phase, stages).write_synthetic_weights(output, seed,
                                                                             fillers=fillers)
    drawn = "as the fillers draw them" if fillers else "each layer's output at unit scale"
    options.say(f"wrote synthetic weights (seed {seed}, {drawn}) for {count} layer(s) to "
                f"{output}")
