"""Exposing Caffe's hidden state carry-over as net inputs and outputs (``--state io``).

Without expose_hidden, Caffe starts every Forward of a recurrent layer from the final state of
its previous Forward. An engine keeps no state between calls, so the state becomes explicit:
inputs ``<layer>/h_0`` (and ``<layer>/c_0``) and outputs ``<layer>/h_T`` (``<layer>/c_T``) that
a caller feeds back. That is exactly the layer with expose_hidden switched on
(``RecurrentSpec.expose``).
"""

from __future__ import annotations

import numpy as np

from caffe_lstm.ir.graph import Graph, Node
from caffe_lstm.ops import RecurrentSpec, recurrent_spec
from caffe_lstm.ops.recurrent import read_cont


def _exposable(node: Node) -> RecurrentSpec | None:
    """The recurrent metadata of a node whose states ``expose_hidden`` can expose, else None."""
    spec = recurrent_spec(node.op)
    return spec if spec is not None and spec.can_expose(node) else None


def expose_recurrent_state(graph: Graph) -> bool:
    """Exposes the states of every LSTM/RNN that hides them; returns whether any changed."""
    changed = False
    for node in graph.nodes:
        spec = _exposable(node)
        if spec is not None and not spec.is_exposed(node):
            initial, finals = spec.expose(node)
            graph.inputs.extend(initial)
            graph.outputs.extend(finals)
            changed = True
    return changed


def zero_states(graph: Graph, feeds: dict) -> dict[str, np.ndarray]:
    """Zeros for the initial-state inputs of exposed recurrent layers that ``feeds`` lacks
    (Caffe's state before the first Forward), N read from the layer's fed x or cont (both
    (T, N, …)), else from the prototxt."""
    zeros = {}
    for node in graph.nodes:
        spec = _exposable(node)
        if spec is None or not spec.is_exposed(node):
            continue
        batch = _fed_batch(node, feeds)
        for value in node.inputs[-len(spec.states):]:
            if value.producer is None and value.name not in feeds:
                zeros[value.name] = np.zeros((1, batch, value.shape[2]), np.float32)
    return zeros


def _fed_batch(node: Node, feeds: dict) -> int:
    """N of a recurrent layer: axis 1 of its x or its cont where the caller feeds them (the
    words' embedding, say, is computed, but the cont beside it is a net input)."""
    cont = read_cont(node)
    for value in (node.inputs[0], *([cont.value] if cont else [])):
        if value.name in feeds and np.ndim(feeds[value.name]) > 1:
            return int(np.shape(feeds[value.name])[1])
    return node.inputs[0].shape[1]


def needs_state_io(graph: Graph) -> bool:
    """Whether some recurrent layer's cont could be non-zero at t = 0, so that Caffe would
    carry the previous call's state in: a cont fed by the caller, computed from run-time
    values, or a constant (folded through any depth of constant layers) non-zero at t = 0.

    A cont that is 0 at t = 0 fully masks the carried state, so zero state is exact.
    """
    return any(_exposable(node) is not None and not _exposable(node).is_exposed(node)
               and _could_start_non_zero(node) for node in graph.nodes)


def _could_start_non_zero(node: Node) -> bool:
    cont = read_cont(node)
    if cont is None or cont.constant is None:
        return True  # a net input or computed at run time: the caller decides
    return bool(np.any(cont.constant[:1] != 0))
