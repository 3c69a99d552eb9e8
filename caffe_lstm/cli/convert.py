"""``caffe-lstm convert``: a Caffe net to a serialized TensorRT engine, the recurrence inside."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import click

from caffe_lstm import api
from caffe_lstm.cli import cli
from caffe_lstm.cli.options import (GlobalOptions, load, net_argument, parse_static_shape,
                                    pass_options, remember_static_shapes, selection_options,
                                    weights_option)
from caffe_lstm.cli.requires import require_tensorrt
from caffe_lstm.options import Profile


def parse_shape(text: str) -> tuple[str, Profile]:
    """``data:1x1x64:20x1x64:400x1x64`` -> ("data", (min, opt, max)); names may hold ':'."""
    parts = text.split(":")
    if len(parts) < 4:
        raise click.BadParameter(
            f"'{text}' is not NAME:MIN:OPT:MAX (e.g. data:1x2x8:12x2x8:64x2x8)")
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


def _is_range(text: str) -> bool:
    """Whether ``text`` ends in three dims fields (NAME:MIN:OPT:MAX), not one (NAME:DIMS)."""
    parts = text.split(":")
    return len(parts) >= 4 and all(_DIMS.fullmatch(part) for part in parts[-3:])


_DIMS = re.compile(r"-?\d+(x-?\d+)*")


def _shapes_option(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict:
    """The ranges as {name: (min, opt, max)}; NAME:DIMS shapes go to ``load`` (static)."""
    remember_static_shapes(ctx, dict(parse_static_shape(value) for value in values
                                     if not _is_range(value)))
    return dict(parse_shape(value) for value in values if _is_range(value))


def shapes_option(help_text: str):
    """--shape NAME:MIN:OPT:MAX or NAME:DIMS (repeatable): ranges parsed into
    {name: (min, opt, max)}, static shapes handed to ``load``. It takes the place of the
    NAME:DIMS-only --shape of ``selection_options``."""
    def decorate(func):
        func.__click_params__ = [param for param in getattr(func, "__click_params__", [])
                                 if param.name != "static_shapes"]
        return click.option("--shape", "shapes", multiple=True, callback=_shapes_option,
                            metavar="NAME:MIN:OPT:MAX|NAME:DIMS",
                            help=help_text + " NAME:DIMS gives a static shape, e.g. one a data "
                            "layer leaves open.")(func)
    return decorate


@cli.command()
@net_argument
@weights_option(required=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="The engine file to write.")
@click.option("--runtime", type=click.Choice(["auto", "tensorrt", "tensorrt-rtx"]),
              default="auto", show_default=True,
              help="auto: tensorrt when it imports and a GPU is present, else TensorRT for RTX.")
@click.option("--fp16", is_flag=True,
              help="Compute in float16 (explicit casts; I/O stays float32).")
@shapes_option("Make an input dynamic, e.g. data:1x1x64:20x1x64:400x1x64 (repeatable).")
@click.option("--state", "recurrent_state", type=click.Choice(["auto", "zero", "io"]),
              default="auto",
              show_default=True,
              help="io: recurrent state as inputs <layer>/h_0, c_0 and outputs <layer>/h_T, c_T; "
                   "zero: each call starts from zero; auto: io when a cont input could be 1 at "
                   "t=0.")
@click.option("--unroll", is_flag=True,
              help="Unroll the recurrence instead of one ILoop per layer.")
@click.option("--via", type=click.Choice(list(api.VIA_ROUTES)), default="caffe-lstm",
              show_default=True,
              help="caffe-lstm: our emitter builds the network; onnx: the net is exported to "
                   "ONNX and TensorRT's own OnnxParser builds it.")
@click.option("--opset", type=int, default=17, show_default=True,
              help="The ONNX opset of the model built with --via onnx (13 to 21).")
@selection_options
@pass_options
def convert(options: GlobalOptions, net: Path, weights: Path, output: Path, runtime: str,
            fp16: bool, shapes: dict, recurrent_state: str, unroll: bool, via: str, opset: int,
            outputs: str, phase: str, stages: tuple[str, ...]) -> None:
    """Build a serialized TensorRT engine; the recurrence stays inside it (one ILoop per layer)."""
    require_tensorrt(runtime)  # a missing runtime fails before the net is read
    engine = load(net, weights, outputs, phase, stages).build_engine(
        output, runtime=runtime, fp16=fp16, shapes=shapes, state=recurrent_state, unroll=unroll,
        via=via, opset=opset, verbosity=options.verbose,
        progress=_progress_printer() if _show_progress(options) else None)
    _finish_progress(options)
    options.say(f"wrote {output} ({len(engine.plan) / 2**20:.2f} MiB, {engine.runtime}, "
                f"{'fp16' if fp16 else 'fp32'}, built in {engine.seconds:.2f} s)")
    options.say("inputs: " + ", ".join(engine.inputs))
    options.say("outputs: " + ", ".join(engine.outputs))


def _show_progress(options: GlobalOptions) -> bool:
    return not options.quiet and sys.stderr.isatty()


def _progress_printer():
    """A one-line progress display on stderr, driven by TensorRT's IProgressMonitor."""
    def show(phase: str, step: int, steps: int) -> None:
        width = 24
        filled = width * step // steps if steps else 0
        sys.stderr.write(f"\r\033[K{phase[:40]:<40} [{'#' * filled}{'.' * (width - filled)}] "
                         f"{step}/{steps}")
        sys.stderr.flush()
    return show


def _finish_progress(options: GlobalOptions) -> None:
    if _show_progress(options):
        sys.stderr.write("\r\033[K")
        sys.stderr.flush()
