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
from caffe_lstm.compare import FLOAT16_TOLERANCE, FLOAT32_TOLERANCE, Comparison
from caffe_lstm.errors import VerificationError
from caffe_lstm.verification import Column, Verification
from caffe_lstm.verification.report import RULE


@cli.command()
@net_argument
@weights_option(required=True)
@selection_options
@input_options
@click.option("--engine", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Also run this engine (needs a GPU; without one the TensorRT network is "
                   "checked on the CPU instead).")
@runtime_option("The TensorRT runtime to use;")
@click.option("--fp16", is_flag=True,
              help="Check the TensorRT network emitted in float16 (its columns then default to "
                   f"float16 tolerances: {FLOAT16_TOLERANCE.describe()}).")
@click.option("--trt/--no-trt", "with_trt", default=True, show_default=True,
              help="Check the emitted TensorRT network on the CPU when TensorRT is installed.")
@click.option("--onnxruntime/--no-onnxruntime", "with_onnxruntime", default=None,
              help="Also export the net to ONNX and run it with onnxruntime [default: when "
                   "onnxruntime is installed].")
@click.option("--atol", type=float, default=None,
              help=f"Absolute tolerance [default: {FLOAT32_TOLERANCE.atol:g}; "
                   f"{FLOAT16_TOLERANCE.atol:g} times each output's largest magnitude for the "
                   "TensorRT columns with --fp16].")
@click.option("--rtol", type=float, default=None,
              help=f"Relative tolerance [default: {FLOAT32_TOLERANCE.rtol:g}; "
                   f"{FLOAT16_TOLERANCE.rtol:g} for the TensorRT columns with --fp16].")
@click.option("--allow-no-signal", is_flag=True,
              help="Do not fail on outputs that carry no signal (reported all the same).")
@click.option("--locate/--no-locate", default=True, show_default=True,
              help="On a mismatch, compare every intermediate blob and name the first layer "
                   "that leaves the tolerance.")
@pass_options
def verify(options: GlobalOptions, net: Path, weights: Path, outputs: str, phase: str,
           stages: tuple[str, ...], inputs_path: Path | None, seed: int, engine: Path | None,
           runtime: str, fp16: bool, with_trt: bool, with_onnxruntime: bool | None,
           atol: float | None, rtol: float | None, allow_no_signal: bool,
           locate: bool) -> None:
    """Compare the rewritten graph (TensorRT, onnxruntime) with the recurrent equations; exit 1
    on a mismatch, or on an output that carries no signal.

    All run on the same inputs; a table per candidate gives the errors per output, and every
    candidate that is not checked says why. The TensorRT network is checked by walking its
    layers through the TensorRT API and evaluating them with numpy, which needs no GPU.
    """
    loaded = load(net, weights, outputs, phase, stages)
    with progress_display(options) as progress:
        report = loaded.verify(inputs_path, seed=seed, engine=engine, runtime=runtime, fp16=fp16,
                               tensorrt=with_trt, atol=atol, rtol=rtol,
                               onnxruntime=with_onnxruntime, progress=progress,
                               allow_no_signal=allow_no_signal, locate=locate)
    for note in report.notes:
        options.say(as_cli(note))
    for column in report.columns:
        for line in _column(column):
            options.say(as_cli(line))
    if not report.ok:
        raise VerificationError(_verdict(report), str(net), _hint(report, locate))


def _column(column: Column) -> list[str]:
    if not column.checked:
        return [f"{column.title} is not checked: {column.reason}"]
    rule = f"match when {RULE} with {column.tolerance.describe()}"
    lines = [f"original equations vs {column.title}; {rule}", *_table(column.rows)]
    for row in column.rows:
        if row.no_signal:
            lines.append(f"{row.name}: no signal: {row.no_signal}")
    if column.located is not None:
        lines.append(f"first divergence: {column.located.describe()}")
    elif column.unlocated:
        lines.append(f"first divergence not located: {column.unlocated}")
    return lines


def _table(rows: list[Comparison]) -> list[str]:
    width = max([len("output")] + [len(row.name) for row in rows])
    header = (f"{'output':<{width}}  {'shape':<16}  {'max abs err':>11}  {'max rel err':>11}  "
              f"{'of tol':>8}  {'by':<4}  verdict")
    lines = [header]
    for row in rows:
        shape = "(" + ", ".join(str(d) for d in row.shape) + ")"
        lines.append(f"{row.name:<{width}}  {shape:<16}  {row.max_abs:>11.3g}  "
                     f"{row.max_rel:>11.3g}  {row.used:>8.3g}  {row.decided_by:<4}  "
                     f"{row.verdict}")
    return lines


def _verdict(report: Verification) -> str:
    parts = []
    if report.failures:
        parts.append(f"{len(report.failures)} comparison(s) differ beyond their tolerance: "
                     f"{', '.join(report.failures)}")
    if report.no_signal and not report.allow_no_signal:
        parts.append(f"{len(report.no_signal)} comparison(s) have no signal, so nothing was "
                     f"checked there: {', '.join(report.no_signal)}")
    return "; ".join(parts)


def _hint(report: Verification, locate: bool) -> str:
    if report.failures:
        where = ("the first divergence is printed above" if locate
                 else "rerun with --locate to find the first layer that diverges")
        return (f"{where}; if the differences are expected (float16, another summation "
                f"order), widen --atol / --rtol: the table says which term decided")
    return ("use trained weights, or `weights init`'s default scaling; --allow-no-signal "
            "reports these outputs without failing")
