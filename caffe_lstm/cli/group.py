"""The ``caffe-lstm`` command group and its global options; each command module registers
itself on ``cli`` when imported, and the package ``caffe_lstm.cli`` names the commands so that
each module is imported only when its command is used (``Commands``).

The global options work before or after the command name (``caffe-lstm -q convert ...`` and
``caffe-lstm convert ... -q``): every command and subgroup carries them too, hidden from its
``--help``, adding to the same ``GlobalOptions`` the group made.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass
from typing import Any

import click

from caffe_lstm.analysis.limits import ENV_VAR, memory_limit, parse_size
from caffe_lstm.cli.startup import resume_collector
from caffe_lstm.errors import CaffeLstmError


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


class Commands(MutableMapping[str, click.Command]):
    """A group's commands by name, each loaded on first use: ``defer(name, load)`` names a
    command whose ``load()`` imports the module that registers it. The names are known without
    loading anything (the group's ``--help`` and "did you mean" list them), a command is loaded
    when looked up (run, its ``--help``, or the group's, which shows every command's summary):
    a process pays only for the commands it uses, ``caffe-lstm run`` not for the serving stack."""

    def __init__(self) -> None:
        self._loaded: dict[str, click.Command] = {}
        self._deferred: dict[str, Callable[[], object]] = {}

    def defer(self, name: str, load: Callable[[], object]) -> None:
        self._deferred[name] = load

    def __getitem__(self, name: str) -> click.Command:
        if name not in self._loaded and name in self._deferred:
            self._deferred[name]()  # imports its module, whose add_command sets it here
            if name not in self._loaded:
                raise RuntimeError(f"loading the command {name!r} did not register it")
        return self._loaded[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._deferred.pop(name, None)
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        if self._deferred.pop(name, None) is None:
            del self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter({**self._deferred, **self._loaded})

    def __len__(self) -> int:
        return len(self._deferred.keys() | self._loaded.keys())


class _Command(click.Command):
    """A command that also takes the global options after its name; starting, it resumes the
    garbage collector ``main`` paused for the imports (cli/startup.py)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params = _hidden_globals(self.params)

    def invoke(self, ctx: click.Context) -> Any:
        resume_collector()
        return super().invoke(ctx)


class _Group(click.Group):
    """Turns the library's user errors into UserError unless --debug asks for the traceback;
    its commands and subgroups take the global options too."""

    command_class = _Command
    group_class = type  # subgroups (weights) are _Groups: their commands take them as well

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params = _hidden_globals(self.params)
        commands, self.commands = self.commands, Commands()
        self.commands.update(commands)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except CaffeLstmError as exc:
            if isinstance(ctx.obj, GlobalOptions) and ctx.obj.debug:
                raise
            from caffe_lstm.cli.words import cli_line  # its patterns compile on an error only

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
