"""Upgraded, filtered Caffe layers -> the IR graph.

Caffe's in-place tops are renamed so that every value has one producer: the last version of a
blob keeps the Caffe name (what users see in outputs), earlier versions are called
``<blob>@<producing layer>``. Input layers become the net's input values.

The importer is the context (``ctx``) of the ops' ``parse`` facet: an op holding a subgraph (our
``Loop`` type, written by ``caffe-lstm rewrite``) calls its ``import_subgraph``, which imports the
body's layers (``loop_param.layer``) by the same code, its inputs being the blobs the op names.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from caffe_lstm.analysis.limits import check_dims
from caffe_lstm.errors import (CaffeLstmError, GraphError, ModelLoadError, UnsupportedLayerError,
                               layer_where)
from caffe_lstm.frontend.params import Params, to_params
from caffe_lstm.frontend.plugin_params import has_own_message, plugin_params, with_fork_fields
from caffe_lstm.frontend.upgrade import SourceLayer
from caffe_lstm.ir.graph import Graph, Node, Value
from caffe_lstm.ops import get_op
from caffe_lstm.ops.plugins import DOC, load_installed_plugins
from caffe_lstm.ops.python_layer import Python

#: Caffe's Python layer type, run only when the API is given ``python_path``.
PYTHON = Python.type

#: Layer types that produce the net's inputs instead of becoming nodes.
INPUT_TYPES = ("Input",)


def import_layers(layers: Sequence[SourceLayer], file: str, outputs: Sequence[str] = (),
                  name: str = "", python_layers: bool = False) -> Graph:
    """Builds the graph of ``layers``.

    Args:
        layers: V2 layers in net order, already filtered for the phase.
        file: the prototxt path, for messages.
        outputs: blob names that become the net outputs; layers not needed for them are dropped.
            Empty: the tops no layer consumes.
        name: the net's name.
        python_layers: Caffe ``Python`` layers are run (the API was given ``python_path``);
            otherwise they are unsupported types.

    Raises:
        UnsupportedLayerError: lists every layer type that cannot be handled, with layer names.
        GraphError: unknown bottoms or outputs, wrong bottom/top counts.
    """
    layers = needed_layers(layers, outputs, file) if outputs else list(layers)
    check_supported(layers, file, python_layers)
    importer = Importer(layers, file, name)
    for source in layers:
        importer.add(source)
    return importer.finish(outputs)


def needed_layers(layers: Sequence[SourceLayer], outputs: Sequence[str],
                  file: str) -> list[SourceLayer]:
    """The layers needed to compute ``outputs``, found by walking the layers backwards."""
    produced = {top for source in layers for top in source.layer.top}
    unknown = [name for name in outputs if name not in produced]
    if unknown:
        raise GraphError(f"outputs= names unknown blob(s) {', '.join(unknown)}", file,
                         "run `caffe-lstm inspect` to list the blob names")
    needed, kept = set(outputs), []
    for source in reversed(layers):
        if needed.intersection(source.layer.top):
            kept.append(source)
            needed.update(source.layer.bottom)
    return kept[::-1]


def check_supported(layers: Sequence[SourceLayer], file: str,
                    python_layers: bool = False) -> None:
    """Lists every layer type without an op (Input excepted; Python layers unless
    ``python_layers``) in one UnsupportedLayerError; the installed plugins (entry points) are
    loaded first when some type is unknown."""
    unsupported = _unsupported(layers, python_layers)
    if any(get_op(t) is None for t in unsupported):
        load_installed_plugins()
        unsupported = _unsupported(layers, python_layers)
    if unsupported:
        listing = "; ".join(f"{t or '(empty type)'} ({', '.join(names)}{_fork_note(t)})"
                            for t, names in unsupported.items())
        python = ", run Python layers with python_path=DIR" if PYTHON in unsupported else ""
        raise UnsupportedLayerError(
            f"unsupported layer types: {listing}", file,
            f"load a plugin that defines them (plugins=[...], see {DOC}){python}, or, if they "
            "only post-process the result, cut them off with outputs=[NAME, ...]")


#: Fork layer types seen in public prototxts whose forward pass no public source gives: the
#: error names the fork, so the user knows where the math lives (docs/recurrent-extensions.md).
SOURCELESS_FORK_TYPES = {
    "LSTMController": "JEDDi-Net's LSTM with a controller bottom, whose layer source is not "
                      "public",
    "LSTMTopic": "JEDDi-Net's LSTM with a topic-controller bottom, whose layer source is not "
                 "public",
}


def _fork_note(layer_type: str) -> str:
    note = SOURCELESS_FORK_TYPES.get(layer_type)
    return f": {note}" if note else ""


def _unsupported(layers: Sequence[SourceLayer], python_layers: bool) -> dict[str, list[str]]:
    unsupported: dict[str, list[str]] = defaultdict(list)
    for source in layers:
        layer = source.layer
        if layer.type in INPUT_TYPES:
            continue
        op = get_op(layer.type)
        # a Python layer imports user code: only when asked (python_path), unless a plugin
        # replaced the type
        if op is None or (op is Python and not python_layers):
            unsupported[layer.type].append(layer.name)
    return unsupported


class Importer:
    """Walks the layers once, creating values and nodes and renaming in-place tops; the context
    handed to each op's ``parse`` facet."""

    def __init__(self, layers: Sequence[SourceLayer], file: str, name: str) -> None:
        self.file = file
        self.graph = Graph(name=name)
        #: the node being parsed and its param message (what ``import_subgraph`` reads)
        self._parsing: tuple[Node, Any] | None = None
        #: the layer being parsed (what ``layer_param`` reads)
        self._source: SourceLayer | None = None
        self.current: dict[str, Value] = {}  # Caffe blob name -> its latest value
        self.remaining = defaultdict(int)  # Caffe blob name -> definitions still to come
        for source in layers:
            for top in source.layer.top:
                self.remaining[top] += 1

    def add(self, source: SourceLayer) -> None:
        layer = source.layer
        where = f"{self.file}:{source.line}" if source.line else self.file
        self._check_tops(layer, where)
        if layer.type in INPUT_TYPES:
            self._add_inputs(source, where)
            return
        inputs = [self._bottom(blob, layer, where) for blob in layer.bottom]
        outputs = [self._new_value(top, layer.name) for top in layer.top]
        node = Node(layer.name, layer.type, inputs, outputs, where=where)
        node.attrs = self._parse(node, source)
        _check_counts(node)
        self.graph.nodes.append(node)

    def _check_tops(self, layer, where: str) -> None:
        """Caffe's rule (net.cpp AppendTop): a blob is produced once, after which a layer may
        only rewrite it in place (top i named like bottom i)."""
        defined = set(self.current)
        for index, top in enumerate(layer.top):
            in_place = index < len(layer.bottom) and layer.bottom[index] == top
            if top in defined and not in_place:
                raise GraphError(
                    f"top '{top}' is produced by more than one layer",
                    f"{layer_where(layer.name, layer.type)} at {where}",
                    "rename the top; a blob can only be rewritten in place (top i = bottom i)")
            defined.add(top)

    def _bottom(self, blob: str, layer, where: str) -> Value:
        if blob not in self.current:
            raise GraphError(
                f"bottom '{blob}' is not produced by any earlier layer",
                f"{layer_where(layer.name, layer.type)} at {where}",
                "check the spelling, the layer order and the layers' include/exclude rules")
        return self.current[blob]

    def _new_value(self, top: str, layer_name: str) -> Value:
        """A new version of blob ``top``; only its last version keeps the plain name."""
        self.remaining[top] -= 1
        is_last = self.remaining[top] == 0
        taken = any(v.name == top for v in self.graph.inputs)
        value = Value(top if is_last and not taken else f"{top}@{layer_name}")
        self.current[top] = value
        return value

    def _add_inputs(self, source: SourceLayer, where: str) -> None:
        layer = source.layer
        shapes = source.input_shapes if source.input_shapes is not None \
            else input_shapes(layer, where)
        for top, shape in zip(layer.top, shapes):
            if shape is not None:
                check_dims(shape, f"input '{top}'",
                           f"{layer_where(layer.name, layer.type)} at {where}")
        for top, shape in zip(layer.top, shapes):
            # A net input keeps its plain name (it is the key users feed); in-place writes
            # into it later get "@layer" names.
            self.remaining[top] -= 1
            value = Value(top, shape)
            self.current[top] = value
            self.graph.inputs.append(value)

    def add_body_input(self, name: str) -> None:
        """A loop body input: a value without a producer (the Loop feeds it every step)."""
        value = Value(name)
        self.current[name] = value
        self.graph.inputs.append(value)

    def finish_body(self, outputs: Sequence[str], loop: Node) -> Graph:
        """The body graph: every input kept (their positions matter), outputs by name."""
        unknown = [name for name in outputs if name not in self.current]
        if unknown:
            raise GraphError(f"loop_param.output names unknown blob(s) {', '.join(unknown)}",
                             loop.label, "name blobs that the body's layers produce")
        self.graph.outputs = [self.current[name] for name in outputs]
        return self.graph

    def _parse(self, node: Node, source: SourceLayer) -> dict:
        """The node's attributes, from its op's ``parse`` facet on the layer's param message;
        a refusal is located at the layer."""
        op = get_op(node.op)
        if not op.param:
            return op.parse(self, None)
        # a plugin's own message (not in our schema) is read from the prototxt's text
        message = None if has_own_message(op) else getattr(source.layer, op.param)
        outer, self._parsing = self._parsing, (node, message)
        outer_source, self._source = self._source, source
        try:
            params = plugin_params(op, source, self.file) if message is None \
                else with_fork_fields(op, source, to_params(message), self.file)
            return op.parse(self, params)
        except CaffeLstmError as exc:
            exc.where = exc.where or node.label
            raise type(exc)(exc.what, exc.where, exc.hint) from None
        finally:
            self._parsing, self._source = outer, outer_source

    def layer_param(self, field: str) -> Params:
        """Another param message of the layer being parsed (in caffe-lstm's schema), as the
        view ``parse`` gets its own message in."""
        layer = self._source.layer
        if field not in layer.DESCRIPTOR.fields_by_name or \
                layer.DESCRIPTOR.fields_by_name[field].message_type is None:
            raise ModelLoadError(f"'{field}' is not a param message of caffe-lstm's schema",
                                 "", "read a LayerParameter field such as convolution_param")
        return to_params(getattr(layer, field))

    def import_subgraph(self, inputs: Sequence[str], outputs: Sequence[str]) -> Graph:
        """The layers of the param message being parsed (``loop_param.layer``) as a graph:
        ``inputs`` are values without a producer (the op feeds them), in order; ``outputs``
        name blobs the body's layers produce."""
        node, message = self._parsing
        sources = [SourceLayer(layer) for layer in message.layer]
        check_supported(sources, self.file)
        body = Importer(sources, self.file, f"{node.name}/step")
        for name in inputs:
            body.add_body_input(name)
        for source in sources:
            body.add(source)
        return body.finish_body(outputs, node)

    def finish(self, outputs: Sequence[str]) -> Graph:
        graph = self.graph
        used = {id(v) for node in graph.nodes for v in node.inputs}
        graph.inputs = [v for v in graph.inputs if id(v) in used]
        if outputs:
            graph.outputs = [self.current[name] for name in outputs]
        else:
            graph.outputs = [v for node in graph.nodes for v in node.outputs if id(v) not in used]
        return graph


def _check_counts(node: Node) -> None:
    op = get_op(node.op)
    for kind, found, (low, high) in (("bottoms", len(node.inputs), op.n_bottoms),
                                     ("tops", len(node.outputs), op.n_tops)):
        if found < low or (high is not None and found > high):
            wanted = f"{low}" if low == high else f"{low} to {high if high is not None else 'any'}"
            raise GraphError(f"expected {wanted} {kind}, found {found}", node.label,
                             f"see the {node.op} layer's definition in Caffe")


def input_shapes(layer, where: str) -> list[tuple[int, ...] | None]:
    """Shapes of an Input layer's tops (None where the layer gives none)."""
    tops = len(layer.top)
    shapes = [tuple(s.dim) for s in layer.input_param.shape]
    if len(shapes) == 1:
        shapes = shapes * tops
    if not shapes:
        return [None] * tops
    if len(shapes) != tops:
        raise GraphError(f"{tops} tops but {len(shapes)} shapes",
                         f"{layer_where(layer.name, layer.type)} at {where}",
                         "give one shape, or one shape per top")
    return shapes

