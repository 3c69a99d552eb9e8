"""``caffe-lstm export``: a Caffe net to an ONNX model, each recurrence one ONNX Scan (or ONNX's
own LSTM/RNN operator with ``--lstm-op native``)."""

from __future__ import annotations

from pathlib import Path

import click

from caffe_lstm.cli.group import cli
from caffe_lstm.cli.convert import shapes_option
from caffe_lstm.cli.options import (GlobalOptions, load, net_argument, pass_options,
                                    selection_options, weights_option)


@cli.command()
@net_argument
@weights_option(required=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="The .onnx file to write (initializers of 2 GiB or more go to "
                   "OUTPUT.data beside it).")
@click.option("--opset", type=int, default=17, show_default=True,
              help="The ONNX opset to write, 13 to 21.")
@shapes_option("Make the dims of an input that vary symbolic (dim_params), e.g. "
               "data:1x1x64:20x1x64:400x1x64 (repeatable).")
@click.option("--state", "recurrent_state", type=click.Choice(["auto", "zero", "io"]),
              default="auto", show_default=True,
              help="io: recurrent state as inputs <layer>/h_0, c_0 and outputs <layer>/h_T, c_T; "
                   "zero: each call starts from zero; auto: io when a cont input could be 1 at "
                   "t=0.")
@click.option("--lstm-op", "lstm_op", type=click.Choice(["scan", "native"]), default="scan",
              show_default=True,
              help="scan: each recurrent layer one Scan (any cont, every variant); native: "
                   "ONNX's own LSTM/RNN operator, and an error for a layer it would compute "
                   "differently (a cont input, x_static, CLIPPED_RELU, cell_clip, num_proj).")
@selection_options
@pass_options
def export(options: GlobalOptions, net: Path, weights: Path, output: Path, opset: int,
           shapes: dict, recurrent_state: str, lstm_op: str, outputs: str, phase: str,
           stages: tuple[str, ...]) -> None:
    """Write an ONNX model: every recurrent layer becomes one Scan over the time axis (or,
    with --lstm-op native, ONNX's own LSTM/RNN operator where that is exact).

    Inputs and outputs keep the Caffe blob names; the layers inside keep the rewritten graph's
    names (lstm1/gate_input), so Netron shows where each came from. onnxruntime runs it
    (`run --backend onnxruntime --onnx MODEL.onnx`); TensorRT builds it
    (`trtexec --onnx=MODEL.onnx`).
    """
    exported = load(net, weights, outputs, phase, stages).export_onnx(
        output, opset=opset, shapes=shapes, state=recurrent_state, lstm_op=lstm_op)
    extra = f" and {exported.data}" if exported.data is not None else ""
    options.say(f"wrote {output}{extra} (opset {exported.opset}, {exported.nodes} nodes)")
    options.say("inputs: " + ", ".join(f"{name} {_dims(dims)}"
                                       for name, dims in exported.inputs.items()))
    options.say("outputs: " + ", ".join(f"{name} {_dims(dims)}"
                                        for name, dims in exported.outputs.items()))


def _dims(dims: tuple) -> str:
    return "(" + ", ".join(str(d) for d in dims) + ")"
