"""A numpy evaluator of a real TensorRT ``INetworkDefinition``.

There is no GPU here or in CI, so engines cannot run. To check that the emitter wires a network
correctly (gate slices, transposes, loop plumbing), this module walks the network through the
TensorRT Python API only — its layers, their parameters, their input tensors — and evaluates it
with numpy. Nothing comes from our own IR, so the result can be compared with the numpy executor
of the same Caffe graph.

    evaluate_network(trt, network, feeds)
      +-- _read_nodes     every layer seen through its own interface (IShuffleLayer...)
      +-- _find_loops     boundary layers by ILoop, body = data paths from iterators/recurrences
      +-- _plan           units (layers and whole loops) in data-edge order, per region
      +-- _run_plan       _apply(node) per layer; _LoopRun.run per loop, body once per iteration

The per-layer evaluators live in ``layers.py`` (and ``windowed.py`` for convolution, pooling,
LRN, top-k), registered by LayerType name in ``common.EVALUATORS``.

Tensors are keyed by name: TensorRT keeps tensor names unique within a network (renaming to a
name in use is refused, unnamed tensors get ``(Unnamed Layer* k) [Type]_output``, made unique).
Loops are keyed by their ``ILoop`` Python object: loop names are *not* unique, but the bindings
return the same wrapper for the same ``ILoop`` while one is alive, and the nodes keep theirs.

Every layer output is checked against TensorRT's own inferred dtype and (static) dims, so a
wrong evaluator case or an inconsistent network fails loudly. float16 stays float16 (arithmetic
is done in float32 and rounded, like fp32 accumulation), shape tensors stay int64.

tensorrt is never imported here: callers pass the module (``tensorrt`` or
``tensorrt_rtx_bindings``) as ``trt``.
"""

from __future__ import annotations

import heapq
from collections import ChainMap, defaultdict
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable, Mapping

import numpy as np

# Importing the evaluator modules registers every layer type they cover.
from caffe_lstm.backends.tensorrt.network_eval import layers as _layers  # noqa: F401
from caffe_lstm.backends.tensorrt.network_eval import windowed as _windowed  # noqa: F401
from caffe_lstm.backends.tensorrt.network_eval.common import (
    DTYPES, EVALUATORS, Env, Evaluate, NetworkEvalError, NotModeledError, numpy_dtype)

__all__ = ["NetworkEvalError", "NotModeledError", "evaluate_network", "numpy_dtype"]

#: Sees every tensor evaluated: ``observe(step, tensors)`` with a loop iteration's own tensors
#: by name after each iteration (``step``: the iteration), and the tensors outside every loop
#: at the end (``step`` None).
Observer = Callable[[int | None, Mapping[str, np.ndarray]], None]


def evaluate_network(trt: Any, network: Any, feeds: Mapping[str, np.ndarray],
                     observe: Observer | None = None) -> dict[str, np.ndarray]:
    """Evaluates every marked network output for the given network-input arrays (by input name).

    Args:
        trt: the TensorRT module (``tensorrt`` or ``tensorrt_rtx_bindings``).
        network: the ``INetworkDefinition``.
        feeds: one array per network input; cast to the input's dtype (same kind).
        observe: sees every intermediate tensor (``verify``'s search for the first layer that
            diverges).

    Returns:
        One array per marked output, by tensor name.

    Raises:
        NotModeledError: layer types (or parameters) this evaluator does not cover; every
            unknown layer is named at once, before any work.
        NetworkEvalError: a network that cannot be evaluated as built (emitter bug), or an
            output that differs from TensorRT's inferred dtype/dims (evaluator bug).
        KeyError, ValueError: feeds that do not match the network inputs.
        Errors raised while evaluating a layer carry a note naming it (and the loop iteration).
    """
    nodes = _read_nodes(trt, network)
    env: Env = _network_inputs(network, feeds)
    _check_unique_names(nodes, env)
    loops = _find_loops(nodes)
    _run_plan(_plan(set(range(len(nodes))), nodes, loops), env, None, observe)
    if observe is not None:
        observe(None, env)
    return _network_outputs(network, env, loops)


