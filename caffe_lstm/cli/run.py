"""``caffe-lstm run``: execute a net on the CPU with numpy (or an engine on a GPU)."""

from __future__ import annotations

from pathlib import Path

import click
import numpy as np

from caffe_lstm.cli.group import cli
from caffe_lstm.cli.options import (GlobalOptions, backend_options, input_options, load,
                                    lstm_op_option, model_file, net_argument, pass_options,
                                    runtime_option, say_lstm_ops, selection_options,
                                    state_option, weights_option)
from caffe_lstm.cli.progress import progress_display
from caffe_lstm.cli.requires import require_onnxruntime
from caffe_lstm.files import arrays_from, save_npz
from caffe_lstm.options import LstmOp, State


@cli.command()
@net_argument
@weights_option(required=True)
@selection_options
@input_options
@state_option(State.ZERO, State.IO, default=None,
              shown_default="the model's own with --onnx or --engine, else zero (io with "
                            "--state-from)")
@click.option("--state-from", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              metavar="PREV.npz",
              help="Start from the final states of a previous `run --state io -o PREV.npz`: "
                   "its <layer>/h_T, c_T are this call's <layer>/h_0, c_0.")
@click.option("--original", is_flag=True,
              help="Execute recurrent layers from their equations instead of the rewritten graph.")
@backend_options
@runtime_option("The runtime the engine was built for;")
@lstm_op_option(LstmOp.AUTO, "How --backend onnxruntime without --onnx writes each recurrent "
                             "layer (listed with -v);")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write every net output to this .npz.")
@pass_options
def run(options: GlobalOptions, net: Path, weights: Path, outputs: str, phase: str,
        stages: tuple[str, ...], inputs_path: Path | None, seed: int,
        recurrent_state: str | None, state_from: Path | None, original: bool, backend: str,
        engine: Path | None, onnx_model: Path | None, runtime: str, lstm_op: str,
        output: Path | None) -> None:
    """Run the net with numpy (or an engine on a GPU); print or save its outputs.

    By default the rewritten graph runs (primitive layers and loops). Each run is one Caffe
    Forward call from zero recurrent state; with --state io the states are inputs and
    outputs, and --state-from carries them from the previous call's -o file.
    """
    model_file(backend, engine, onnx_model)
    if backend == "onnxruntime":
        require_onnxruntime()  # a missing onnxruntime fails before the net is read
    if state_from is not None and recurrent_state == State.ZERO:
        raise click.UsageError("--state-from goes with --state io")
    loaded = load(net, weights, outputs, phase, stages)
    inputs = inputs_path
    if recurrent_state == State.IO and state_from is None and not loaded.recurrent_layers:
        options.say("state: io has nothing to carry: this net has no recurrent layer")
    if state_from is not None:  # this call's initial states are the previous call's finals
        recurrent_state = State.IO
        inputs = {**(loaded.random_inputs(seed) if inputs_path is None
                     else arrays_from(inputs_path)), **loaded.carried_state(state_from)}
    if backend == "tensorrt":
        results = loaded.run_engine(engine, inputs, seed=seed, state=recurrent_state,
                                    runtime=runtime)
    elif backend == "onnxruntime":
        results = loaded.run_onnxruntime(inputs, seed=seed, state=recurrent_state,
                                         model=onnx_model, lstm_op=lstm_op)
        if onnx_model is None and options.verbose:
            say_lstm_ops(options, loaded, lstm_op, recurrent_state or State.ZERO)
    else:
        with progress_display(options) as progress:
            results = loaded.run(inputs, seed=seed, original=original,
                                 state=recurrent_state or State.ZERO, progress=progress)
    if output is not None:
        save_npz(output, results)
        options.say(f"wrote {len(results)} output(s) to {output}")
    if output is None or options.verbose:
        for name, array in results.items():
            options.say(_describe(name, array))


def _describe(name: str, array: np.ndarray) -> str:
    stats = (f"min {array.min():.6g}  max {array.max():.6g}  mean {array.mean():.6g}"
             if array.size else "empty")
    return f"{name}  {tuple(array.shape)}  {stats}"
