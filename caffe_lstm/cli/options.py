"""Options shared by several commands, as decorators: each option defined once, its choices,
default and help text made from ``caffe_lstm.options`` where the API shares the mode."""

from __future__ import annotations

import re
from pathlib import Path
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import click

from caffe_lstm import api
from caffe_lstm.cli.group import GlobalOptions
from caffe_lstm.options import (DEFAULT_OPSET, MAX_OPSET, MIN_OPSET, Choice, LstmOp, Profile,
                                Runtime, State, describe)

if TYPE_CHECKING:
    from caffe_lstm.analysis.build_facts import BuildFacts


pass_options = click.make_pass_decorator(GlobalOptions, ensure=True)


def say_auto_state(options: GlobalOptions, facts: BuildFacts | None) -> None:
    """When --state auto chose state inputs and outputs: says so, and why (the cont)."""
    if facts is not None and facts.state == State.IO and facts.state_reason:
        options.say(f"state: {facts.state_reason} (--state zero starts each call from zero)")

_EXISTING_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)


def net_argument(func: Callable | None = None, *, metavar: str = "NET.prototxt") -> Callable:
    """The net definition, the one positional argument (``metavar``: what it may be)."""
    decorate = click.argument("net", metavar=metavar, type=_EXISTING_FILE)
    return decorate if func is None else decorate(func)


def optional_net_argument(func: Callable) -> Callable:
    """The net definition, where a command can do without one (``bench --triton``)."""
    return click.argument("net", metavar="[NET.prototxt]", type=_EXISTING_FILE,
                          required=False)(func)


def weights_option(required: bool) -> Callable:
    return click.option("-w", "--weights", type=_EXISTING_FILE, required=required,
                        help="Trained weights (.caffemodel).")


#: Where the --shape callbacks leave the static shapes (NAME:DIMS) for ``load``: in the
#: command's context, so that commands need not pass them along.
STATIC_SHAPES = "caffe_lstm.static_shapes"


def parse_dims(text: str, spec: str) -> tuple[int, ...]:
    """``10x3x227x227`` -> (10, 3, 227, 227); every dim an integer >= 1."""
    return parse_counts(text, spec, "x", "dim")


def parse_counts(text: str, spec: str, separator: str, noun: str) -> tuple[int, ...]:
    """``text`` split at ``separator`` into integers >= 1 (``noun``: what each is, for the
    message; ``spec``: the whole value given, quoted in it)."""
    try:
        counts = tuple(int(part) for part in text.split(separator))
    except ValueError:
        raise click.BadParameter(f"'{spec}': {noun}s are integers joined by "
                                 f"'{separator}'") from None
    if min(counts) < 1:
        raise click.BadParameter(f"'{spec}': every {noun} must be >= 1")
    return counts


def parse_static_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """``data:10x3x227x227`` -> ("data", (10, 3, 227, 227)); the name may hold ':'."""
    name, sep, dims = text.rpartition(":")
    if not sep or not name:
        raise click.BadParameter(f"'{text}' is not NAME:DIMS (e.g. data:10x3x227x227)")
    return name, parse_dims(dims, text)


def remember_static_shapes(ctx: click.Context, shapes: dict[str, tuple[int, ...]]) -> None:
    """Keeps NAME:DIMS shapes for ``load`` (see STATIC_SHAPES)."""
    ctx.meta.setdefault(STATIC_SHAPES, {}).update(shapes)


def parse_shape(text: str) -> tuple[str, Profile]:
    """``data:1x1x64:20x1x64:400x1x64`` -> ("data", (min, opt, max)); names may hold ':'."""
    parts = text.split(":")
    if len(parts) < 4:
        raise click.BadParameter(
            f"'{text}' is not NAME:MIN:OPT:MAX (e.g. data:1x2x8:12x2x8:64x2x8)")
    name = ":".join(parts[:-3])
    low, opt, high = (parse_dims(part, text) for part in parts[-3:])
    if not len(low) == len(opt) == len(high):
        raise click.BadParameter(f"'{text}': MIN, OPT and MAX need the same rank and dims >= 1")
    if not all(a <= b <= c for a, b, c in zip(low, opt, high)):
        raise click.BadParameter(f"'{text}': each dim needs MIN <= OPT <= MAX")
    return name, Profile(low, opt, high)


_DIMS = re.compile(r"-?\d+(x-?\d+)*")


def _is_range(text: str) -> bool:
    """Whether ``text`` ends in three dims fields (NAME:MIN:OPT:MAX), not one (NAME:DIMS)."""
    parts = text.split(":")
    return len(parts) >= 4 and all(_DIMS.fullmatch(part) for part in parts[-3:])


