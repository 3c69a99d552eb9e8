"""``caffe-lstm run``: execute a net on the CPU with numpy."""

from __future__ import annotations

from pathlib import Path

import click
import numpy as np

from caffe_lstm.backends.numpy_exec import NumpyExecutor
from caffe_lstm.cli import cli
from caffe_lstm.cli.options import (AppState, load, net_argument, pass_state, selection_options,
                                    weights_option)
from caffe_lstm.feeds import apply_feeds, random_feeds
from caffe_lstm.files import load_npz, save_npz


@cli.command()
@net_argument
@weights_option(required=True)
@selection_options
@click.option("--inputs", "inputs_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Input arrays (.npz, keys = Caffe blob names, time-major).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the random inputs made when --inputs is not given.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write every net output to this .npz.")
@pass_state
def run(state: AppState, net: Path, weights: Path, outputs: str, phase: str,
        stages: tuple[str, ...], inputs_path: Path | None, seed: int,
        output: Path | None) -> None:
    """Run the net with numpy; print or save its outputs.

    Each run is one Caffe Forward call from zero recurrent state.
    """
    graph = load(net, weights, outputs, phase, stages).graph
    if inputs_path is not None:
        feeds = apply_feeds(graph, load_npz(inputs_path), str(inputs_path))
    else:
        feeds = random_feeds(graph, seed)
    results = NumpyExecutor(graph).run(feeds)
    if output is not None:
        save_npz(output, results)
        state.say(f"wrote {len(results)} output(s) to {output}")
    if output is None or state.verbose:
        for name, array in results.items():
            state.say(_describe(name, array))


def _describe(name: str, array: np.ndarray) -> str:
    stats = (f"min {array.min():.6g}  max {array.max():.6g}  mean {array.mean():.6g}"
             if array.size else "empty")
    return f"{name}  {tuple(array.shape)}  {stats}"
