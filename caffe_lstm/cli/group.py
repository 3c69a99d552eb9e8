"""The ``caffe-lstm`` command group and its global options; each command module registers
itself on ``cli`` (the package ``caffe_lstm.cli`` imports them all)."""

from __future__ import annotations

import click

from caffe_lstm.analysis.limits import ENV_VAR, memory_limit, parse_size
from caffe_lstm.cli.options import GlobalOptions
from caffe_lstm.cli.words import cli_line
from caffe_lstm.errors import CaffeLstmError


class UserError(click.ClickException):
    """A CaffeLstmError on its way out: one ``error:`` line on stderr, exit status 1."""

    exit_code = 1

    def show(self, file=None) -> None:
        click.echo(f"error: {self.message}", err=True, file=file)


class _Group(click.Group):
    """Turns the library's user errors into UserError unless --debug asks for the traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except CaffeLstmError as exc:
            if isinstance(ctx.obj, GlobalOptions) and ctx.obj.debug:
                raise
            raise UserError(cli_line(exc)) from None


def _size(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    try:
        return None if value is None else parse_size(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="More detail (repeatable).")
@click.option("-q", "--quiet", is_flag=True, help="Print only errors.")
@click.option("--debug", is_flag=True, help="Show the traceback of errors.")
@click.option("--max-memory", metavar="SIZE", callback=_size,
              help=f"Refuse nets whose blobs need more than SIZE, e.g. 4G or 512M "
                   f"(default: ${ENV_VAR}, else 8G).")
@click.version_option(package_name="caffe-lstm")
@click.pass_context
def cli(ctx: click.Context, verbose: int, quiet: bool, debug: bool,
        max_memory: int | None) -> None:
    """Take Caffe nets with LSTM/RNN layers to TensorRT and ONNX: inspect, run, rewrite,
    convert, export."""
    ctx.obj = GlobalOptions(verbose=verbose, quiet=quiet, debug=debug)
    if max_memory is not None:
        ctx.with_resource(memory_limit(max_memory))  # for this command only