def _static_shapes(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> None:
    remember_static_shapes(ctx, dict(parse_static_shape(value) for value in values))


def _shapes_and_ranges(ctx: click.Context, param: click.Parameter,
                       values: tuple[str, ...]) -> dict[str, Profile]:
    """The ranges as {name: (min, opt, max)}; NAME:DIMS shapes go to ``load`` (static), and a
    range shapes its input at OPT for ``load`` where no NAME:DIMS does (an input a data layer
    leaves open needs no second --shape)."""
    ranges = dict(parse_shape(value) for value in values if _is_range(value))
    statics = dict(parse_static_shape(value) for value in values if not _is_range(value))
    remember_static_shapes(ctx, {name: profile.opt for name, profile in ranges.items()}
                           | statics)
    return ranges


def shape_option(ranges: str | None = None) -> Callable:
    """--shape NAME:DIMS (repeatable): the shape of a net input, e.g. one a data layer leaves
    open; handed to ``load`` through the context, not as an argument. With ``ranges`` (their
    help text) it also takes NAME:MIN:OPT:MAX ranges, given to the command as ``shapes``."""
    return click.option(
        "--shape", "shapes" if ranges else "static_shapes", multiple=True,
        expose_value=ranges is not None, callback=_shapes_and_ranges if ranges else _static_shapes,
        metavar="NAME:MIN:OPT:MAX|NAME:DIMS" if ranges else "NAME:DIMS",
        help=(ranges + " NAME:DIMS gives a static shape; a range also shapes an input a "
              "data layer leaves open, at OPT."
              if ranges else "Shape a net input, e.g. data:10x3x227x227: one a data layer "
              "leaves open, or another shape than the prototxt's (repeatable)."))


#: Where --plugin and --python-path leave their values for ``load`` (as STATIC_SHAPES).
PLUGINS, PYTHON_PATH = "caffe_lstm.plugins", "caffe_lstm.python_path"


def _remember(key: str) -> Callable:
    def callback(ctx: click.Context, param: click.Parameter, value) -> None:
        if value:
            ctx.meta[key] = value
    return callback


def plugin_options(func: Callable) -> Callable:
    """--plugin FILE.py|MODULE (repeatable) and --python-path DIR, handed to ``load`` through
    the context (docs/plugins.md)."""
    func = click.option(
        "--python-path", type=click.Path(exists=True, file_okay=False, path_type=Path),
        expose_value=False, callback=_remember(PYTHON_PATH), metavar="DIR",
        help="Import the modules of Caffe Python layers from DIR (Caffe's PYTHONPATH) and run "
             "them with numpy.")(func)
    return click.option(
        "--plugin", "plugins", multiple=True, expose_value=False, callback=_remember(PLUGINS),
        metavar="FILE.py|MODULE",
        help="Load layer types written outside caffe-lstm from a .py file or a module "
             "(repeatable; docs/plugins.md).")(func)


def selection_options(func: Callable | None = None, *, ranges: str | None = None) -> Callable:
    """--outputs, --phase, --stage and --shape: which part of the net to load, and how
    (``ranges``: --shape also takes NAME:MIN:OPT:MAX, see ``shape_option``). Used bare
    (``@selection_options``) or called (``@selection_options(ranges=...)``)."""
    def decorate(func: Callable) -> Callable:
        func = plugin_options(func)  # --plugin, --python-path: layer types from outside
        func = shape_option(ranges)(func)
        func = click.option("--stage", "stages", multiple=True, metavar="NAME",
                            help="Select layers by their include/exclude stage rules "
                                 "(repeatable).")(func)
        func = click.option("--phase", type=click.Choice(["TEST", "TRAIN"]), default="TEST",
                            show_default=True, help="Select layers by their phase rules.")(func)
        return click.option("--outputs", metavar="NAME[,NAME...]", default="",
                            help="Make these blobs the outputs; drop layers not needed for "
                                 "them.")(func)
    return decorate if func is None else decorate(func)


def choice_option(*decls: str, members: Sequence[Choice], default: Choice | None,
                  lead: str = "", shown_default: str | bool = True) -> Callable:
    """An option choosing one of ``members`` (values as the choices, ``default``'s value as the
    default; None: not given, ``shown_default`` says what then); the help is ``lead`` then
    each member's own help."""
    help_text = " ".join(part for part in (lead, describe(members)) if part)
    return click.option(*decls, type=click.Choice([m.value for m in members]),
                        default=None if default is None else default.value,
                        show_default=shown_default,
                        help=help_text + ("." if describe(members) else ""))


def state_option(*members: State, default: State | None, lead: str = "",
                 shown_default: str | bool = True) -> Callable:
    """--state: Caffe's state carry-over between Forward calls (as inputs/outputs or not)."""
    return choice_option("--state", "recurrent_state", members=members, default=default,
                         lead=lead, shown_default=shown_default)


def lstm_op_option(default: LstmOp, lead: str = "") -> Callable:
    """--lstm-op: how the ONNX model writes each recurrent layer (``lead`` says which model)."""
    return choice_option("--lstm-op", "lstm_op", members=list(LstmOp), default=default,
                         lead=lead)


def say_lstm_ops(options: GlobalOptions, net: api.Net, lstm_op: str, state: str) -> None:
    """One line per recurrent layer: what the ONNX model holds for it (``--lstm-op auto``)."""
    for layer, (chosen, why) in net.onnx_lstm_ops(lstm_op, state=state).items():
        form = ("ONNX's own operator" if chosen is LstmOp.NATIVE else
                "one Scan" + (f", since {why}" if why else ""))
        options.say(f"{layer}: {form}")


def runtime_option(lead: str) -> Callable:
    """--runtime: the TensorRT runtime, ``lead`` saying what for."""
    return choice_option("--runtime", members=list(Runtime), default=Runtime.AUTO, lead=lead)


def opset_option(lead: str) -> Callable:
    """--opset: the ONNX opset (``lead`` says of which model)."""
    return click.option("--opset", type=int, default=DEFAULT_OPSET, show_default=True,
                        help=f"{lead} ({MIN_OPSET} to {MAX_OPSET}).")


def backend_options(func: Callable) -> Callable:
    """--backend, --engine and --onnx: what runs the net (``model_file`` checks them)."""
    func = click.option("--onnx", "onnx_model", type=_EXISTING_FILE,
                        help="The ONNX model for --backend onnxruntime (from `caffe-lstm "
                             "export`).")(func)
    func = click.option("--engine", type=_EXISTING_FILE,
                        help="The engine for --backend tensorrt (from `caffe-lstm convert`)."
                        )(func)
    return click.option(
        "--backend", type=click.Choice(["numpy", "tensorrt", "onnxruntime"]), default="numpy",
        show_default=True,
        help="numpy on the CPU, a built engine on a GPU (--engine), or an ONNX model with "
             "onnxruntime (--onnx; without it the net is exported in memory).")(func)


def model_file(backend: str, engine: Path | None, onnx_model: Path | None) -> Path | None:
    """The model file --backend runs (None: the net itself); a usage error for --engine or
    --onnx given without their backend, or tensorrt without an engine."""
    if backend == "tensorrt" and engine is None:
        raise click.UsageError("--backend tensorrt needs --engine MODEL.engine")
    if engine is not None and backend != "tensorrt":
        raise click.UsageError("--engine goes with --backend tensorrt")
    if onnx_model is not None and backend != "onnxruntime":
        raise click.UsageError("--onnx goes with --backend onnxruntime")
    return engine if backend == "tensorrt" else onnx_model


def input_options(func: Callable) -> Callable:
    """--inputs and --seed: the arrays a run starts from."""
    func = click.option("--seed", type=int, default=0, show_default=True,
                        help="Seed of the random inputs made when --inputs is not given.")(func)
    func = click.option("--inputs", "inputs_path", type=click.Path(dir_okay=False, path_type=Path),
                        help="Input arrays (.npz, keys = Caffe blob names, time-major).")(func)
    return func


def output_names(outputs: str) -> list[str]:
    """--outputs NAME[,NAME...] as names."""
    return [name.strip() for name in outputs.split(",") if name.strip()]


def load(net: Path, weights: Path | None, outputs: str, phase: str,
         stages: tuple[str, ...], allow_unknown_shapes: bool = False) -> api.Net:
    """Loads the net with the selection options applied (``--shape`` from the context), then
    prints its notes (unless -q) and, with -v, one warning per unknown field it skipped, on
    standard error."""
    names = output_names(outputs)
    ctx = click.get_current_context(silent=True)
    shapes = ctx.meta.get(STATIC_SHAPES, {}) if ctx is not None else {}
    meta = ctx.meta if ctx is not None else {}
    loaded = api.load(net, weights, outputs=names, phase=phase, stages=stages, shapes=shapes,
                      allow_unknown_shapes=allow_unknown_shapes,
                      plugins=meta.get(PLUGINS, ()), python_path=meta.get(PYTHON_PATH))
    options = ctx.find_object(GlobalOptions) if ctx is not None else None
    _report(loaded, options or GlobalOptions(), str(net))
    return loaded


def _report(loaded: api.Net, options: GlobalOptions, file: str) -> None:
    if options.quiet:
        return
    for note in loaded.notes:
        click.echo(f"note: {note}", err=True)
    if options.verbose:
        for skipped in loaded.unknown_fields:
            click.echo(f"warning: {skipped.warning(file)}", err=True)
