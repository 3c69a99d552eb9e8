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
import math
from collections import ChainMap, defaultdict
from dataclasses import dataclass, field
from functools import reduce
from typing import Any, Callable, Mapping, MutableMapping, Sequence

import numpy as np


class NetworkEvalError(Exception):
    """The network cannot be evaluated as built: a bug in the emitter or in this evaluator."""


#: TensorRT DataType name -> numpy dtype (the types a strongly typed LSTM network uses).
_DTYPES = {"FLOAT": np.float32, "HALF": np.float16, "INT8": np.int8, "UINT8": np.uint8,
           "INT32": np.int32, "INT64": np.int64, "BOOL": np.bool_}

Env = MutableMapping[str, np.ndarray]
#: evaluate(layer, inputs, loop run or None) -> outputs; absent optional inputs are None.
Evaluate = Callable[[Any, list, "_LoopRun | None"], list]

#: LayerType name -> (name of the layer's own interface class, evaluate function).
_EVALUATORS: dict[str, tuple[str, Evaluate]] = {}


def numpy_dtype(trt_dtype: Any) -> np.dtype:
    """The numpy dtype of a TensorRT ``DataType``."""
    if trt_dtype.name not in _DTYPES:
        raise NotImplementedError(f"no numpy dtype for TensorRT {trt_dtype.name}")
    return np.dtype(_DTYPES[trt_dtype.name])


def evaluate_network(trt: Any, network: Any,
                     feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Evaluates every marked network output for the given network-input arrays (by input name).

    Args:
        trt: the TensorRT module (``tensorrt`` or ``tensorrt_rtx_bindings``).
        network: the ``INetworkDefinition``.
        feeds: one array per network input; cast to the input's dtype (same kind).

    Returns:
        One array per marked output, by tensor name.

    Raises:
        NotImplementedError: layer types (or parameters) this evaluator does not cover; every
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
    _run_plan(_plan(set(range(len(nodes))), nodes, loops), env, None)
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
             for kind, (interface, evaluate) in _EVALUATORS.items()
             if hasattr(trt.LayerType, kind)}
    layers = [network.get_layer(i) for i in range(network.num_layers)]
    unknown = [f"'{layer.name}' ({layer.type.name})" for layer in layers if layer.type not in rules]
    if unknown:
        raise NotImplementedError(f"no numpy evaluator for layer {', '.join(unknown)}")
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


def _run_plan(plan: list, env: Env, run: _LoopRun | None) -> None:
    for unit in plan:
        if isinstance(unit, _Loop):
            _LoopRun(unit).run(env)
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
        if array.dtype != np.dtype(_DTYPES.get(dtype, object)):
            raise NetworkEvalError(f"output {k} is {array.dtype}, TensorRT says {dtype}")
        if dims is not None and (len(dims) != array.ndim or any(
                d >= 0 and d != n for d, n in zip(dims, array.shape))):
            raise NetworkEvalError(f"output {k} has shape {array.shape}, TensorRT says {dims}")


class _LoopRun:
    """One execution of a loop: the iteration number, the COUNT trip count, carried states."""

    def __init__(self, loop: _Loop) -> None:
        self.loop = loop
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
            _run_plan(self.loop.plan, scope, self)
            self._carry(scope)
            for node in sequences:
                rows[node.index].append(scope[node.inputs[0]])
        for node in self.loop.of_kind("LOOP_OUTPUT"):
            _apply(node, self._output_inputs(node, rows, env), self, env)

    def _start(self, env: Env) -> None:
        limits = self.loop.of_kind("TRIP_LIMIT")
        kinds = sorted(node.layer.kind.name for node in limits)
        if "WHILE" in kinds:
            raise NotImplementedError(f"loop '{self.loop.name}': WHILE trip limits are not "
                                      "evaluated (the emitter uses COUNT)")
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


# --------------------------------------------------------------------------------------------
# Helpers for the layer evaluators


def _evaluates(kind: str, interface: str) -> Callable[[Evaluate], Evaluate]:
    """Registers the evaluator of one LayerType (by name) read through `interface`."""
    def register(evaluate: Evaluate) -> Evaluate:
        _EVALUATORS[kind] = (interface, evaluate)
        return evaluate
    return register


def _wide(x: np.ndarray) -> np.ndarray:
    """float16 is computed in float32 (then rounded back), like TensorRT's fp32 accumulation."""
    return x.astype(np.float32) if x.dtype == np.float16 else x


