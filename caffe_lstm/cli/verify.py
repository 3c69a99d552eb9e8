"""``caffe-lstm verify``: the recurrent equations against the rewritten graph, the TensorRT
network and an engine, per output."""

from __future__ import annotations

from pathlib import Path

import click

from caffe_lstm.cli.words import as_cli
from caffe_lstm.cli.group import cli
from caffe_lstm.cli.progress import progress_display
from caffe_lstm.cli.options import (GlobalOptions, input_options, load, net_argument,
                                    pass_options, runtime_option, selection_options,
                                    weights_option)
from caffe_lstm.compare import Comparison
from caffe_lstm.errors import VerificationError


@cli.command()
@net_argument
@weights_option(required=True)
@selection_options
@input_options
@click.option("--engine", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Also run this engine (needs a GPU; without one the TensorRT network is "
                   "checked on the CPU instead).")
@runtime_option("The TensorRT runtime to use;")
@click.option("--fp16", is_flag=True, help="Check the TensorRT network emitted in float16.")
@click.option("--trt/--no-trt", "with_trt", default=True, show_default=True,
              help="Check the emitted TensorRT network on the CPU when TensorRT is installed.")
@click.option("--onnxruntime/--no-onnxruntime", "with_onnxruntime", default=None,
              help="Also export the net to ONNX and run it with onnxruntime [default: when "
                   "onnxruntime is installed].")
@click.option("--atol", type=float, default=1e-5, show_default=True, help="Absolute tolerance.")
@click.option("--rtol", type=float, default=1e-4, show_default=True, help="Relative tolerance.")
@pass_options
def verify(options: GlobalOptions, net: Path, weights: Path, outputs: str, phase: str,
           stages: tuple[str, ...], inputs_path: Path | None, seed: int, engine: Path | None,
           runtime: str, fp16: bool, with_trt: bool, with_onnxruntime: bool | None,
           atol: float, rtol: float) -> None:
    """Compare the rewritten graph (TensorRT, onnxruntime) with the recurrent equations; exit 1
    on a mismatch.

    All run on the same inputs; a table per candidate gives the max abs / rel error per output.
    The TensorRT network is checked by walking its layers through the TensorRT API and
    evaluating them with numpy, which needs no GPU.
    """
    loaded = load(net, weights, outputs, phase, stages)
    with progress_display(options) as progress:
        report = loaded.verify(inputs_path, seed=seed, engine=engine, runtime=runtime, fp16=fp16,
                               tensorrt=with_trt, atol=atol, rtol=rtol,
                               onnxruntime=with_onnxruntime, progress=progress)
    for note in report.notes:
        options.say(as_cli(note))
    for title, rows in report.results:
        options.say(f"original equations vs {title}")
        for line in _table(rows):
            options.say(line)
    if not report.ok:
        raise VerificationError(
            f"{len(report.failures)} comparison(s) differ beyond atol {atol:g} + rtol {rtol:g}: "
            f"{', '.join(report.failures)}", str(net), "rerun with --debug, or inspect with `dot`")


def _table(rows: list[Comparison]) -> list[str]:
    width = max([len("output")] + [len(row.name) for row in rows])
    lines = [f"{'output':<{width}}  {'shape':<16}  {'max abs err':>11}  {'max rel err':>11}"]
    for row in rows:
        shape = "(" + ", ".join(str(d) for d in row.shape) + ")"
        verdict = "sensitive" if row.sensitive else "ok" if row.ok else "MISMATCH"
        lines.append(f"{row.name:<{width}}  {shape:<16}  {row.max_abs:>11.3g}  "
                     f"{row.max_rel:>11.3g}  {verdict}")
    return lines
