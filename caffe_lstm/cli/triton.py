"""``caffe-lstm triton``: a Triton Inference Server model repository for a Caffe net, carried
recurrent state as Triton sequence state."""

from __future__ import annotations

from pathlib import Path

import click

from caffe_lstm.cli.group import cli
from caffe_lstm.cli.options import (GlobalOptions, choice_option, load, lstm_op_option,
                                    net_argument, pass_options, runtime_option, say_lstm_ops,
                                    selection_options, state_option, weights_option)
from caffe_lstm.cli.requires import require_tensorrt
from caffe_lstm.options import Backend, LstmOp, State
from caffe_lstm.serving.config import Batching


def _batch_axes(ctx: click.Context, param: click.Parameter,
                values: tuple[str, ...]) -> dict[str, int]:
    """``NAME:AXIS`` (repeatable) -> {name: axis}; the name may hold ':'."""
    axes = {}
    for value in values:
        name, sep, axis = value.rpartition(":")
        if not sep or not name or not axis.isdigit():
            raise click.BadParameter(f"'{value}' is not NAME:AXIS (e.g. image_features:0)")
        axes[name] = int(axis)
    return axes


@cli.command()
@net_argument
@weights_option(required=True)
@click.option("-o", "--output", "repository", type=click.Path(file_okay=False, path_type=Path),
              required=True,
              help="The model repository: REPO/NAME/config.pbtxt and REPO/NAME/1/ are written "
                   "(an older model of that name is replaced).")
@choice_option("--backend", members=list(Backend), default=Backend.PYTHON)
@runtime_option("The TensorRT that builds model.plan (--backend tensorrt): the one of the "
                "Triton server that will load it;")
@click.option("--name", help="The model's name in the repository (default: the prototxt's "
                             "file name without .prototxt).")
@click.option("--max-batch", type=click.IntRange(min=0), default=8, show_default=True,
              help="Triton's max_batch_size: requests (sequences) run together, the batch "
                   "range of the model file; 0: no batching (tensors keep Caffe's layout), "
                   "for a net whose layers fix N.")
@click.option("--instances", type=click.IntRange(min=1), default=1, show_default=True,
              help="Model instances (instance_group count).")
@click.option("--cont-from-start", is_flag=True,
              help="Triton feeds Caffe's cont from the sequence's START flag (0 on the first "
                   "step, 1 after), so clients send only data; needs one step per request.")
@click.option("--batch-axis", "batch_axes", multiple=True, metavar="NAME:AXIS",
              callback=_batch_axes,
              help="The batch axis of an input the net leaves ambiguous, in Caffe's layout, "
                   "e.g. image_features:0 (repeatable).")
@click.option("--max-candidate-sequences", type=click.IntRange(min=1),
              help="Sequences the batcher schedules at once (default: 4 x --max-batch).")
@click.option("--preferred-batch-size", "preferred", type=click.IntRange(min=1),
              multiple=True,
              help="A batch size the batcher waits for (repeatable).")
@click.option("--max-queue-delay-us", type=click.IntRange(min=0), default=0,
              show_default=True,
              help="How long the batcher may hold a request to make a bigger batch.")
@click.option("--max-sequence-idle-us", type=click.IntRange(min=1), default=10_000_000,
              show_default=True,
              help="A sequence idle this long is ended and its state dropped.")
@state_option(*State, default=State.AUTO)
@lstm_op_option(LstmOp.SCAN, "How model.onnx (--backend onnxruntime or python) writes each "
                             "recurrent layer, as for export;")
@selection_options
@pass_options
def triton(options: GlobalOptions, net: Path, weights: Path, repository: Path, backend: str,
           runtime: str, name: str | None, max_batch: int, instances: int, cont_from_start: bool,
           batch_axes: dict[str, int], max_candidate_sequences: int | None,
           preferred: tuple[int, ...], max_queue_delay_us: int, max_sequence_idle_us: int,
           recurrent_state: str, lstm_op: str, outputs: str, phase: str,
           stages: tuple[str, ...]) -> None:
    """Write a Triton Inference Server model repository.

    Inputs and outputs are batch-major (N first: time-major blobs are transposed at the
    edges); carried recurrent states become Triton sequence state (sequence batching, the
    oldest strategy, zeros at START); a net without carried state gets dynamic batching.
    """
    if backend == "tensorrt":
        require_tensorrt(runtime)  # a missing runtime fails before the net is read
    batching = Batching(max_candidate_sequences, preferred, max_queue_delay_us,
                        max_sequence_idle_us)
    loaded = load(net, weights, outputs, phase, stages)
    written = loaded.to_triton(
        repository, backend=backend, name=name, max_batch=max_batch, instances=instances,
        cont_from_start=cont_from_start, batch_axes=batch_axes, batching=batching,
        runtime=runtime, state=recurrent_state, lstm_op=lstm_op)
    spec = written.spec
    batcher = ("sequence batching" if spec.stateful else
               "dynamic batching" if spec.max_batch else "no batching")
    options.say(f"wrote {written.path} ({backend} backend, max batch {spec.max_batch}, "
                f"{batcher})")
    options.say("inputs: " + ", ".join(f"{t.name} {_dims(t.dims, spec)}" for t in spec.inputs))
    if spec.cont_controls:
        options.say("from START: " + ", ".join(t.name for t in spec.cont_controls))
    options.say("outputs: " + ", ".join(f"{t.name} {_dims(t.dims, spec)}"
                                        for t in spec.outputs))
    if spec.states:
        options.say("states: " + ", ".join(f"{s.input} <- {s.output}" for s in spec.states))
    if lstm_op == LstmOp.AUTO:
        say_lstm_ops(options, loaded, lstm_op, recurrent_state)
    if not written.schema_checked:
        options.say("note: tritonclient is not installed: the config was checked by "
                    "caffe-lstm only, not by Triton's schema")


def _dims(dims: tuple[int, ...], spec) -> str:
    """[N, dims...] with batching, else the full dims."""
    return "[" + ", ".join(["N"] * bool(spec.max_batch) + [str(d) for d in dims]) + "]"