def _param(layer: Any, inputs: list, slot: int, attribute: str) -> Any:
    """A parameter given as dynamic input `slot` when set, else the static attribute (which is
    not read when the input is set: TensorRT warns on that)."""
    if slot < len(inputs) and inputs[slot] is not None:
        return inputs[slot]
    return getattr(layer, attribute)


def _ints(values: Any) -> list[int] | None:
    """A Dims, a tuple or a 1-D shape tensor as Python ints (None stays None)."""
    if values is None:
        return None
    array = values if isinstance(values, np.ndarray) else np.asarray(list(values))
    return [int(v) for v in array.reshape(-1)]


def _scalar_int(array: np.ndarray, what: str) -> int:
    if array.ndim != 0 or not np.issubdtype(array.dtype, np.integer):
        raise NetworkEvalError(f"{what} must be a 0-D integer tensor, got {array.dtype} "
                               f"{array.shape}")
    return int(array)


def _axes_of(bitmask: int, rank: int) -> tuple[int, ...]:
    return tuple(axis for axis in range(rank) if bitmask >> axis & 1)


def _same_rank(*arrays: np.ndarray) -> None:
    """TensorRT broadcasts size-1 dims only between tensors of equal rank."""
    shapes = [a.shape for a in arrays]
    if len({len(s) for s in shapes}) != 1 or any(
            len({n for n in dims if n != 1}) > 1 for dims in zip(*shapes)):
        raise NetworkEvalError(f"shapes {shapes} do not broadcast (equal ranks, dims equal or 1)")


def _normalize_axes(axes: Sequence[int], rank: int) -> tuple[int, ...]:
    return tuple(a + rank if a < 0 else a for a in axes)


# --------------------------------------------------------------------------------------------
# Layer evaluators, one per LayerType


@_evaluates("CONSTANT", "IConstantLayer")
def _constant(layer, inputs, run):
    """The weights (a flat array of their own dtype) with the layer's dims."""
    return [np.array(layer.weights, copy=True).reshape(tuple(layer.shape))]


@_evaluates("IDENTITY", "IIdentityLayer")
def _identity(layer, inputs, run):
    return [inputs[0].copy()]


@_evaluates("CAST", "ICastLayer")
def _cast(layer, inputs, run):
    """x as `to_type` (numpy conversion: float -> int truncates toward zero)."""
    return [inputs[0].astype(numpy_dtype(layer.to_type))]


@_evaluates("SHAPE", "IShapeLayer")
def _shape(layer, inputs, run):
    """The dims of x as an INT64 vector."""
    return [np.array(inputs[0].shape, dtype=np.int64)]


@_evaluates("MATRIX_MULTIPLY", "IMatrixMultiplyLayer")
def _matrix_multiply(layer, inputs, run):
    """op(A)·op(B) on the last two dims, batch dims broadcast (size 1); TRANSPOSE swaps the last
    two dims; VECTOR takes the last dim as a vector (A: row, B: column), dropped from the result."""
    a, b = inputs
    op0, op1 = layer.op0.name, layer.op1.name
    batch_a = a.shape[:-1] if op0 == "VECTOR" else a.shape[:-2]
    batch_b = b.shape[:-1] if op1 == "VECTOR" else b.shape[:-2]
    if len(batch_a) != len(batch_b):
        raise NetworkEvalError(f"matmul batch ranks differ: {a.shape} ({op0}), {b.shape} ({op1})")
    a = _wide(a)[..., None, :] if op0 == "VECTOR" else _wide(a)
    b = _wide(b)[..., :, None] if op1 == "VECTOR" else _wide(b)
    a = np.swapaxes(a, -1, -2) if op0 == "TRANSPOSE" else a
    b = np.swapaxes(b, -1, -2) if op1 == "TRANSPOSE" else b
    y = np.matmul(a, b)
    y = y[..., 0, :] if op0 == "VECTOR" else y
    y = y[..., 0] if op1 == "VECTOR" else y
    return [y.astype(inputs[0].dtype)]


