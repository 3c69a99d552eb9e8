"""``caffe-lstm dot``: the Graphviz DOT of the rewritten graph (or of the original net)."""

from __future__ import annotations

from pathlib import Path

import click

from caffe_lstm.cli.group import cli
from caffe_lstm.cli.options import (GlobalOptions, load, net_argument, pass_options,
                                    selection_options, weights_option)
from caffe_lstm.cli.requires import require_graphviz, write_dot_file


@cli.command()
@net_argument
@weights_option(required=False)
@selection_options
@click.option("--original", is_flag=True,
              help="Draw the net as loaded, before the recurrent rewrite.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the DOT text to this file instead of printing it.")
@click.option("--svg", is_flag=True,
              help="Also render the .svg next to the -o file (needs Graphviz's `dot`).")
@pass_options
def dot(options: GlobalOptions, net: Path, weights: Path | None, outputs: str, phase: str,
        stages: tuple[str, ...], original: bool, output: Path | None, svg: bool) -> None:
    """Write the Graphviz DOT of the rewritten graph (or, with --original, of the net as loaded).

    Nodes the rewrite inserted (names starting with __) have dashed borders; the body of each
    loop is a cluster, with its carried states drawn as dashed back edges. Weights are optional:
    shapes do not need them.
    """
    svg_path = _svg_path(output) if svg else None
    if svg_path is not None:
        require_graphviz()  # fail before any work when Graphviz is missing
    text = load(net, weights, outputs, phase, stages).to_dot(original=original)
    if output is None:
        click.echo(text, nl=False)
        return
    write_dot_file(text, output, svg_path)
    options.say(f"wrote {output}")
    if svg_path is not None:
        options.say(f"wrote {svg_path}")


def _svg_path(output: Path | None) -> Path:
    """graph.svg beside graph.dot; --svg needs -o (the SVG is not printed)."""
    if output is None:
        raise click.UsageError("--svg needs -o/--output: the SVG is written next to the .dot file")
    svg_path = output.with_suffix(".svg")
    if svg_path == output:
        raise click.UsageError("-o names the .dot file; with --svg it cannot end in .svg")
    return svg_path
