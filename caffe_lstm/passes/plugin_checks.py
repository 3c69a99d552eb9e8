"""A plugin's expansion checked where it is built: the layers its ``expand`` facet appended
through ``b.add`` are shaped at once by their own ``infer`` facets, so that a wrong op, attrs,
bottoms or weights given to the builder is the plugin's error, at the line of its ``b.add``
call, instead of a failure of some later pass blamed on the prototxt."""

from __future__ import annotations

from caffe_lstm.analysis.shapes import ShapeInference
from caffe_lstm.ir.graph import Graph, Node
from caffe_lstm.ops import PluginError
from caffe_lstm.ops.plugins import Plugin, exception_text

HINT = ("a bug of the plugin, not of caffe-lstm: check the type, bottoms, attrs and weights "
        "given to b.add (docs/ops.md)")


def check_plugin_expansion(scratch: Graph, node: Node, sites: dict[int, str],
                           plugin: Plugin) -> None:
    """Shapes the layers ``plugin``'s expansion of ``node`` built (``scratch``; ``sites``: the
    ``b.add`` call of each) from ``node``'s bottoms; the tops must keep the shapes the op's own
    ``infer`` gave. Skipped when a bottom's shape is unknown (a net loaded with open shapes).

    Raises:
        PluginError: naming the plugin, the ``b.add`` call's file:line, the facet and the layer.
    """
    if any(value.shape is None for value in node.inputs):
        return
    promised = [value.shape for value in node.outputs]
    inference = _Tracking()
    try:
        for built in scratch.nodes:
            _shape(inference, built, node, sites, plugin)
        for value, shape in zip(node.outputs, promised):
            if value.shape != shape:
                raise _fault(plugin, node, f"computes top '{value.name}' of shape "
                             f"{value.shape} where the op's infer facet says {shape}", "")
    finally:
        for value, shape in zip(node.outputs, promised):
            value.shape = shape


class _Tracking(ShapeInference):
    """Shape inference that knows the innermost node it was shaping when an error escaped (a
    layer inside a Loop's step body, rather than the Loop)."""

    def __init__(self) -> None:
        super().__init__()
        self.shaping: list[Node] = []

    def visit(self, node: Node, shapes: list) -> list:
        self.shaping.append(node)
        result = super().visit(node, shapes)
        self.shaping.pop()  # not on an error: the failing node stays last
        return result


def _shape(inference: _Tracking, built: Node, node: Node, sites: dict[int, str],
           plugin: Plugin) -> None:
    had_weights = bool(built.weights)
    inference.shaping.clear()
    try:
        inference.visit(built, [value.shape for value in built.inputs])
    except PluginError:
        raise  # a plugin's own facet of a layer it built: named already
    except Exception as exc:
        failing = inference.shaping[-1] if inference.shaping else built
        raise _fault(plugin, node, f"built layer '{failing.name}' ({failing.op}) that its type "
                     f"refuses: {exception_text(exc)}", sites.get(id(failing), "")) from exc
    where = sites.get(id(built), "")
    if not had_weights and built.weights:
        names = ", ".join(value.name.rsplit("/", 1)[-1] for value in built.weights)
        built.weights = []
        raise _fault(plugin, node, f"built layer '{built.name}' ({built.op}) without the "
                     f"weights its type needs ({names})", where)


def _fault(plugin: Plugin, node: Node, problem: str, where: str) -> PluginError:
    site = f" ({where}, in expand)" if where else ""
    return PluginError(f"the expand facet of '{node.op}' of the {plugin.label} {problem}{site}",
                       node.label, HINT)