def _divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a / b; integer division truncates toward zero (C semantics), not floor."""
    if np.issubdtype(a.dtype, np.integer):
        return np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))
    return a / b


_ELEMENTWISE = {
    "SUM": np.add, "PROD": np.multiply, "SUB": np.subtract, "DIV": _divide, "POW": np.power,
    "MAX": np.maximum, "MIN": np.minimum, "FLOOR_DIV": np.floor_divide,
    "AND": np.logical_and, "OR": np.logical_or, "XOR": np.logical_xor,
    "EQUAL": np.equal, "GREATER": np.greater, "LESS": np.less,
}


@_evaluates("ELEMENTWISE", "IElementWiseLayer")
def _elementwise(layer, inputs, run):
    """a ∘ b with size-1 dims broadcast; comparisons and logic give BOOL."""
    a, b = inputs
    _same_rank(a, b)
    if a.dtype != b.dtype:
        raise NetworkEvalError(f"elementwise inputs differ in dtype: {a.dtype}, {b.dtype}")
    op = layer.op.name
    if op not in _ELEMENTWISE:
        raise NotImplementedError(f"elementwise operation {op}")
    y = np.asarray(_ELEMENTWISE[op](_wide(a), _wide(b)))
    return [y if y.dtype == np.bool_ else y.astype(a.dtype)]


_erf = np.vectorize(math.erf, otypes=[np.float64])

#: ActivationType name -> f(x, alpha, beta), the formulas of NvInfer.h.
_ACTIVATIONS = {
    "RELU": lambda x, a, b: np.maximum(x, 0),
    "SIGMOID": lambda x, a, b: np.exp(-np.logaddexp(0, -x)),          # 1 / (1 + e^-x)
    "TANH": lambda x, a, b: np.tanh(x),
    "LEAKY_RELU": lambda x, a, b: np.where(x >= 0, x, a * x),
    "ELU": lambda x, a, b: np.where(x >= 0, x, a * np.expm1(x)),
    "SELU": lambda x, a, b: b * np.where(x > 0, x, a * np.expm1(x)),
    "SOFTSIGN": lambda x, a, b: x / (1 + np.abs(x)),
    "SOFTPLUS": lambda x, a, b: a * np.logaddexp(0, b * x),            # α·log(e^(βx) + 1)
    "CLIP": lambda x, a, b: np.maximum(a, np.minimum(x, b)),         # max(α, min(x, β))
    "HARD_SIGMOID": lambda x, a, b: np.clip(a * x + b, 0, 1),
    "SCALED_TANH": lambda x, a, b: a * np.tanh(b * x),
    "THRESHOLDED_RELU": lambda x, a, b: np.where(x > a, x, 0),
    "GELU_ERF": lambda x, a, b: 0.5 * x * (1 + _erf(x / math.sqrt(2))),
    "GELU_TANH": lambda x, a, b: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi)
                                                        * (x + 0.044715 * x**3))),
}


@_evaluates("ACTIVATION", "IActivationLayer")
def _activation(layer, inputs, run):
    """f(x) with the layer's alpha and beta."""
    kind = layer.type.name           # IActivationLayer.type is the ActivationType
    if kind not in _ACTIVATIONS:
        raise NotImplementedError(f"activation {kind}")
    x = inputs[0]
    return [np.asarray(_ACTIVATIONS[kind](_wide(x), layer.alpha, layer.beta)).astype(x.dtype)]


_UNARY = {
    "EXP": np.exp, "LOG": np.log, "SQRT": np.sqrt, "RECIP": np.reciprocal, "ABS": np.abs,
    "NEG": np.negative, "SIN": np.sin, "COS": np.cos, "TAN": np.tan, "SINH": np.sinh,
    "COSH": np.cosh, "ASIN": np.arcsin, "ACOS": np.arccos, "ATAN": np.arctan,
    "ASINH": np.arcsinh, "ACOSH": np.arccosh, "ATANH": np.arctanh, "CEIL": np.ceil,
    "FLOOR": np.floor, "ERF": _erf, "NOT": np.logical_not, "SIGN": np.sign,
    "ROUND": np.round,                      # half to even, like TensorRT's kROUND
    "ISINF": np.isinf, "ISNAN": np.isnan,
}


@_evaluates("UNARY", "IUnaryLayer")
def _unary(layer, inputs, run):
    op, x = layer.op.name, inputs[0]
    if op not in _UNARY:
        raise NotImplementedError(f"unary operation {op}")
    y = np.asarray(_UNARY[op](_wide(x)))
    return [y if y.dtype == np.bool_ else y.astype(x.dtype)]


