"""``caffe-lstm inspect``: layers, shapes, inputs, outputs and recurrent layers of a net."""

from __future__ import annotations

import json
from pathlib import Path

import click

from caffe_lstm import api
from caffe_lstm.analysis.build_facts import MODEL_SUFFIXES
from caffe_lstm.cli.group import cli
from caffe_lstm.cli.options import (GlobalOptions, load, net_argument, pass_options,
                                    selection_options, weights_option)
from caffe_lstm.ops.plugins import listed_plugins


@cli.command()
@net_argument(metavar="NET.prototxt|MODEL.onnx|MODEL.engine")
@weights_option(required=False)
@selection_options
@click.option("--rewritten", is_flag=True,
              help="Show the graph after the recurrent rewrite (loops with their bodies).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
@pass_options
def inspect(options: GlobalOptions, net: Path, weights: Path | None, outputs: str, phase: str,
            stages: tuple[str, ...], rewritten: bool, as_json: bool) -> None:
    """Show the layers with their output and parameter shapes, the inputs and the outputs;
    of an ONNX model or engine built by caffe-lstm, how it was built.

    Recurrent layers are listed as the ones the rewrite expands. Shapes that a data layer
    leaves open show as ?; fields the schema does not know are listed with -v and in --json.
    The plugins loaded (given with --plugin, or installed) are listed with the types they
    define, each with its origin and limits.
    """
    if net.suffix in MODEL_SUFFIXES:
        facts = api.build_facts(net)
        click.echo(json.dumps(facts.as_dict(), indent=2) if as_json
                   else "\n".join(facts.lines()))
        return
    # Shapes a data layer leaves open are shown as unknown; the rewrite needs them all.
    loaded = load(net, weights, outputs, phase, stages, allow_unknown_shapes=not rewritten)
    summary = loaded.summary(rewritten=rewritten)
    plugins = listed_plugins()
    if as_json:
        summary["notes"] = list(loaded.notes)
        summary["unknown"] = [skipped.as_dict() for skipped in loaded.unknown_fields]
        summary["plugins"] = [plugin.as_dict() for plugin in plugins]
        click.echo(json.dumps(summary, indent=2))
        return
    click.echo("\n".join(_text(summary, loaded.missing_weights, weights is not None)
                         + _plugin_lines(plugins)))


def _plugin_lines(plugins: list) -> list[str]:
    """``plugins:`` and one line per plugin with the types it defines (none: no lines)."""
    if not plugins:
        return []
    lines = ["plugins:"]
    for plugin in plugins:
        if plugin.error:
            lines.append(f"  {plugin.label}: not loaded: {plugin.error}")
            continue
        replaced = f" (replacing the built-in {', '.join(plugin.overrides)})" \
            if plugin.overrides else ""
        lines.append(f"  {plugin.label}: {', '.join(plugin.types)}{replaced}"
                     f"  [{plugin.path or plugin.module}]")
        lines += [f"    {op['type']}: origin {op['origin']}; limits: {op['limits'] or 'none'}"
                  for op in plugin.ops()]
    return lines


def _text(summary: dict, missing: list[str], have_weights: bool) -> list[str]:
    lines = ["inputs:"] + [f"  {name}  {_dims(s)}" for name, s in summary["inputs"].items()]
    lines += ["outputs:"] + [f"  {name}  {_dims(s)}" for name, s in summary["outputs"].items()]
    lines += ["layers:"] + [line for layer in summary["layers"] for line in _layer_lines(layer)]
    recurrent = summary["recurrent"]
    lines.append(f"recurrent layers (expanded by the rewrite): "
                 f"{', '.join(recurrent) if recurrent else 'none'}")
    if have_weights and missing:
        lines.append(f"layers without weights in the caffemodel: {', '.join(missing)}")
    return lines


def _layer_lines(layer: dict, indent: str = "  ") -> list[str]:
    shapes = ", ".join(_dims(s) for s in layer["shapes"])
    text = (f"{indent}{layer['name']} ({layer['type']}): {', '.join(layer['bottoms']) or '-'} -> "
            f"{', '.join(layer['tops']) or '-'}  {shapes}")
    if layer["blobs"]:
        text += "  blobs " + ", ".join(_dims(s) for s in layer["blobs"])
    body = [line for inner in layer.get("body", [])
            for line in _layer_lines(inner, indent + "    ")]
    return [text] + body


def _dims(shape: list[int] | None) -> str:
    return "?" if shape is None else "(" + ", ".join(str(d) for d in shape) + ")"
