"""Options shared by several commands, as decorators."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable

import click

from caffe_lstm import api


@dataclass
class GlobalOptions:
    """The global options, reachable from every command."""

    verbose: int = 0
    quiet: bool = False
    debug: bool = False

    def say(self, text: str = "") -> None:
        """Prints ``text`` unless --quiet."""
        if not self.quiet:
            click.echo(text)


pass_options = click.make_pass_decorator(GlobalOptions, ensure=True)

_EXISTING_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)


def net_argument(func: Callable) -> Callable:
    """The net definition, the one positional argument."""
    return click.argument("net", metavar="NET.prototxt", type=_EXISTING_FILE)(func)


def weights_option(required: bool) -> Callable:
    return click.option("-w", "--weights", type=_EXISTING_FILE, required=required,
                        help="Trained weights (.caffemodel).")


def selection_options(func: Callable) -> Callable:
    """--outputs, --phase and --stage: which part of the net to load."""
    func = click.option("--stage", "stages", multiple=True, metavar="NAME",
                        help="Select layers by their include/exclude stage rules "
                             "(repeatable).")(func)
    func = click.option("--phase", type=click.Choice(["TEST", "TRAIN"]), default="TEST",
                        show_default=True, help="Select layers by their phase rules.")(func)
    func = click.option("--outputs", metavar="NAME[,NAME...]", default="",
                        help="Make these blobs the outputs; drop layers not needed for them.")(func)
    return func


def state_option(func: Callable) -> Callable:
    """--state zero|io: Caffe's state carry-over between Forward calls as inputs/outputs."""
    return click.option(
        "--state", "recurrent_state", type=click.Choice(["zero", "io"]), default="zero",
        show_default=True,
        help="io: recurrent state as inputs <layer>/h_0, c_0 (zeros unless given) and outputs "
             "<layer>/h_T, c_T, to carry it between calls as Caffe does; zero: start from zero.",
    )(func)


def input_options(func: Callable) -> Callable:
    """--inputs and --seed: the arrays a run starts from."""
    func = click.option("--seed", type=int, default=0, show_default=True,
                        help="Seed of the random inputs made when --inputs is not given.")(func)
    func = click.option("--inputs", "inputs_path", type=click.Path(dir_okay=False, path_type=Path),
                        help="Input arrays (.npz, keys = Caffe blob names, time-major).")(func)
    return func


def load(net: Path, weights: Path | None, outputs: str, phase: str,
         stages: tuple[str, ...]) -> api.Net:
    """Loads the net with the selection options applied."""
    names = [name.strip() for name in outputs.split(",") if name.strip()]
    return api.load(net, weights, outputs=names, phase=phase, stages=stages)
