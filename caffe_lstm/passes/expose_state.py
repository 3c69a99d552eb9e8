"""Exposing Caffe's hidden state carry-over as net inputs and outputs (``--state io``).

Without expose_hidden, Caffe starts every Forward of a recurrent layer from the final state of
its previous Forward. An engine keeps no state between calls, so the state becomes explicit:
inputs ``<layer>/h_0`` (and ``<layer>/c_0``) and outputs ``<layer>/h_T`` (``<layer>/c_T``) that
a caller feeds back. That is exactly the layer with expose_hidden switched on
(``RecurrentSpec.expose``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from caffe_lstm.analysis.profiles import follow_states, state_inputs
from caffe_lstm.errors import CaffeLstmError, ModelLoadError, UnsupportedLayerError
from caffe_lstm.files import arrays_from
from caffe_lstm.ir.graph import Graph, Node, clone_graph
from caffe_lstm.ops import RecurrentSpec, get_op, recurrent_spec
from caffe_lstm.ops.plugins import class_site, plugin_of
from caffe_lstm.ops.recurrent import read_cont
from caffe_lstm.options import State


def _exposable(node: Node) -> RecurrentSpec | None:
    """The recurrent metadata of a node whose states ``expose_hidden`` can expose, else None."""
    spec = recurrent_spec(node.op)
    return spec if spec is not None and spec.can_expose(node) else None


def refuse_hidden_states(graph: Graph) -> None:
    """Refuses ``state="io"`` for a net with a recurrent layer whose type cannot expose its
    states: that layer would silently keep starting from zeros while the others carry state.

    Raises:
        UnsupportedLayerError: naming the first such layer (and its plugin, if one owns it).
    """
    for node in graph.nodes:
        spec = recurrent_spec(node.op)
        if spec is None or spec.is_exposed(node) or spec.can_expose(node):
            continue
        why = ("RecurrentSpec(exposable=False)" if not spec.exposable
               else "a RecurrentSpec whose exposable_if refuses this layer")
        plugin = plugin_of(node.op)
        declared = (f"the {plugin.label} declares {why} for '{node.op}' at "
                    f"{class_site(get_op(node.op))}" if plugin is not None
                    else f"'{node.op}' has {why}")
        raise UnsupportedLayerError(
            f"state='io' makes every recurrent layer's states inputs and outputs, but this "
            f"layer keeps them inside ({declared})", node.label,
            "use state='zero' (each call starts from zero states)")


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
    (Caffe's state before the first Forward), each of the shape its layer gives it at the fed
    shapes (shape inference from the feeds: a CNN front end's images fix N through its
    Reshape), else at the prototxt's."""
    missing = [name for name in state_inputs(graph) if name not in feeds]
    if not missing:
        return {}
    shapes = state_inputs(_shaped_for(graph, feeds), feeds)
    return {name: np.zeros(shapes[name], np.float32) for name in missing}


def _shaped_for(graph: Graph, feeds: dict) -> Graph:
    """``graph``, or a copy shaped for the fed shapes with the unfed states following their
    layers; feeds that do not fit leave ``graph`` (the check of the feeds says why)."""
    fed = {value.name: tuple(np.shape(feeds[value.name])) for value in graph.inputs
           if value.name in feeds and np.ndim(feeds[value.name]) == len(value.shape)}
    if all(fed[value.name] == value.shape for value in graph.inputs if value.name in fed):
        return graph
    shaped = clone_graph(graph)
    for value in shaped.inputs:
        value.shape = fed.get(value.name, value.shape)
    try:
        return follow_states(shaped, feeds)
    except CaffeLstmError:
        return graph


def needs_state_io(graph: Graph) -> bool:
    """Whether some recurrent layer's cont could be non-zero at t = 0, so that Caffe would
    carry the previous call's state in: a cont fed by the caller, computed from run-time
    values, or a constant (folded through any depth of constant layers) non-zero at t = 0.

    A cont that is 0 at t = 0 fully masks the carried state, so zero state is exact.
    """
    return bool(state_io_reasons(graph))


