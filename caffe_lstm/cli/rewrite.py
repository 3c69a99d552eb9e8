"""``caffe-lstm rewrite``: write the rewritten net back as Caffe prototxt (+ caffemodel)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import click

from caffe_lstm.backends.caffe_writer import to_net_parameter, write_prototxt
from caffe_lstm.cli import cli
from caffe_lstm.cli.options import (AppState, load, net_argument, pass_state, rewrite,
                                    selection_options, weights_option)
from caffe_lstm.errors import OutputError
from caffe_lstm.frontend.caffemodel_writer import write_caffemodel


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
@pass_state
def rewrite_command(state: AppState, net: Path, weights: Path | None, outputs: str, phase: str,
                    stages: tuple[str, ...], outdir: Path, unroll: bool) -> None:
    """Write the rewritten net as OUTDIR/<stem>.prototxt (+ .caffemodel with -w).

    Without --unroll each recurrent layer becomes primitive layers and one layer of type Loop
    (caffe-lstm's own type, which caffe-lstm reads back); with --unroll the result is plain
    upstream Caffe. Weights shared by several layers share a param name.
    """
    loaded = load(net, weights, outputs, phase, stages)
    graph = rewrite(loaded.graph, unroll)
    definition, layer_weights = to_net_parameter(graph)
    prototxt, caffemodel = outdir / f"{net.stem}.prototxt", outdir / f"{net.stem}.caffemodel"
    _refuse_to_overwrite([prototxt, caffemodel], [net, weights])
    form = "unrolled: plain Caffe" if unroll else "recurrences as caffe-lstm Loop layers"
    with _nothing_left_on_error(outdir) as written:
        write_prototxt(prototxt, definition, f"Rewritten by caffe-lstm from {net.name} ({form}).")
        written.append(prototxt)
        if weights is not None:
            write_caffemodel(caffemodel, layer_weights, net_name=graph.name)
            written.append(caffemodel)
    for path in written:
        state.say(f"wrote {path}")
    if weights is not None and loaded.missing_weights:
        state.say(f"note: {weights} has no weights for {', '.join(loaded.missing_weights)}; "
                  "their layers have no blobs in the written caffemodel")


def _refuse_to_overwrite(targets: list[Path], sources: list[Path | None]) -> None:
    """The outputs must not replace the files being read (OUTDIR = the net's own folder)."""
    for target in targets:
        if any(source is not None and target.resolve() == source.resolve()
               for source in sources):
            raise OutputError("the output would overwrite an input file", str(target),
                              "choose another -o directory")


@contextlib.contextmanager
def _nothing_left_on_error(outdir: Path):
    """Creates ``outdir`` (and missing parents); on an error removes the files written so far
    (the yielded list) and the directories it created, then re-raises."""
    created = [p for p in (outdir, *outdir.parents) if not p.exists()]
    try:
        outdir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create the output directory ({exc.strerror})", str(outdir),
                          "choose a directory that can be created and written") from None
    written: list[Path] = []
    try:
        yield written
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        for folder in created:  # deepest first
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
