"""Batch-major edges for servers that batch on dim 0 (Triton with ``max_batch_size > 0``).

Caffe's recurrent blobs are time-major, (T, N, ...), and exposed states are (1, N, H); a
server that stacks requests along dim 0 needs N first. ``find_batch_axes`` works out which
axis of every net input and output is N; ``make_batch_major`` then puts a Transpose after each
input and before each output whose batch axis is not 0, so that the graph's own inputs and
outputs are (N, ...) and everything inside keeps Caffe's layout. Batch-first tensors (static
features, images) are left alone.

How the batch axis is found: N is the batch of the recurrent layers (axis 1 of their x), or,
in a net without any, axis 0 of the first input (Caffe's num). An input's candidates are its
axes of size N; each assignment of candidates is tried by inferring shapes with N changed to
another size there. The assignment holds when every layer accepts it, every recurrent layer
then has the new N on axis 1 and its T unchanged, and every output has exactly one axis that
went from N to the new size (its batch axis). Exactly one assignment must hold.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass

from caffe_lstm.analysis.shapes import infer_shapes
from caffe_lstm.errors import CaffeLstmError
from caffe_lstm.ir.graph import Graph, Node, Value, clone_graph
from caffe_lstm.ops import recurrent_spec
from caffe_lstm.ops.recurrent import read_cont

#: Assignments tried at most (each is one shape inference): inputs with several axes of size N.
MAX_TRIALS = 256


class BatchAxisError(CaffeLstmError):
    """A net input or output whose batch axis cannot be determined."""


@dataclass(frozen=True)
class BatchAxes:
    """Which axis is N: per net input and per net output (Caffe's layout), and N itself."""

    batch: int
    inputs: dict[str, int]
    outputs: dict[str, int]


def find_batch_axes(graph: Graph, given: Mapping[str, int] | None = None) -> BatchAxes:
    """The batch axis of every input and output of the shaped ``graph``.

    Args:
        graph: the net (recurrent layers whole, states exposed or not), shapes inferred.
        given: input name -> axis, taken as is (the caller's word where a net is ambiguous).

    Raises:
        BatchAxisError: an input has no axis of size N, several assignments fit, none does,
            or an output has no single batch axis; the message names the tensor.
    """
    given = dict(given or {})
    inputs = {v.name: v for v in graph.inputs}
    for name, axis in given.items():
        _check_given(inputs, name, axis)
    batch = _net_batch(graph, given)
    known = {**_recurrent_axes(graph), **given}
    candidates = {name: ([known[name]] if name in known else _sized(value, batch))
                  for name, value in inputs.items()}
    empty = [name for name, axes in candidates.items() if not axes]
    if empty:
        raise BatchAxisError(
            f"net input '{empty[0]}' {inputs[empty[0]].shape} has no axis of the batch size "
            f"N = {batch}", "", _HINT)
    fits, outputs, reason = _fitting_assignments(graph, candidates, batch)
    return _the_one(graph, candidates, fits, outputs, batch, reason)


def make_batch_major(graph: Graph, axes: BatchAxes) -> bool:
    """Puts N first on the inputs and outputs of ``graph`` (in place): a Transpose after each
    input and before each output whose batch axis is not 0. The graph keeps the tensor names;
    the Caffe-layout values inside are renamed ``<name>/caffe_layout``. Returns whether
    anything changed (shapes are inferred again by the caller)."""
    changed = False
    for index, value in enumerate(graph.inputs):
        axis = axes.inputs[value.name]
        if axis != 0:
            graph.inputs[index] = _transposed_input(graph, value, axis)
            changed = True
    for index, value in enumerate(graph.outputs):
        axis = axes.outputs[value.name]
        if axis != 0:
            graph.outputs[index] = _transposed_output(graph, value, axis)
            changed = True
    return changed


def batch_first(shape: tuple[int, ...], axis: int) -> tuple[int, ...]:
    """``shape`` with axis ``axis`` moved to the front."""
    return (shape[axis], *shape[:axis], *shape[axis + 1:])


# ---- finding the axes ----------------------------------------------------------------------------

_HINT = ("give the input's batch axis (batch_axes={NAME: AXIS}), or serve the net without "
         "batching (max_batch=0)")


def _check_given(inputs: dict[str, Value], name: str, axis: int) -> None:
    if name not in inputs:
        raise BatchAxisError(f"a batch axis is given for '{name}', which is not a net input",
                             "", f"the net inputs are {', '.join(inputs)}")
    if not 0 <= axis < len(inputs[name].shape):
        raise BatchAxisError(f"batch axis {axis} of net input '{name}' is outside its "
                             f"{len(inputs[name].shape)} axes {inputs[name].shape}", "",
                             "axes count from 0")


def _net_batch(graph: Graph, given: dict[str, int]) -> int:
    """N: axis 1 of the first time-major recurrent layer's x, else a given axis, else axis 0
    of the first input."""
    for node in _time_major_recurrent(graph):
        return node.inputs[0].shape[1]
    if given:
        name, axis = next(iter(given.items()))
        return graph.value(name).shape[axis]
    return graph.inputs[0].shape[0]


def _time_major_recurrent(graph: Graph) -> list[Node]:
    """The recurrent layers whose x is (T, N, ...) (Caffe's LSTM/RNN; the fork's Lstm is
    T·N-flattened and is left to the output check)."""
    return [node for node in graph.nodes
            if (spec := recurrent_spec(node.op)) is not None and spec.exposable]


def _recurrent_axes(graph: Graph) -> dict[str, int]:
    """Net inputs a time-major recurrent layer reads directly as its x, its cont or an
    exposed state: N is their axis 1 ((T, N, ...), (1, N, H))."""
    inputs = {id(v): v.name for v in graph.inputs}
    axes = {}
    for node in _time_major_recurrent(graph):
        spec = recurrent_spec(node.op)
        direct = [node.inputs[0]]
        cont = read_cont(node)
        if cont is not None:
            direct.append(cont.value)
        if spec.is_exposed(node):
            direct += node.inputs[-len(spec.states):]
        axes.update({inputs[id(v)]: 1 for v in direct if id(v) in inputs})
    return axes


def _sized(value: Value, batch: int) -> list[int]:
    return [axis for axis, size in enumerate(value.shape) if size == batch]


def _fitting_assignments(graph: Graph, candidates: dict[str, list[int]], batch: int
                         ) -> tuple[list[dict[str, int]], list[dict[str, int]], str]:
    """The assignments (input -> axis) that hold, for each the outputs' batch axes, and why
    the first one that does not hold fails."""
    names = list(candidates)
    if math.prod(len(axes) for axes in candidates.values()) > MAX_TRIALS:
        unsure = [name for name in names if len(candidates[name]) > 1]
        raise BatchAxisError(
            f"too many ways to place N = {batch} on the net inputs ({', '.join(unsure[:3])}"
            f"{' ...' if unsure[3:] else ''} have several axes of that size)", "", _HINT)
    combos = itertools.product(*(candidates[name] for name in names))
    fits, outputs, first_reason = [], [], ""
    for combo in combos:
        assignment = dict(zip(names, combo))
        found = _try(graph, assignment, batch)
        if isinstance(found, str):
            first_reason = first_reason or found
        else:
            fits.append(assignment)
            outputs.append(found)
    return fits, outputs, first_reason


def _try(graph: Graph, assignment: dict[str, int], batch: int) -> dict[str, int] | str:
    """The outputs' batch axes when N changed at ``assignment`` is consistent (an output
    without a single batch axis counts as -1), else the reason it is not."""
    probe = batch + 1
    trial = clone_graph(graph)
    before = {v.name: tuple(v.shape) for v in trial.outputs}
    steps = {node.name: node.inputs[0].shape[0] for node in _time_major_recurrent(trial)}
    for value in trial.inputs:
        shape = list(value.shape)
        shape[assignment[value.name]] = probe
        value.shape = tuple(shape)
    try:
        infer_shapes(trial)
    except CaffeLstmError as exc:
        return f"{exc.where or 'a layer'} refuses another N ({exc.what})"
    for node in _time_major_recurrent(trial):
        x = node.inputs[0].shape
        if x[1] != probe or x[0] != steps[node.name]:
            return f"{node.label} does not get the batch on axis 1 of its input"
    return {v.name: _changed_axis(before[v.name], tuple(v.shape), batch, probe)
            for v in trial.outputs}


def _changed_axis(before: tuple[int, ...], after: tuple[int, ...], batch: int,
                  probe: int) -> int:
    """The one axis that went from N to the probe size, and nothing else changed; else -1."""
    if len(before) != len(after):
        return -1
    changed = [axis for axis, (a, b) in enumerate(zip(before, after)) if a != b]
    if len(changed) == 1 and before[changed[0]] == batch and after[changed[0]] == probe:
        return changed[0]
    return -1


def _the_one(graph: Graph, candidates: dict[str, list[int]], fits: list[dict[str, int]],
             outputs: list[dict[str, int]], batch: int, reason: str) -> BatchAxes:
    if not fits:
        several = [name for name, axes in candidates.items() if len(axes) > 1]
        named = [f"'{name}'" for name in several or candidates]
        suspects = ", ".join(named[:3]) + (f" (and {len(named) - 3} more)" if named[3:] else "")
        raise BatchAxisError(f"the batch N = {batch} of net input(s) {suspects} cannot change "
                             f"through the net: {reason}", "",
                             "a layer that fixes N (a Reshape to explicit dims) keeps the net "
                             "from batching: serve it without batching (max_batch=0); "
                             "or give an input's batch axis (batch_axes={NAME: AXIS})")
    if len(fits) > 1:
        unsure = [name for name in candidates if len({fit[name] for fit in fits}) > 1]
        raise BatchAxisError(
            f"the batch axis of net input '{unsure[0]}' is ambiguous (axes "
            f"{sorted({fit[unsure[0]] for fit in fits})} of {graph.value(unsure[0]).shape} fit)",
            "", _HINT)
    lost = [name for name, axis in outputs[0].items() if axis < 0]
    if lost:
        value = graph.value(lost[0])
        raise BatchAxisError(f"net output '{lost[0]}' {value.shape} has no batch axis of its "
                             f"own (N = {batch} does not appear on exactly one axis)",
                             value.producer.label if value.producer is not None else "",
                             "cut the net before it (outputs=), or serve it without batching")
    return BatchAxes(batch, fits[0], outputs[0])


# ---- the transposes ------------------------------------------------------------------------------


def _transposed_input(graph: Graph, value: Value, axis: int) -> Value:
    """A new input ``value.name`` of batch-major shape; the old value, renamed, is computed
    from it by a Transpose that moves axis 0 back to ``axis``."""
    rank = len(value.shape)
    outer = Value(value.name, batch_first(value.shape, axis))
    value.name = f"{value.name}/caffe_layout"
    # output axis i of the Transpose reads input axis dim[i]: axes 1..axis, then 0, then the rest
    order = [*range(1, axis + 1), 0, *range(axis + 1, rank)]
    graph.nodes.insert(0, Node(f"__batch_major/{outer.name}", "Transpose", [outer], [value],
                               {"dim": order}, origin="batch_major"))
    return outer


def _transposed_output(graph: Graph, value: Value, axis: int) -> Value:
    """A new output ``value.name``: ``value`` (renamed) with ``axis`` moved to the front."""
    rank = len(value.shape)
    outer = Value(value.name, batch_first(value.shape, axis))
    value.name = f"{value.name}/caffe_layout"
    order = [axis, *range(axis), *range(axis + 1, rank)]
    graph.nodes.append(Node(f"__batch_major/{outer.name}", "Transpose", [value], [outer],
                            {"dim": order}, origin="batch_major"))
    return outer