# --------------------------------------------------------------------------------------------
# Reading the network


@dataclass(eq=False)
class _Node:
    """One layer seen through its own interface, with its tensors by name."""

    layer: Any
    index: int
    kind: str                                   # LayerType name
    inputs: tuple[str | None, ...]
    outputs: tuple[str, ...]
    declared: tuple[tuple[tuple[int, ...] | None, str], ...]   # TensorRT's (dims, dtype name)
    evaluate: Evaluate
    loop: Any = None                            # the ILoop of a loop boundary layer

    def input(self, k: int) -> str | None:
        return self.inputs[k] if k < len(self.inputs) else None

    def dependencies(self) -> list[str]:
        """Input tensors needed before this layer runs (a recurrence's input 1 is a back edge)."""
        back = 1 if self.kind == "RECURRENCE" else None
        return [name for k, name in enumerate(self.inputs) if name is not None and k != back]

    def describe(self) -> str:
        return f"layer '{self.layer.name}' ({self.kind})"


def _read_nodes(trt: Any, network: Any) -> list[_Node]:
    rules = {getattr(trt.LayerType, kind): (getattr(trt, interface), evaluate)
             for kind, (interface, evaluate) in EVALUATORS.items()
             if hasattr(trt.LayerType, kind)}
    layers = [network.get_layer(i) for i in range(network.num_layers)]
    unknown = [f"'{layer.name}' ({layer.type.name})" for layer in layers if layer.type not in rules]
    if unknown:
        raise NotModeledError(f"the layer type of {', '.join(unknown)}")
    return [_node(i, layer, *rules[layer.type]) for i, layer in enumerate(layers)]


def _node(index: int, layer: Any, interface: type, evaluate: Evaluate) -> _Node:
    kind = layer.type.name           # before the cast: IActivationLayer.type is ActivationType
    layer.__class__ = interface      # the documented way to reach a layer's own parameters
    inputs = [layer.get_input(k) for k in range(layer.num_inputs)]
    outputs = [layer.get_output(k) for k in range(layer.num_outputs)]
    return _Node(layer, index, kind,
                 tuple(None if t is None else t.name for t in inputs),
                 tuple(t.name for t in outputs), tuple(_declared(t) for t in outputs),
                 evaluate, getattr(layer, "loop", None))


def _declared(tensor: Any) -> tuple[tuple[int, ...] | None, str]:
    try:
        dims = tuple(tensor.shape)
    except RuntimeError:        # "Could not get tensor shape.": TensorRT's inference failed
        dims = None
    return dims, tensor.dtype.name