@_evaluates("PARAMETRIC_RELU", "IParametricReLULayer")
def _parametric_relu(layer, inputs, run):
    """x >= 0 ? x : slope·x, slopes broadcast."""
    x, slope = inputs
    _same_rank(x, slope)
    return [np.where(x >= 0, x, _wide(slope) * _wide(x)).astype(x.dtype)]


@_evaluates("SELECT", "ISelectLayer")
def _select(layer, inputs, run):
    """condition ? a : b, size-1 dims broadcast."""
    condition, a, b = inputs
    _same_rank(condition, a, b)
    return [np.where(condition, a, b)]


@_evaluates("SLICE", "ISliceLayer")
def _slice(layer, inputs, run):
    """y[o] = x[start + o·stride] per axis, `shape` outputs per axis; coordinates outside x follow
    the sample mode. start/shape/stride/fill value/axes come from inputs 1..5 when set."""
    x = inputs[0]
    start = _ints(_param(layer, inputs, 1, "start"))
    size = _ints(_param(layer, inputs, 2, "shape"))
    stride = _ints(_param(layer, inputs, 3, "stride"))
    axes = _ints(_param(layer, inputs, 5, "axes"))
    if axes is not None:     # start/shape/stride for `axes` only; other axes are taken whole
        axes = _normalize_axes(axes, x.ndim)
        start, size, stride = ([dict(zip(axes, p)).get(d, default) for d in range(x.ndim)]
                               for p, default in ((start, 0), (size, None), (stride, 1)))
        size = [x.shape[d] if n is None else n for d, n in enumerate(size)]
    index = [s + np.arange(n) * st for s, n, st in zip(start, size, stride, strict=True)]
    fill = inputs[4] if len(inputs) > 4 and inputs[4] is not None else np.zeros((), x.dtype)
    return [_sample(x, index, layer.mode.name, fill)]


def _sample(x: np.ndarray, index: list[np.ndarray], mode: str, fill: np.ndarray) -> np.ndarray:
    """x at the outer product of the per-axis coordinates `index`, per the sample mode."""
    inside = [(i >= 0) & (i < n) for i, n in zip(index, x.shape)]
    if mode == "STRICT_BOUNDS":
        if not all(ok.all() for ok in inside):
            raise NetworkEvalError(f"slice coordinates {[i.tolist() for i in index]} leave "
                                   f"{x.shape} (STRICT_BOUNDS)")
        return x[_open_grid(index)]
    if mode == "WRAP":
        return x[_open_grid([i % n for i, n in zip(index, x.shape)])]
    clamped = [np.clip(i, 0, n - 1) for i, n in zip(index, x.shape)]
    if mode == "CLAMP":
        return x[_open_grid(clamped)]
    if mode == "FILL":
        mask = reduce(np.logical_and, _open_grid(inside), np.ones((), bool))
        return np.where(mask, x[_open_grid(clamped)], fill).astype(x.dtype)
    raise NotImplementedError(f"slice sample mode {mode}")


