"""The ``caffe-lstm`` command line: argument parsing over the Python API (``caffe_lstm.api``)
and printing; its contract is docs/cli.md."""

from __future__ import annotations

import importlib
from functools import partial

from caffe_lstm.cli.group import UserError, cli
from caffe_lstm.cli.startup import pause_collector

#: The commands, each in the module of its name (``caffe_lstm.cli.<name>``) that registers it on
#: `cli` when imported: imported when the command is used (group.Commands), not before.
COMMANDS = ("inspect", "run", "verify", "dot", "rewrite", "convert", "export", "weights",
            "triton", "serve", "bench")
for _name in COMMANDS:
    cli.commands.defer(_name, partial(importlib.import_module, f"{__name__}.{_name}"))

__all__ = ["UserError", "cli", "main"]


def main() -> None:
    """Console entry point (the garbage collector waits while the command's modules are
    imported: cli/startup.py)."""
    pause_collector()
    cli(prog_name="caffe-lstm")
