"""``caffe-lstm verify``: the recurrent equations against the rewritten graph, per output."""

from __future__ import annotations

from pathlib import Path

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
@click.option("--atol", type=float, default=1e-5, show_default=True, help="Absolute tolerance.")
@click.option("--rtol", type=float, default=1e-4, show_default=True, help="Relative tolerance.")
@pass_state
def verify(state: AppState, net: Path, weights: Path, outputs: str, phase: str,
           stages: tuple[str, ...], inputs_path: Path | None, seed: int, atol: float,
           rtol: float) -> None:
    """Compare the rewritten graph with the recurrent equations; exit 1 on a mismatch.

    Both run with numpy on the same inputs; the table gives the max abs / rel error per output.
    """
    original = load(net, weights, outputs, phase, stages).graph
    feeds = prepare_feeds(original, inputs_path, seed)
    rewritten = load(net, weights, outputs, phase, stages).graph
    rewritten_feeds = apply_feeds(rewritten, feeds, "the inputs")
    reference = NumpyExecutor(original).run(feeds)
    candidate = NumpyExecutor(rewrite(rewritten)).run(rewritten_feeds)
    rows = compare_outputs(reference, candidate, atol, rtol)
    state.say("original equations vs rewritten graph (numpy)")
    for line in _table(rows):
        state.say(line)
    failed = [row.name for row in rows if not row.ok]
    if failed:
        raise VerificationError(
            f"{len(failed)} of {len(rows)} outputs differ beyond atol {atol:g} + rtol {rtol:g}: "
            f"{', '.join(failed)}", str(net), "rerun with --debug, or inspect with `dot`")


def _table(rows: list[Comparison]) -> list[str]:
    width = max([len("output")] + [len(row.name) for row in rows])
    lines = [f"{'output':<{width}}  {'shape':<16}  {'max abs err':>11}  {'max rel err':>11}"]
    for row in rows:
        shape = "(" + ", ".join(str(d) for d in row.shape) + ")"
        verdict = "ok" if row.ok else "MISMATCH"
        lines.append(f"{row.name:<{width}}  {shape:<16}  {row.max_abs:>11.3g}  "
                     f"{row.max_rel:>11.3g}  {verdict}")
    return lines
