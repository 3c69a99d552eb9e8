"""The ``caffe-lstm`` command line: argument parsing over the Python API (``caffe_lstm.api``)
and printing; its contract is docs/cli.md."""

from __future__ import annotations

from caffe_lstm.cli.group import UserError, cli

# Each import registers one command on `cli`.
from caffe_lstm.cli import inspect as _inspect  # noqa: F401
from caffe_lstm.cli import run as _run  # noqa: F401
from caffe_lstm.cli import verify as _verify  # noqa: F401
from caffe_lstm.cli import dot as _dot  # noqa: F401
from caffe_lstm.cli import rewrite as _rewrite  # noqa: F401
from caffe_lstm.cli import convert as _convert  # noqa: F401
from caffe_lstm.cli import export as _export  # noqa: F401
from caffe_lstm.cli import weights as _weights  # noqa: F401
from caffe_lstm.cli import triton as _triton  # noqa: F401
from caffe_lstm.cli import serve as _serve  # noqa: F401
from caffe_lstm.cli import bench as _bench  # noqa: F401

__all__ = ["UserError", "cli", "main"]


def main() -> None:
    """Console entry point."""
    cli(prog_name="caffe-lstm")