def _open_grid(per_axis: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    """Like np.ix_, but boolean arrays stay values (np.ix_ turns them into indices)."""
    rank = len(per_axis)
    return tuple(a.reshape([-1 if k == d else 1 for k in range(rank)])
                 for d, a in enumerate(per_axis))


@_evaluates("SHUFFLE", "IShuffleLayer")
def _shuffle(layer, inputs, run):
    """transpose(first) → reshape (0 copies the input dim when zero_is_placeholder, -1 is
    inferred; dims from input 1 when set) → transpose(second)."""
    x = inputs[0]
    x = np.transpose(x, tuple(layer.first_transpose)[:x.ndim])   # the permutation has 8 slots
    dims = _ints(_param(layer, inputs, 1, "reshape_dims"))
    if dims is not None:
        if layer.zero_is_placeholder:
            dims = [x.shape[k] if d == 0 else d for k, d in enumerate(dims)]
        x = x.reshape(dims)
    return [np.transpose(x, tuple(layer.second_transpose)[:x.ndim]).copy()]


@_evaluates("CONCATENATION", "IConcatenationLayer")
def _concatenation(layer, inputs, run):
    if len({x.dtype for x in inputs}) != 1:
        raise NetworkEvalError(f"concatenation of dtypes {[x.dtype for x in inputs]}")
    return [np.concatenate(inputs, axis=layer.axis)]


@_evaluates("GATHER", "IGatherLayer")
def _gather(layer, inputs, run):
    """DEFAULT: data indexed on `axis` by every index (y rank = data rank - 1 + index rank);
    ELEMENT: y[..i..] = data[..index[..i..]..] on `axis`."""
    data, index = inputs
    mode, axis = layer.mode.name, layer.axis
    if np.any(index < 0) or np.any(index >= data.shape[axis]):
        raise NetworkEvalError(f"gather indices {index.tolist()} outside axis {axis} of "
                               f"{data.shape}")
    if mode == "DEFAULT" and layer.num_elementwise_dims == 0:
        return [np.take(data, index, axis=axis)]
    if mode == "ELEMENT":
        _same_rank(data, index)
        return [np.take_along_axis(data, index, axis=axis)]
    raise NotImplementedError(f"gather mode {mode} with {layer.num_elementwise_dims} "
                              "elementwise dims")


@_evaluates("SQUEEZE", "ISqueezeLayer")
def _squeeze(layer, inputs, run):
    """x without the size-1 dims listed in input 1."""
    x = inputs[0]
    return [np.squeeze(x, axis=_normalize_axes(_ints(inputs[1]), x.ndim))]


@_evaluates("UNSQUEEZE", "IUnsqueezeLayer")
def _unsqueeze(layer, inputs, run):
    """x with size-1 dims inserted at the output axes listed in input 1."""
    x, axes = inputs[0], _ints(inputs[1])
    return [np.expand_dims(x, _normalize_axes(axes, x.ndim + len(axes)))]


@_evaluates("SOFTMAX", "ISoftMaxLayer")
def _softmax(layer, inputs, run):
    """e^x / Σ e^x over the one axis set in the `axes` bitmask."""
    x = inputs[0]
    axes = _axes_of(layer.axes, x.ndim)
    if len(axes) != 1:
        raise NetworkEvalError(f"softmax axes bitmask {layer.axes:#b} selects {len(axes)} axes")
    e = np.exp(_wide(x) - _wide(x).max(axis=axes[0], keepdims=True))
    return [(e / e.sum(axis=axes[0], keepdims=True)).astype(x.dtype)]


_REDUCTIONS = {"SUM": np.sum, "PROD": np.prod, "MAX": np.max, "MIN": np.min, "AVG": np.mean}


@_evaluates("REDUCE", "IReduceLayer")
def _reduce(layer, inputs, run):
    """op over the axes of the bitmask, keeping them as size 1 with keep_dims."""
    x, op = inputs[0], layer.op.name
    if op not in _REDUCTIONS:
        raise NotImplementedError(f"reduce operation {op}")
    y = _REDUCTIONS[op](_wide(x), axis=_axes_of(layer.axes, x.ndim), keepdims=layer.keep_dims)
    return [np.asarray(y).astype(x.dtype)]


@_evaluates("FILL", "IFillLayer")
def _fill(layer, inputs, run):
    """LINSPACE: y[i0, .., ik] = alpha + Σ_d delta[d]·i_d; shape, alpha and delta from inputs
    0, 1, 2 when set, else the static `shape`, `alpha`, `beta`."""
    if layer.operation.name != "LINSPACE":
        raise NotImplementedError(f"fill operation {layer.operation.name} (random)")
    dims = tuple(_ints(_param(layer, inputs, 0, "shape")))
    alpha = np.asarray(_param(layer, inputs, 1, "alpha"), np.float64)
    delta = np.asarray(_param(layer, inputs, 2, "beta"), np.float64).reshape(-1)
    if delta.size == 1 and len(dims) > 1 and not (len(inputs) > 2 and inputs[2] is not None):
        # NvInfer.h defines the delta per dimension only for the dynamic input
        raise NotImplementedError(f"static LINSPACE of rank {len(dims)} (use input 2 for delta)")
    delta = np.broadcast_to(delta, (len(dims),))
    y = alpha + sum(d * np.arange(n).reshape([-1 if k == axis else 1 for k in range(len(dims))])
                    for axis, (d, n) in enumerate(zip(delta, dims)))
    return [np.broadcast_to(y, dims).astype(numpy_dtype(layer.to_type))]


@_evaluates("REVERSE_SEQUENCE", "IReverseSequenceLayer")
def _reverse_sequence(layer, inputs, run):
    """Per batch entry b, the first lengths[b] steps of the sequence axis reversed."""
    x, lengths = inputs
    seq, batch = layer.sequence_axis, layer.batch_axis
    t = np.arange(x.shape[seq])[:, None]
    source = np.where(t < lengths[None, :], lengths[None, :] - 1 - t, t)     # [T, B]
    shape = [1] * x.ndim
    shape[seq], shape[batch] = x.shape[seq], x.shape[batch]
    source = (source if seq < batch else source.T).reshape(shape)
    return [np.take_along_axis(x, np.broadcast_to(source, x.shape), axis=seq)]


# Windowed layers: convolution, deconvolution, pooling, LRN; and top-k.


def _padding(layer: Any, n_spatial: int) -> tuple[tuple[int, ...], tuple[int, ...], str]:
    """(pre, post, rounding) of an explicit-padding layer; SAME modes are not evaluated."""
    mode = layer.padding_mode.name
    if mode not in ("EXPLICIT_ROUND_DOWN", "EXPLICIT_ROUND_UP"):
        raise NotImplementedError(f"padding mode {mode}")
    pre, post = tuple(layer.pre_padding), tuple(layer.post_padding)
    if len(pre) != n_spatial or len(post) != n_spatial:
        raise NetworkEvalError(f"padding {pre}/{post} for {n_spatial} spatial axes")
    return pre, post, "up" if mode.endswith("UP") else "down"


def _out_dims(sizes, extents, strides, pre, post, rounding: str) -> tuple[int, ...]:
    """⌊ or ⌈(in + pre + post − extent) / stride⌉ + 1 per spatial axis."""
    spans = [n + a + b - e for n, e, a, b in zip(sizes, extents, pre, post)]
    if rounding == "up":
        return tuple(-(-span // s) + 1 for span, s in zip(spans, strides))
    return tuple(span // s + 1 for span, s in zip(spans, strides))


def _window_view(x: np.ndarray, kernel, strides, dilations, pre, out, fill) -> np.ndarray:
    """(…, *out, *kernel): window o of the trailing len(kernel) axes starts at o·stride − pre,
    tap j reads o·stride − pre + j·dilation; positions outside x read ``fill``."""
    lead = x.ndim - len(kernel)
    widths = [(a, (o - 1) * s + (k - 1) * d + 1 - a - n)
              for n, k, s, d, a, o in zip(x.shape[lead:], kernel, strides, dilations, pre, out)]
    grown = np.pad(x, [(0, 0)] * lead + [(a, max(b, 0)) for a, b in widths],
                   constant_values=fill)
    grown = grown[(slice(None),) * lead + tuple(slice(0, n + a + b) for n, (a, b)
                                                in zip(x.shape[lead:], widths))]
    extents = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    view = np.lib.stride_tricks.sliding_window_view(grown, extents,
                                                   axis=tuple(range(lead, x.ndim)))
    index = ((slice(None),) * lead + tuple(slice(None, None, s) for s in strides)
             + tuple(slice(None, None, d) for d in dilations))
    return view[index]


def _einsum_letters(n_spatial: int) -> tuple[str, str]:
    return "xyz"[:n_spatial], "ijl"[:n_spatial]


@_evaluates("CONVOLUTION", "IConvolutionLayer")
def _convolution(layer, inputs, run):
    """y[n, g·K/G + k] = Σ_c Σ_taps W[g, k, c, taps] · x_padded[n, g·C/G + c, o·stride +
    taps·dilation] + bias; the kernel is GKCRS, the padding zeros."""
    x = _wide(inputs[0])
    if len(inputs) > 1 and any(t is not None for t in inputs[1:]):
        raise NotImplementedError("convolution kernel or bias given as tensors")
    kernel, groups = tuple(layer.kernel_size_nd), layer.num_groups
    strides, dilations = tuple(layer.stride_nd), tuple(layer.dilation_nd)
    pre, post, rounding = _padding(layer, len(kernel))
    extents = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    out = _out_dims(x.shape[2:], extents, strides, pre, post, rounding)
    windows = _window_view(x, kernel, strides, dilations, pre, out, 0)
    n, c = x.shape[:2]
    weights = _wide(np.asarray(layer.kernel)).reshape(
        (groups, layer.num_output_maps // groups, c // groups) + kernel)
    o, t = _einsum_letters(len(kernel))
    y = np.einsum(f"ngc{o}{t},gkc{t}->ngk{o}",
                  windows.reshape((n, groups, c // groups) + windows.shape[2:]), weights)
    y = y.reshape((n, layer.num_output_maps) + out)
    return [_with_bias(y, layer.bias).astype(inputs[0].dtype)]


def _with_bias(y: np.ndarray, bias: Any) -> np.ndarray:
    """y plus one bias per output map (axis 1); an empty bias adds nothing."""
    b = _wide(np.asarray(bias))
    return y if b.size == 0 else y + b.reshape((1, -1) + (1,) * (y.ndim - 2))


@_evaluates("DECONVOLUTION", "IDeconvolutionLayer")
def _deconvolution(layer, inputs, run):
    """The transposed convolution, evaluated as a convolution: x spread out with stride − 1
    zeros between elements, padded by dilation·(kernel − 1) minus the layer's pre/post padding
    (which crops the output), convolved with the kernel flipped and its C and K swapped; the
    kernel is CKRS (C input channels, K = output maps per group)."""
    x = _wide(inputs[0])
    if len(inputs) > 1 and any(t is not None for t in inputs[1:]):
        raise NotImplementedError("deconvolution kernel or bias given as tensors")
    kernel, groups = tuple(layer.kernel_size_nd), layer.num_groups
    strides, dilations = tuple(layer.stride_nd), tuple(layer.dilation_nd)
    pre, post, _ = _padding(layer, len(kernel))
    n, c = x.shape[:2]
    spread = np.zeros((n, c) + tuple((d - 1) * s + 1 for d, s in zip(x.shape[2:], strides)),
                      x.dtype)
    spread[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides)] = x
    full = [(k - 1) * d for k, d in zip(kernel, dilations)]
    weights = _wide(np.asarray(layer.kernel)).reshape(
        (groups, c // groups, layer.num_output_maps // groups) + kernel)
    flipped = np.flip(weights, axis=tuple(range(3, 3 + len(kernel)))).swapaxes(1, 2)
    front = [f - a for f, a in zip(full, pre)]
    out = tuple(m + f - a - b for m, f, a, b in zip(spread.shape[2:], full, pre, post))
    if min(front) < 0:   # more padding than the kernel's reach: crop the front first
        spread = spread[(slice(None),) * 2 + tuple(slice(max(-f, 0), None) for f in front)]
        front = [max(f, 0) for f in front]
    windows = _window_view(spread, kernel, (1,) * len(kernel), dilations, front, out, 0)
    o, t = _einsum_letters(len(kernel))
    y = np.einsum(f"ngc{o}{t},gkc{t}->ngk{o}",
                  windows.reshape((n, groups, c // groups) + windows.shape[2:]), flipped)
    y = y.reshape((n, layer.num_output_maps) + out)
    return [_with_bias(y, layer.bias).astype(inputs[0].dtype)]


@_evaluates("POOLING", "IPoolingLayer")
def _pooling(layer, inputs, run):
    """MAX over the window's elements inside x (padding never wins); AVERAGE = their sum
    divided by that count (average_count_excludes_padding) or by the window's overlap with
    the padded input [−pre, in + post) (otherwise)."""
    x, kind = _wide(inputs[0]), layer.type.name     # IPoolingLayer.type is the PoolingType
    if kind not in ("MAX", "AVERAGE"):
        raise NotImplementedError(f"pooling type {kind}")
    kernel, strides = tuple(layer.window_size_nd), tuple(layer.stride_nd)
    pre, post, rounding = _padding(layer, len(kernel))
    sizes, spatial = x.shape[x.ndim - len(kernel):], tuple(range(-len(kernel), 0))
    out = _out_dims(sizes, kernel, strides, pre, post, rounding)
    ones = (1,) * len(kernel)
    if kind == "MAX":
        y = _window_view(x, kernel, strides, ones, pre, out, -np.inf).max(axis=spatial)
        return [y.astype(inputs[0].dtype)]
    total = _window_view(x, kernel, strides, ones, pre, out, 0).sum(axis=spatial)
    low, high = ((0,) * len(kernel), sizes) if layer.average_count_excludes_padding else (
        tuple(-a for a in pre), tuple(n + b for n, b in zip(sizes, post)))
    counts = [np.minimum(np.arange(o) * s - a + k, hi) - np.maximum(np.arange(o) * s - a, lo)
              for o, s, a, k, lo, hi in zip(out, strides, pre, kernel, low, high)]
    divisor = reduce(np.multiply.outer, counts)
    return [(total / divisor).astype(inputs[0].dtype)]


@_evaluates("LRN", "ILRNLayer")
def _lrn(layer, inputs, run):
    """x / (k + α/w · Σ x²)^β, the sum over the w channels centred on each one (zeros past the
    ends); the channel axis is the third from last. NvInfer.h leaves the 1/w implicit; the
    Caffe and ONNX parsers pass their α (defined with α/w) unchanged, so this is TensorRT's."""
    x, w = _wide(inputs[0]), layer.window_size
    axis, half = x.ndim - 3, (layer.window_size - 1) // 2
    if w % 2 == 0:
        raise NetworkEvalError(f"LRN window {w} is even")
    square = np.pad(np.square(x), [(half, half) if a == axis else (0, 0) for a in range(x.ndim)])
    total = np.lib.stride_tricks.sliding_window_view(square, w, axis=axis).sum(axis=-1)
    y = x / np.power(layer.k + layer.alpha / w * total, layer.beta)
    return [y.astype(inputs[0].dtype)]


@_evaluates("TOPK", "ITopKLayer")
def _topk(layer, inputs, run):
    """The k largest (MAX) or smallest (MIN) values along the one axis of the bitmask, sorted,
    and their indices; equal values keep their order (TensorRT does not specify one)."""
    x = inputs[0]
    if len(inputs) > 1 and inputs[1] is not None:
        raise NotImplementedError("top-k with k given as a tensor")
    axes = _axes_of(layer.axes, x.ndim)
    if len(axes) != 1:
        raise NetworkEvalError(f"top-k axes bitmask {layer.axes:#b} selects {len(axes)} axes")
    key = -_wide(x) if layer.op.name == "MAX" else _wide(x)
    order = np.argsort(key, axis=axes[0], kind="stable")
    index = np.take(order, np.arange(layer.k), axis=axes[0])
    values = np.take_along_axis(x, index, axis=axes[0])
    return [values, index.astype(numpy_dtype(layer.indices_type))]


# Loop boundary layers: `run` is the _LoopRun of their loop.


@_evaluates("TRIP_LIMIT", "ITripLimitLayer")
def _trip_limit(layer, inputs, run):
    """COUNT: the loop runs input-0 times (a 0-D integer from outside the loop). No output."""
    run.trips = _scalar_int(inputs[0], "the COUNT trip limit")
    return []


@_evaluates("ITERATOR", "IIteratorLayer")
def _iterator(layer, inputs, run):
    """Iteration i gives x[i] on `axis` (x[M-1-i] when reverse, M = the trip count)."""
    x, axis = inputs[0], layer.axis
    index = run.trips - 1 - run.step if layer.reverse else run.step
    if not 0 <= index < x.shape[axis]:
        raise NetworkEvalError(f"iteration reads index {index} of axis {axis} of {x.shape}")
    return [np.take(x, index, axis=axis)]


@_evaluates("RECURRENCE", "IRecurrenceLayer")
def _recurrence(layer, inputs, run):
    """Input 0 (the initial value) at iteration 0, then input 1 of the previous iteration."""
    if run.step == 0:
        return [inputs[0]]
    return [run.carried[layer.get_output(0).name]]


@_evaluates("LOOP_OUTPUT", "ILoopOutputLayer")
def _loop_output(layer, inputs, run):
    """LAST_VALUE: the recurrence's state after the last iteration. CONCATENATE: the
    per-iteration values stacked on a new axis `axis` of length input 1; REVERSE: the same,
    last iteration first. Rows past the last iteration (undefined in TensorRT) are zeros."""
    if layer.kind.name == "LAST_VALUE":
        return [inputs[0]]
    rows, length = inputs[0], _scalar_int(inputs[1], "the loop output length")
    if len(rows) > length:
        raise NetworkEvalError(f"{len(rows)} iterations but an output length of {length}")
    if len(rows) < length:
        row = rows[0] if rows else _static_row(layer)
        rows = rows + [np.zeros_like(row)] * (length - len(rows))
    if layer.kind.name == "REVERSE":
        rows = rows[::-1]
    return [np.stack(rows, axis=layer.axis)]


def _static_row(layer: Any) -> np.ndarray:
    """A zero row for a loop that ran no iteration, from TensorRT's static output dims."""
    dims, axis = list(layer.get_output(0).shape), layer.axis
    del dims[axis]
    if any(d < 0 for d in dims):
        raise NetworkEvalError("a loop that ran no iteration has an output of dynamic dims")
    return np.zeros(dims, numpy_dtype(layer.get_output(0).dtype))