def state_io_reasons(graph: Graph) -> list[str]:
    """Why Caffe would carry the previous call's state in (what ``needs_state_io`` answers):
    for each recurrent layer whose cont could be non-zero at t = 0, its layer and cont."""
    return [f"{node.name}'s cont {_cont_kind(node)}" for node in graph.nodes
            if _exposable(node) is not None and not _exposable(node).is_exposed(node)
            and _exposable(node).carries_state and _could_start_non_zero(node)]


def resolve_state(graph: Graph, state: State | str) -> tuple[State, str]:
    """``state`` with auto resolved (io when some cont could be non-zero at t = 0), and why
    auto chose what it did ("" for a state given as zero or io)."""
    state = State.parse(state, "state")
    if state is not State.AUTO:
        return state, ""
    reasons = state_io_reasons(graph)
    if reasons:
        return State.IO, "auto chose io: " + "; ".join(reasons) + (
            ": Caffe carries the previous call's state in where cont is 1 at t = 0")
    return State.ZERO, "auto chose zero: every cont is 0 at t = 0"


def carried_states(graph: Graph, previous: Mapping[str, np.ndarray] | str | Path
                   ) -> dict[str, np.ndarray]:
    """The final states ``<layer>/h_T``, ``c_T`` among a previous call's outputs (a mapping,
    or the .npz they were saved to) as the initial states ``<layer>/h_0``, ``c_0`` of the
    next call of ``graph`` (state io)."""
    source = str(previous) if isinstance(previous, (str, Path)) else "the arrays"
    finals = arrays_from(previous)
    exposed = clone_graph(graph)
    expose_recurrent_state(exposed)
    initial = {v.name for v in exposed.inputs} - {v.name for v in graph.inputs}
    if not initial:
        raise ModelLoadError("no recurrent layer of this net has a state to carry in (it has "
                             "none, or each takes its state as a net input already)",
                             source, "run it without a previous call's final states")
    carried = {name[:-2] + "_0": array for name, array in finals.items()
               if name.endswith("_T") and name[:-2] + "_0" in initial}
    if not carried:
        wanted = ", ".join(sorted(name[:-2] + "_T" for name in initial))
        raise ModelLoadError(f"no final state of this net's recurrent layers (wanted {wanted})",
                             source, "give the outputs of a previous run with state='io'")
    shapes = {v.name: v.shape for v in exposed.inputs}
    for name, array in carried.items():
        _check_carried(name, np.shape(array), shapes.get(name), source)
    return carried


def _check_carried(name: str, shape: tuple[int, ...], wanted: tuple[int, ...] | None,
                   source: str) -> None:
    """A final state that cannot be this net's initial state, named with the file it came
    from: its rank, or its dim 2 (an LSTM's H, a convolutional state's channels: fixed by the
    weights), differs. The batch (dim 1) and spatial dims follow this call's inputs, so the
    layer checks them when it runs."""
    if wanted is None or (len(shape) == len(wanted) and (len(shape) < 3 or wanted[2] <= 0
                                                         or shape[2] == wanted[2])):
        return
    expected = ", ".join(["1", "N", *map(str, wanted[2:3]), *["…"] * (len(wanted) - 3)])
    raise ModelLoadError(f"final state '{name[:-2]}_T' has shape {tuple(shape)}, this net's "
                         f"'{name}' is ({expected})", source,
                         "give the outputs of a previous run of this net with state='io'")


def _cont_kind(node: Node) -> str:
    cont = read_cont(node)
    if cont is None:
        return "is missing (nothing resets the state)"
    if cont.is_input:
        return f"'{cont.value.name}' is a net input"
    if cont.constant is None:
        return f"'{cont.value.name}' is computed at run time"
    return f"'{cont.value.name}' is a constant, non-zero at t = 0"


def _could_start_non_zero(node: Node) -> bool:
    cont = read_cont(node)
    if cont is None or cont.constant is None:
        return True  # a net input or computed at run time: the caller decides
    return bool(np.any(cont.constant[:1] != 0))
