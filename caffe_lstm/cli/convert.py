"""``caffe-lstm convert``: a Caffe net to a serialized TensorRT engine, the recurrence inside."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from caffe_lstm.analysis.shapes import infer_shapes
from caffe_lstm.cli import cli
from caffe_lstm.cli.options import (AppState, load, net_argument, pass_state, rewrite,
                                    selection_options, weights_option)
from caffe_lstm.errors import ModelLoadError, ShapeError
from caffe_lstm.files import atomic_output
from caffe_lstm.ir.graph import Graph
from caffe_lstm.passes.state import expose_recurrent_state, needs_state_io

Profile = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]


def parse_shape(text: str) -> tuple[str, Profile]:
    """``data:1x1x64:20x1x64:400x1x64`` -> ("data", (min, opt, max)); names may hold ':'."""
    parts = text.split(":")
    if len(parts) < 4:
        raise click.BadParameter(f"'{text}' is not NAME:MIN:OPT:MAX (e.g. data:1x2x8:12x2x8:64x2x8)")
    name = ":".join(parts[:-3])
    try:
        low, opt, high = (tuple(int(d) for d in part.split("x")) for part in parts[-3:])
    except ValueError:
        raise click.BadParameter(f"'{text}': dims are integers joined by 'x'") from None
    if not len(low) == len(opt) == len(high) or min(low + opt + high) < 1:
        raise click.BadParameter(f"'{text}': MIN, OPT and MAX need the same rank and dims >= 1")
    if not all(a <= b <= c for a, b, c in zip(low, opt, high)):
        raise click.BadParameter(f"'{text}': each dim needs MIN <= OPT <= MAX")
    return name, (low, opt, high)


def _shapes_option(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict:
    return dict(parse_shape(value) for value in values)


@cli.command()
@net_argument
@weights_option(required=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="The engine file to write.")
@click.option("--runtime", type=click.Choice(["auto", "tensorrt", "tensorrt-rtx"]),
              default="auto", show_default=True,
              help="auto: tensorrt when it imports and a GPU is present, else TensorRT for RTX.")
@click.option("--fp16", is_flag=True, help="Compute in float16 (explicit casts; I/O stays float32).")
@click.option("--shape", "shapes", multiple=True, callback=_shapes_option,
              metavar="NAME:MIN:OPT:MAX",
              help="Make an input dynamic, e.g. data:1x1x64:20x1x64:400x1x64 (repeatable).")
@click.option("--state", "state_mode", type=click.Choice(["auto", "zero", "io"]), default="auto",
              show_default=True,
              help="io: recurrent state as inputs <layer>/h_0, c_0 and outputs <layer>/h_T, c_T; "
                   "zero: each call starts from zero; auto: io when a cont input could be 1 at t=0.")
@click.option("--unroll", is_flag=True, help="Unroll the recurrence instead of one ILoop per layer.")
@selection_options
@pass_state
def convert(state: AppState, net: Path, weights: Path, output: Path, runtime: str, fp16: bool,
            shapes: dict, state_mode: str, unroll: bool, outputs: str, phase: str,
            stages: tuple[str, ...]) -> None:
    """Build a serialized TensorRT engine; the recurrence stays inside it (one ILoop per layer)."""
    from caffe_lstm.backends.tensorrt.build import BuildOptions, build_engine
    from caffe_lstm.backends.tensorrt.runtime import load_runtime

    trt_runtime = load_runtime(runtime)
    loaded = load(net, weights, outputs, phase, stages)
    if loaded.missing_weights:
        raise ModelLoadError(
            f"the caffemodel has no weights for layer(s) {', '.join(loaded.missing_weights)}",
            str(weights), "pass the caffemodel trained for this prototxt "
            "(or make synthetic ones with caffe_lstm.synthetic)")
    graph = loaded.graph
    if state_mode == "io" or (state_mode == "auto" and needs_state_io(graph)):
        expose_recurrent_state(graph)
    profiles = _profiles(graph, shapes)
    _check_profiles(graph, profiles)
    rewrite(graph, unroll=unroll)
    options = BuildOptions(fp16=fp16, shapes=profiles, verbosity=state.verbose,
                           progress=_progress_printer() if _show_progress(state) else None)
    started = time.perf_counter()
    with atomic_output(output) as tmp:  # opened first: an unwritable -o fails before the build
        plan = build_engine(trt_runtime, graph, options)
        tmp.write_bytes(plan)
    _finish_progress(state)
    state.say(f"wrote {output} ({len(plan) / 2**20:.2f} MiB, {trt_runtime.name}, "
              f"{'fp16' if fp16 else 'fp32'}, built in {time.perf_counter() - started:.2f} s)")
    state.say("inputs: " + ", ".join(v.name for v in graph.inputs))
    state.say("outputs: " + ", ".join(v.name for v in graph.outputs))


def _profiles(graph: Graph, shapes: dict[str, Profile]) -> dict[str, Profile]:
    """The --shape profiles checked against the net inputs, plus matching ranges for exposed
    state inputs ((1, N, H): N follows the batch range of the dynamic inputs)."""
    inputs = {v.name: v for v in graph.inputs}
    for name, (low, _, _) in shapes.items():
        if name not in inputs:
            raise ShapeError(f"--shape names '{name}', which is not a net input",
                             "--shape", f"the net inputs are {', '.join(inputs)}")
        if len(low) != len(inputs[name].shape):
            raise ShapeError(f"--shape {name} has {len(low)} dims, the input has "
                             f"{len(inputs[name].shape)} {inputs[name].shape}", "--shape",
                             "give one dim per axis")
    profiles = dict(shapes)
    batch = next(((p[0][1], p[1][1], p[2][1]) for p in shapes.values() if len(p[0]) > 1), None)
    for value in graph.inputs:
        if value.name not in profiles and shapes:
            profiles[value.name] = _state_profile(value.shape, batch)
    return profiles


def _check_profiles(graph: Graph, profiles: dict[str, Profile]) -> None:
    """Every layer must accept the MIN and the MAX shapes (e.g. weights fix a feature dim);
    the graph is left shaped for OPT."""
    for index in (0, 2, 1):
        for value in graph.inputs:
            if value.name in profiles:
                value.shape = tuple(profiles[value.name][index])
        try:
            infer_shapes(graph)
        except ShapeError as exc:
            which = ("MIN", "MAX", "OPT")[(0, 2, 1).index(index)]
            raise ShapeError(f"at the --shape {which} sizes: {exc.what}", exc.where,
                             "keep dims that the layers or weights fix out of --shape ranges") \
                from None


def _state_profile(shape: tuple[int, ...], batch: tuple[int, int, int] | None) -> Profile:
    """A static input keeps its shape; a (1, N, H) state input follows the batch range."""
    if batch is None or len(shape) != 3 or shape[0] != 1:
        return shape, shape, shape
    return tuple((1, n, shape[2]) for n in batch)


def _show_progress(state: AppState) -> bool:
    return not state.quiet and sys.stderr.isatty()


def _progress_printer():
    """A one-line progress display on stderr, driven by TensorRT's IProgressMonitor."""
    def show(phase: str, step: int, steps: int) -> None:
        width = 24
        filled = width * step // steps if steps else 0
        sys.stderr.write(f"\r\033[K{phase[:40]:<40} [{'#' * filled}{'.' * (width - filled)}] "
                         f"{step}/{steps}")
        sys.stderr.flush()
    return show


def _finish_progress(state: AppState) -> None:
    if _show_progress(state):
        sys.stderr.write("\r\033[K")
        sys.stderr.flush()
