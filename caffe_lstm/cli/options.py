"""Options shared by several commands, as decorators."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import click

from caffe_lstm.frontend.loader import LoadedNet, load_net
from caffe_lstm.frontend.netstate import NetState


@dataclass
class AppState:
    """The global options, reachable from every command."""

    verbose: int = 0
    quiet: bool = False
    debug: bool = False

    def say(self, text: str = "") -> None:
        """Prints ``text`` unless --quiet."""
        if not self.quiet:
            click.echo(text)


pass_state = click.make_pass_decorator(AppState, ensure=True)

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
                        help="Select layers by their include/exclude stage rules (repeatable).")(func)
    func = click.option("--phase", type=click.Choice(["TEST", "TRAIN"]), default="TEST",
                        show_default=True, help="Select layers by their phase rules.")(func)
    func = click.option("--outputs", metavar="NAME[,NAME...]", default="",
                        help="Make these blobs the outputs; drop layers not needed for them.")(func)
    return func


def load(net: Path, weights: Path | None, outputs: str, phase: str,
         stages: tuple[str, ...]) -> LoadedNet:
    """Loads the net with the selection options applied."""
    names = [name.strip() for name in outputs.split(",") if name.strip()]
    state = NetState(phase=phase, stages=frozenset(stages))
    return load_net(net, weights, state=state, outputs=names)
