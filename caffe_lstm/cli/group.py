"""The ``caffe-lstm`` command group and its global options; each command module registers
itself on ``cli`` (the package ``caffe_lstm.cli`` imports them all).

The global options work before or after the command name (``caffe-lstm -q convert ...`` and
``caffe-lstm convert ... -q``): every command and subgroup carries them too, hidden from its
``--help``, adding to the same ``GlobalOptions`` the group made.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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


def _size(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    try:
        return None if value is None else parse_size(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


#: The global options: (declarations, click.Option keywords), each defined once for the group
#: (shown in its --help) and for every command (hidden).
GLOBAL_OPTIONS: tuple[tuple[tuple[str, ...], dict[str, Any]], ...] = (
    (("-v", "--verbose"), {"count": True, "help": "More detail (repeatable)."}),
    (("-q", "--quiet"), {"is_flag": True, "help": "Print only errors."}),
    (("--debug",), {"is_flag": True, "help": "Show the traceback of errors."}),
    (("--max-memory",), {"metavar": "SIZE", "callback": _size,
                         "help": f"Refuse nets whose blobs need more than SIZE, e.g. 4G or 512M "
                                 f"(default: ${ENV_VAR}, else 8G)."}),
)


def _late_global(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    """A global option given after the command name: the same meaning as before it."""
    if not value:
        return
    options = ctx.ensure_object(GlobalOptions)
    if param.name == "verbose":
        options.verbose += value
    elif param.name == "max_memory":
        ctx.with_resource(memory_limit(_size(ctx, param, value)))  # for this command only
    else:
        setattr(options, param.name, True)


def _hidden_globals(params: list[click.Parameter]) -> list[click.Parameter]:
    """``params`` with the global options the command does not define itself, hidden."""
    have = {param.name for param in params}
    late = [click.Option(decls, **{**keywords, "callback": _late_global, "hidden": True,
                                   "expose_value": False})
            for decls, keywords in GLOBAL_OPTIONS
            if decls[-1].lstrip("-").replace("-", "_") not in have]
    return [*params, *late]


class _Command(click.Command):
    """A command that also takes the global options after its name."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params = _hidden_globals(self.params)


class _Group(click.Group):
    """Turns the library's user errors into UserError unless --debug asks for the traceback;
    its commands and subgroups take the global options too."""

    command_class = _Command
    group_class = type  # subgroups (weights) are _Groups: their commands take them as well

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params = _hidden_globals(self.params)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except CaffeLstmError as exc:
            if isinstance(ctx.obj, GlobalOptions) and ctx.obj.debug:
                raise
            raise UserError(cli_line(exc)) from None


def _global_options(func: Callable) -> Callable:
    for decls, keywords in reversed(GLOBAL_OPTIONS):
        func = click.option(*decls, **keywords)(func)
    return func


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@_global_options
@click.version_option(package_name="caffe-lstm")
@click.pass_context
def cli(ctx: click.Context, verbose: int, quiet: bool, debug: bool,
        max_memory: int | None) -> None:
    """Take Caffe nets with LSTM/RNN layers to TensorRT and ONNX: inspect, run, rewrite,
    convert, export."""
    ctx.obj = GlobalOptions(verbose=verbose, quiet=quiet, debug=debug)
    if max_memory is not None:
        ctx.with_resource(memory_limit(max_memory))  # for this command only