def _network_inputs(network: Any, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    tensors = [network.get_input(i) for i in range(network.num_inputs)]
    names = [t.name for t in tensors]
    missing, extra = set(names) - set(feeds), set(feeds) - set(names)
    if missing or extra:
        raise KeyError(f"feeds do not match the network inputs {names}: "
                       f"missing {sorted(missing)}, unknown {sorted(extra)}")
    return {t.name: _feed(t, feeds[t.name]) for t in tensors}


def _feed(tensor: Any, array: np.ndarray) -> np.ndarray:
    value = np.array(array, copy=True).astype(numpy_dtype(tensor.dtype), casting="same_kind")
    dims = tuple(tensor.shape)
    if len(dims) != value.ndim or any(d >= 0 and d != n for d, n in zip(dims, value.shape)):
        raise ValueError(f"feed '{tensor.name}' has shape {value.shape}, the network input "
                         f"is {dims} (-1 = any)")
    return value


def _check_unique_names(nodes: list[_Node], env: Env) -> None:
    seen = set(env)
    for node in nodes:
        for name in node.outputs:
            if name in seen:
                raise NetworkEvalError(f"tensor name '{name}' is produced twice "
                                       f"(again by {node.describe()})")
            seen.add(name)


def _network_outputs(network: Any, env: Env, loops: list[_Loop]) -> dict[str, np.ndarray]:
    outputs = {}
    for name in (network.get_output(i).name for i in range(network.num_outputs)):
        if name not in env:
            inside = [loop.name for loop in loops if name in loop.body_tensors]
            where = f"inside loop '{inside[0]}'" if inside else "by no layer"
            raise NetworkEvalError(f"network output '{name}' is produced {where}")
        outputs[name] = env[name]
    return outputs


# --------------------------------------------------------------------------------------------
# Loops: which layers belong to which loop


@dataclass(eq=False)
class _Loop:
    """One ILoop: its boundary layers, the layers of its body and their per-iteration order."""

    handle: Any                                       # the ILoop (kept: see the module doc)
    boundary: list[_Node]
    body: set[int] = field(default_factory=set)       # layer indices, nested loops included
    plan: list = field(default_factory=list)          # body units in evaluation order
    body_tensors: set[str] = field(default_factory=set)

    @property
    def name(self) -> str:
        return self.handle.name

    def of_kind(self, kind: str) -> list[_Node]:
        return [node for node in self.boundary if node.kind == kind]

    def starts(self) -> list[_Node]:
        """The layers that produce the per-iteration values: iterators and recurrences."""
        return [n for n in self.boundary if n.kind in ("ITERATOR", "RECURRENCE")]

    def own(self) -> set[int]:
        return {node.index for node in self.boundary}

    def members(self) -> set[int]:
        return self.body | self.own()


def _find_loops(nodes: list[_Node]) -> list[_Loop]:
    """Groups boundary layers by loop; a body is every layer on a data path from the loop's
    iterators and recurrences (stopping at its own boundary layers: loop outputs, recurrence
    input 1). Layers that depend only on outside tensors are loop-invariant and stay outside."""
    loops: list[_Loop] = []
    for node in nodes:
        if node.loop is not None:
            loop = next((lp for lp in loops if lp.handle is node.loop), None)
            if loop is None:
                loop = _Loop(node.loop, [])
                loops.append(loop)
            loop.boundary.append(node)
    consumers = _consumers(nodes)
    for loop in loops:
        loop.body = _reach(loop, loop.starts(), consumers, set())
    _absorb_nested(loops, nodes, consumers)
    for loop in loops:
        loop.body_tensors = {name for i in loop.body for name in nodes[i].outputs}
        loop.body_tensors |= {name for n in loop.starts() for name in n.outputs}
    return loops


def _consumers(nodes: list[_Node]) -> dict[str, list[_Node]]:
    users: dict[str, list[_Node]] = defaultdict(list)
    for node in nodes:
        for name in node.inputs:
            if name is not None:
                users[name].append(node)
    return users


def _reach(loop: _Loop, starts: list[_Node], consumers: dict[str, list[_Node]],
           found: set[int]) -> set[int]:
    """`found` plus every layer downstream of `starts`, not entering the loop's own boundary."""
    own, found = loop.own(), set(found)
    todo = [name for node in starts for name in node.outputs]
    while todo:
        for user in consumers.get(todo.pop(), ()):
            if user.index not in own and user.index not in found:
                found.add(user.index)
                todo.extend(user.outputs)
    return found


def _absorb_nested(loops: list[_Loop], nodes: list[_Node],
                   consumers: dict[str, list[_Node]]) -> None:
    """A loop whose boundary a body reaches lies wholly inside that body (its recurrences and
    trip limit too, which may depend on outside tensors only); repeat until nothing changes.
    (Values of an inner body leave it only through the inner boundary, so reaching any inner
    layer means reaching the inner boundary.)"""
    changed = True
    while changed:
        changed = False
        for outer in loops:
            for inner in loops:
                added = inner.members() - outer.body
                if inner is outer or not added or not outer.body & inner.own():
                    continue
                if inner.members() & outer.own():
                    raise NetworkEvalError(f"loops '{outer.name}' and '{inner.name}' use each "
                                           "other's values")
                outer.body = _reach(outer, [nodes[i] for i in added], consumers,
                                    outer.body | added)
                changed = True


# --------------------------------------------------------------------------------------------
# Planning and running


def _plan(region: set[int], nodes: list[_Node], loops: list[_Loop],
          owner: _Loop | None = None) -> list:
    """The units of `region` (the whole network, or `owner`'s body) in data-edge order: plain
    layers, and whole loops whose boundary lies in the region (their bodies planned in turn)."""
    inside = [lp for lp in loops if lp is not owner and lp.own() <= region]
    direct = [lp for lp in inside
              if not any(other is not lp and lp.members() <= other.body for other in inside)]
    for loop in direct:
        step_layers = {node.index for node in loop.starts()}
        loop.plan = _plan(loop.body | step_layers, nodes, loops, owner=loop)
    covered = set().union(*(loop.members() for loop in direct))
    return _toposort([nodes[i] for i in sorted(region - covered)] + direct, nodes)


def _unit_outputs(unit: _Node | _Loop) -> tuple[str, ...]:
    if isinstance(unit, _Node):
        return unit.outputs
    return tuple(name for node in unit.of_kind("LOOP_OUTPUT") for name in node.outputs)


def _unit_needs(unit: _Node | _Loop, nodes: list[_Node]) -> set[str]:
    if isinstance(unit, _Node):
        return set(unit.dependencies())
    members = [nodes[i] for i in unit.members()]
    inside = {name for node in members for name in node.outputs}
    return {name for node in members for name in node.dependencies()} - inside


def _first_index(unit: _Node | _Loop) -> int:
    return unit.index if isinstance(unit, _Node) else min(unit.members())


def _toposort(units: list, nodes: list[_Node]) -> list:
    """Kahn's algorithm, earliest layer first: the network order wherever the edges allow it
    (``set_input`` can point a layer at a tensor produced by a later one)."""
    producer = {name: unit for unit in units for name in _unit_outputs(unit)}
    waiting = {unit: {producer[n] for n in _unit_needs(unit, nodes) if n in producer} - {unit}
               for unit in units}
    users = defaultdict(list)
    for unit, needs in waiting.items():
        for need in needs:
            users[need].append(unit)
    ready = [(_first_index(u), k, u) for k, u in enumerate(units) if not waiting[u]]
    heapq.heapify(ready)
    order, position = [], {id(u): k for k, u in enumerate(units)}
    while ready:
        unit = heapq.heappop(ready)[2]
        order.append(unit)
        for user in users[unit]:
            waiting[user].discard(unit)
            if not waiting[user]:
                heapq.heappush(ready, (_first_index(user), position[id(user)], user))
    if len(order) != len(units):
        stuck = [u.describe() if isinstance(u, _Node) else f"loop '{u.name}'"
                 for u in units if waiting[u]]
        raise NetworkEvalError(f"the layers form a cycle: {', '.join(stuck)}")
    return order


def _run_plan(plan: list, env: Env, run: _LoopRun | None,
              observe: Observer | None = None) -> None:
    for unit in plan:
        if isinstance(unit, _Loop):
            _LoopRun(unit, observe).run(env)
        else:
            _apply(unit, [_fetch(env, unit, k) for k in range(len(unit.inputs))], run, env)


def _fetch(env: Env, node: _Node, k: int) -> np.ndarray | None:
    name = node.inputs[k]
    if name is None or (node.kind == "RECURRENCE" and k == 1):    # absent, or the back edge
        return None
    if name not in env:
        raise NetworkEvalError(f"input {k} '{name}' of {node.describe()} has no value: no "
                               "network input and no layer evaluated before produces it")
    return env[name]


def _apply(node: _Node, inputs: list, run: _LoopRun | None, env: Env) -> None:
    """Evaluates one layer and stores its outputs; failures say which layer (and iteration)."""
    try:
        outputs = node.evaluate(node.layer, inputs, run)
        _check_declared(node, outputs)
    except Exception as exc:
        where = f" at iteration {run.step} of loop '{run.loop.name}'" if run else ""
        exc.add_note(f"while evaluating {node.describe()}{where}")
        raise
    env.update(zip(node.outputs, outputs))


def _check_declared(node: _Node, outputs: list) -> None:
    """Each output against TensorRT's own inference: dtype, rank, and every static dim."""
    for k, (array, (dims, dtype)) in enumerate(zip(outputs, node.declared, strict=True)):
        if array.dtype != np.dtype(DTYPES.get(dtype, object)):
            raise NetworkEvalError(f"output {k} is {array.dtype}, TensorRT says {dtype}")
        if dims is not None and (len(dims) != array.ndim or any(
                d >= 0 and d != n for d, n in zip(dims, array.shape))):
            raise NetworkEvalError(f"output {k} has shape {array.shape}, TensorRT says {dims}")


class _LoopRun:
    """One execution of a loop: the iteration number, the COUNT trip count, carried states."""

    def __init__(self, loop: _Loop, observe: Observer | None = None) -> None:
        self.loop = loop
        self.observe = observe
        self.step = 0
        self.trips = 0
        self.carried: dict[str, np.ndarray] = {}   # recurrence output -> its next value

    def run(self, env: Env) -> None:
        """Trip count, then the body once per iteration, then the loop outputs."""
        self._start(env)
        sequences = [node for node in self.loop.of_kind("LOOP_OUTPUT")
                     if node.layer.kind.name != "LAST_VALUE"]
        rows: dict[int, list[np.ndarray]] = {node.index: [] for node in sequences}
        for step in range(self.trips):
            self.step = step
            scope: Env = ChainMap({}, env)
            _run_plan(self.loop.plan, scope, self, self.observe)
            if self.observe is not None:
                self.observe(step, scope.maps[0])
            self._carry(scope)
            for node in sequences:
                rows[node.index].append(scope[node.inputs[0]])
        for node in self.loop.of_kind("LOOP_OUTPUT"):
            _apply(node, self._output_inputs(node, rows, env), self, env)

    def _start(self, env: Env) -> None:
        limits = self.loop.of_kind("TRIP_LIMIT")
        kinds = sorted(node.layer.kind.name for node in limits)
        if "WHILE" in kinds:
            raise NotModeledError(f"the WHILE trip limit of loop '{self.loop.name}' (the "
                                      "emitter uses COUNT)")
        if kinds != ["COUNT"]:
            raise NetworkEvalError(f"loop '{self.loop.name}' has {len(limits)} COUNT trip "
                                   "limits, expected 1")
        _apply(limits[0], [_fetch(env, limits[0], 0)], self, env)     # sets self.trips

    def _carry(self, scope: Env) -> None:
        """After an iteration: each recurrence's input 1 becomes its next output."""
        for node in self.loop.of_kind("RECURRENCE"):
            if node.input(1) is None:
                raise NetworkEvalError(f"{node.describe()} has no input 1 (the next value)")
            initial, following = scope[node.inputs[0]], scope[node.inputs[1]]
            if following.shape != initial.shape or following.dtype != initial.dtype:
                raise NetworkEvalError(
                    f"{node.describe()}: next value {following.shape} {following.dtype} differs "
                    f"from the initial value {initial.shape} {initial.dtype}")
            self.carried[node.outputs[0]] = following

    def _output_inputs(self, node: _Node, rows: dict[int, list], env: Env) -> list:
        """LAST_VALUE: [the state after the last iteration]; CONCATENATE/REVERSE: [per-iteration
        values, the length tensor]."""
        if node.layer.kind.name == "LAST_VALUE":
            recurrence = self._recurrence_producing(node.inputs[0])
            if recurrence is None:
                raise NetworkEvalError(f"{node.describe()}: LAST_VALUE input '{node.inputs[0]}' "
                                       "is not a recurrence output of this loop (TensorRT >= 10)")
            initial = env[recurrence.inputs[0]]
            return [self.carried.get(recurrence.outputs[0], initial)]
        if node.input(1) is None:
            raise NetworkEvalError(f"{node.describe()} has no length input 1")
        return [rows[node.index], _fetch(env, node, 1)]

    def _recurrence_producing(self, name: str | None) -> _Node | None:
        return next((n for n in self.loop.of_kind("RECURRENCE") if n.outputs[0] == name), None)
