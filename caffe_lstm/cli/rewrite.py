"""``caffe-lstm rewrite``: write the rewritten net back as Caffe prototxt (+ caffemodel)."""

from __future__ import annotations

from pathlib import Path

import click

from caffe_lstm.cli.group import cli
from caffe_lstm.cli.options import (GlobalOptions, load, net_argument, pass_options,
                                    selection_options, weights_option)


@cli.command("rewrite")
@net_argument
@weights_option(required=False)
@selection_options
@click.option("-o", "--output", "outdir", required=True, metavar="OUTDIR",
              type=click.Path(path_type=Path),
              help="Directory for <stem>.prototxt (and <stem>.caffemodel with -w); created if "
                   "missing.")
@click.option("--unroll", is_flag=True,
              help="One step block per time step: plain Caffe, no recurrent or Loop layers.")
@pass_options
def rewrite_command(options: GlobalOptions, net: Path, weights: Path | None, outputs: str,
                    phase: str, stages: tuple[str, ...], outdir: Path, unroll: bool) -> None:
    """Write the rewritten net as OUTDIR/<stem>.prototxt (+ .caffemodel with -w).

    Without --unroll each recurrent layer becomes primitive layers and one layer of type Loop
    (caffe-lstm's own type, which caffe-lstm reads back); with --unroll the result is plain
    upstream Caffe. Weights shared by several layers share a param name.
    """
    loaded = load(net, weights, outputs, phase, stages)
    for path in loaded.save_caffe(outdir, unroll=unroll):
        options.say(f"wrote {path}")
    if weights is not None and loaded.missing_weights:
        options.say(f"note: {weights} has no weights for {', '.join(loaded.missing_weights)}; "
                    "their layers have no blobs in the written caffemodel")
