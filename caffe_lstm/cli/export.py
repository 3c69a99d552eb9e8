"""``caffe-lstm export``: a Caffe net to an ONNX model, each recurrence one ONNX Scan (or ONNX's
own LSTM/RNN operator with ``--lstm-op native``)."""

from __future__ import annotations

from pathlib import Path

import click

from caffe_lstm.cli.group import cli
from caffe_lstm.cli.options import (GlobalOptions, load, lstm_op_option, net_argument,
                                    opset_option, output_names, pass_options, say_auto_state,
                                    say_lstm_ops,
                                    selection_options,
                                    state_option, weights_option)
from caffe_lstm.cli.progress import progress_display
from caffe_lstm.options import BuildRequest, LstmOp, State


@cli.command()
@net_argument
@weights_option(required=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="The .onnx file to write (initializers of 2 GiB or more go to "
                   "OUTPUT.data beside it).")
@opset_option("The ONNX opset to write")
@state_option(*State, default=State.AUTO)
@lstm_op_option(LstmOp.SCAN)
@selection_options(ranges="Make the dims of an input that vary symbolic (dim_params), e.g. "
                          "data:1x1x64:20x1x64:400x1x64 (repeatable).")
@pass_options
def export(options: GlobalOptions, net: Path, weights: Path, output: Path, opset: int,
           shapes: dict, recurrent_state: str, lstm_op: str, outputs: str, phase: str,
           stages: tuple[str, ...]) -> None:
    """Write an ONNX model: every recurrent layer becomes one Scan over the time axis (or,
    with --lstm-op native, ONNX's own LSTM/RNN operator where that is exact; with auto, that
    operator where exact and a Scan elsewhere, each layer's choice printed).

    Inputs and outputs keep the Caffe blob names; the layers inside keep the rewritten graph's
    names (lstm1/gate_input), so Netron shows where each came from. onnxruntime runs it
    (`run --backend onnxruntime --onnx MODEL.onnx`); TensorRT builds it
    (`trtexec --onnx=MODEL.onnx`).
    """
    request = BuildRequest(state=recurrent_state, opset=opset, profiles=shapes,
                           outputs=output_names(outputs), lstm_op=lstm_op)  # checked first
    loaded = load(net, weights, outputs, phase, stages)
    with progress_display(options) as progress:
        exported = loaded.export_onnx(output, request=request, progress=progress)
    extra = f" and {exported.data}" if exported.data is not None else ""
    options.say(f"wrote {output}{extra} (opset {exported.opset}, {exported.nodes} nodes)")
    say_auto_state(options, exported.facts)
    options.say("inputs: " + ", ".join(f"{name} {_dims(dims)}"
                                       for name, dims in exported.inputs.items()))
    options.say("outputs: " + ", ".join(f"{name} {_dims(dims)}"
                                        for name, dims in exported.outputs.items()))
    if lstm_op == LstmOp.AUTO:
        say_lstm_ops(options, loaded, lstm_op, recurrent_state)


def _dims(dims: tuple) -> str:
    return "(" + ", ".join(str(d) for d in dims) + ")"
