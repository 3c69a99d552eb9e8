"""``caffe-lstm verify``: the recurrent equations against the rewritten graph, the TensorRT
network and an engine, per output."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import click

from caffe_lstm.backends.numpy_exec import NumpyExecutor
from caffe_lstm.cli import cli
from caffe_lstm.cli.options import (AppState, input_options, load, net_argument, pass_state,
                                    prepare_feeds, rewrite, selection_options, weights_option)
from caffe_lstm.compare import Comparison, compare_outputs
from caffe_lstm.errors import VerificationError
from caffe_lstm.feeds import apply_feeds


@cli.command()
@net_argument
@weights_option(required=True)
@selection_options
@input_options
@click.option("--engine", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Also run this engine (needs a GPU; without one the TensorRT network is "
                   "checked on the CPU instead).")
@click.option("--runtime", type=click.Choice(["auto", "tensorrt", "tensorrt-rtx"]),
              default="auto", show_default=True, help="The TensorRT runtime to use.")
@click.option("--fp16", is_flag=True, help="Check the TensorRT network emitted in float16.")
@click.option("--trt/--no-trt", "with_trt", default=True, show_default=True,
              help="Check the emitted TensorRT network on the CPU when TensorRT is installed.")
@click.option("--atol", type=float, default=1e-5, show_default=True, help="Absolute tolerance.")
@click.option("--rtol", type=float, default=1e-4, show_default=True, help="Relative tolerance.")
@pass_state
def verify(state: AppState, net: Path, weights: Path, outputs: str, phase: str,
           stages: tuple[str, ...], inputs_path: Path | None, seed: int, engine: Path | None,
           runtime: str, fp16: bool, with_trt: bool, atol: float, rtol: float) -> None:
    """Compare the rewritten graph (and TensorRT) with the recurrent equations; exit 1 on a
    mismatch.

    All run on the same inputs; a table per candidate gives the max abs / rel error per output.
    The TensorRT network is checked by walking its layers through the TensorRT API and
    evaluating them with numpy, which needs no GPU.
    """
    original = load(net, weights, outputs, phase, stages).graph
    feeds = prepare_feeds(original, inputs_path, seed)
    reference = NumpyExecutor(original).run(feeds)

    def rewritten_graph():
        graph = load(net, weights, outputs, phase, stages).graph
        return graph, apply_feeds(graph, feeds, "the inputs")

    candidates = _candidates(state, rewritten_graph, runtime, engine, fp16, with_trt)
    failed = []
    for title, run_candidate in candidates:
        rows = compare_outputs(reference, run_candidate(), atol, rtol)
        state.say(f"original equations vs {title}")
        for line in _table(rows):
            state.say(line)
        failed += [f"{row.name} ({title})" for row in rows if not row.ok]
    if failed:
        raise VerificationError(
            f"{len(failed)} comparison(s) differ beyond atol {atol:g} + rtol {rtol:g}: "
            f"{', '.join(failed)}", str(net), "rerun with --debug, or inspect with `dot`")


def _candidates(state: AppState, rewritten_graph: Callable, runtime: str, engine: Path | None,
                fp16: bool, with_trt: bool) -> list[tuple[str, Callable[[], dict]]]:
    """(title, run) for each implementation to compare with the equations."""
    def numpy_run():
        graph, feeds = rewritten_graph()
        return NumpyExecutor(rewrite(graph)).run(feeds)

    candidates = [("rewritten graph (numpy)", numpy_run)]
    trt_runtime = _runtime_or_none(runtime) if (with_trt or engine) else None
    if trt_runtime is None:
        return candidates
    from caffe_lstm.backends.tensorrt.runtime import has_gpu

    if engine is not None and has_gpu():
        candidates.append((f"engine {engine.name} (GPU)",
                           lambda: _run_engine(trt_runtime, engine, rewritten_graph()[1])))
    elif engine is not None:
        state.say("no GPU here: the engine cannot run; its TensorRT network is checked on the CPU")
    if with_trt or engine is not None:
        title = f"TensorRT network, {'fp16' if fp16 else 'fp32'} (CPU walk)"
        candidates.append((title, lambda: _walk(trt_runtime, rewritten_graph, fp16)))
    return candidates


def _runtime_or_none(choice: str):
    from caffe_lstm.backends.tensorrt.runtime import BackendUnavailableError, load_runtime

    try:
        return load_runtime(choice)
    except BackendUnavailableError:
        if choice != "auto":
            raise
        return None


def _run_engine(runtime, engine: Path, feeds: dict) -> dict:
    from caffe_lstm.backends.tensorrt.engine import run_engine

    return run_engine(runtime, engine, feeds)


def _walk(runtime, rewritten_graph: Callable, fp16: bool) -> dict:
    from caffe_lstm.backends.tensorrt.build import BuildOptions, emit
    from caffe_lstm.backends.tensorrt.network_eval import evaluate_network

    graph, feeds = rewritten_graph()
    _, network, _ = emit(runtime, rewrite(graph), BuildOptions(fp16=fp16))
    results = evaluate_network(runtime.trt, network, feeds)
    return {name: array.astype("float32") for name, array in results.items()}


def _table(rows: list[Comparison]) -> list[str]:
    width = max([len("output")] + [len(row.name) for row in rows])
    lines = [f"{'output':<{width}}  {'shape':<16}  {'max abs err':>11}  {'max rel err':>11}"]
    for row in rows:
        shape = "(" + ", ".join(str(d) for d in row.shape) + ")"
        verdict = "ok" if row.ok else "MISMATCH"
        lines.append(f"{row.name:<{width}}  {shape:<16}  {row.max_abs:>11.3g}  "
                     f"{row.max_rel:>11.3g}  {verdict}")
    return lines
