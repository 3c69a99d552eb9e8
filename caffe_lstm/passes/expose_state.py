"""Exposing Caffe's hidden state carry-over as net inputs and outputs (``--state io``).

Without expose_hidden, Caffe starts every Forward of a recurrent layer from the final state of
its previous Forward. An engine keeps no state between calls, so the state becomes explicit:
inputs ``<layer>/h_0`` (and ``<layer>/c_0``) and outputs ``<layer>/h_T`` (``<layer>/c_T``) that
a caller feeds back. That is exactly the layer with expose_hidden switched on.
"""

from __future__ import annotations

import numpy as np

from caffe_lstm.ir.graph import Graph, Node, Value
from caffe_lstm.ops import RecurrentSpec, get_op, recurrent_spec
from caffe_lstm.ops.recurrent import state_widths


def _exposable(node: Node) -> RecurrentSpec | None:
    """The recurrent metadata of a node whose states ``expose_hidden`` can expose, else None."""
    spec = recurrent_spec(node.op)
    return spec if spec is not None and spec.exposable else None


def expose_recurrent_state(graph: Graph) -> bool:
    """Turns expose_hidden on for every LSTM/RNN that has it off; returns whether any changed."""
    changed = False
    for node in graph.nodes:
        spec = _exposable(node)
        if spec is not None and not node.attrs.get("expose_hidden"):
            _expose(graph, node, spec.states)
            changed = True
    return changed


def zero_states(graph: Graph, feeds: dict) -> dict[str, np.ndarray]:
    """Zeros for the initial-state inputs of exposed recurrent layers that ``feeds`` lacks
    (Caffe's state before the first Forward), N read from the layer's fed x or cont (both
    (T, N, …)), else from the prototxt."""
    zeros = {}
    for node in graph.nodes:
        spec = _exposable(node)
        if spec is None or not node.attrs.get("expose_hidden"):
            continue
        batch = _fed_batch(node, spec, feeds)
        for value in node.inputs[-len(spec.states):]:
            if value.producer is None and value.name not in feeds:
                zeros[value.name] = np.zeros((1, batch, value.shape[2]), np.float32)
    return zeros


def _fed_batch(node: Node, spec: RecurrentSpec, feeds: dict) -> int:
    """N of a recurrent layer: axis 1 of its x or its cont where the caller feeds them (the
    words' embedding, say, is computed, but the cont beside it is a net input)."""
    for value in (node.inputs[0], node.inputs[spec.cont_bottom]):
        if value.name in feeds and np.ndim(feeds[value.name]) > 1:
            return int(np.shape(feeds[value.name])[1])
    return node.inputs[0].shape[1]


def needs_state_io(graph: Graph) -> bool:
    """Whether some recurrent layer's cont could be non-zero at t = 0, so that Caffe would
    carry the previous call's state in: a cont fed by the caller, or a non-zero constant.

    A cont that is 0 at t = 0 fully masks the carried state, so zero state is exact.
    """
    return any(_exposable(node) is not None and not node.attrs.get("expose_hidden")
               and _could_start_non_zero(graph, node.inputs[_exposable(node).cont_bottom])
               for node in graph.nodes)


def _could_start_non_zero(graph: Graph, cont: Value) -> bool:
    producer = cont.producer
    if producer is None:
        return True  # a net input: the caller decides
    if not producer.inputs and not producer.weights:
        # a constant (DummyData, ContinuationIndicator): look at its first time step
        values = get_op(producer.op).numpy(None, producer)[producer.outputs.index(cont)]
        return bool(np.any(values[:1] != 0))
    return True  # computed: assume it can


def _expose(graph: Graph, node: Node, names: tuple[str, ...]) -> None:
    batch, widths = node.inputs[0].shape[1], state_widths(node)  # h is num_proj wide in LSTMP
    for name, width in zip(names, widths):
        initial = Value(f"{node.name}/{name}_0", (1, batch, width))
        graph.inputs.append(initial)
        node.inputs.append(initial)
    finals = [Value(f"{node.name}/{name}_T", (1, batch, width))
              for name, width in zip(names, widths)]
    for value in finals:
        value.producer = node
    node.outputs.extend(finals)
    graph.outputs.extend(finals)
    node.attrs["expose_hidden"] = True
