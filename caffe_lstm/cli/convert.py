"""``caffe-lstm convert``: a Caffe net to a serialized TensorRT engine, the recurrence inside."""

from __future__ import annotations

from pathlib import Path

import click

from caffe_lstm.cli.group import cli
from caffe_lstm.cli.options import (GlobalOptions, choice_option, load, lstm_op_option,
                                    net_argument, opset_option, output_names, pass_options,
                                    runtime_option,
                                    say_auto_state, say_lstm_ops, selection_options, state_option,
                                    weights_option)
from caffe_lstm.cli.progress import progress_display
from caffe_lstm.cli.requires import require_tensorrt
from caffe_lstm.options import BuildRequest, LstmOp, Route, State


@cli.command()
@net_argument
@weights_option(required=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="The engine file to write.")
@runtime_option("The runtime that builds the engine;")
@click.option("--fp16", is_flag=True,
              help="Compute in float16 (explicit casts; I/O stays float32).")
@state_option(*State, default=State.AUTO)
@click.option("--unroll", is_flag=True,
              help="Unroll the recurrence instead of one ILoop per layer.")
@choice_option("--via", members=list(Route), default=Route.CAFFE_LSTM)
@opset_option("The ONNX opset of the model built with --via onnx")
@lstm_op_option(LstmOp.SCAN, "How the model built with --via onnx writes each recurrent "
                             "layer;")
@selection_options(ranges="Make an input dynamic, e.g. data:1x1x64:20x1x64:400x1x64 "
                          "(repeatable).")
@pass_options
def convert(options: GlobalOptions, net: Path, weights: Path, output: Path, runtime: str,
            fp16: bool, shapes: dict, recurrent_state: str, unroll: bool, via: str, opset: int,
            lstm_op: str, outputs: str, phase: str, stages: tuple[str, ...]) -> None:
    """Build a serialized TensorRT engine; the recurrence stays inside it (one ILoop per layer)."""
    request = BuildRequest(runtime, via, recurrent_state, fp16, opset, shapes,
                           output_names(outputs), lstm_op, unroll)  # checked before anything
    require_tensorrt(runtime)  # a missing runtime fails before the net is read
    loaded = load(net, weights, outputs, phase, stages)
    with progress_display(options) as progress:
        engine = loaded.build_engine(output, request=request, verbosity=options.verbose,
                                     progress=progress)
    options.say(f"wrote {output} ({len(engine.plan) / 2**20:.2f} MiB, {engine.runtime}, "
                f"{'fp16' if fp16 else 'fp32'}, built in {engine.seconds:.2f} s)")
    say_auto_state(options, engine.facts)
    options.say("inputs: " + ", ".join(engine.inputs))
    options.say("outputs: " + ", ".join(engine.outputs))
    if lstm_op == LstmOp.AUTO:
        say_lstm_ops(options, loaded, lstm_op, recurrent_state)

