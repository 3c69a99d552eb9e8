"""NodeBuilder: appends nodes for a rewrite, one helper per Caffe layer type it needs; Step:
one time step of a recurrence, which ``NodeBuilder.loop`` makes a Loop (docs/ops.md).

Every node it makes is named ``__<origin>/<name>`` (inserted by a rewrite) and remembers the
layer it came from; its output value is called ``<origin>/<name>`` after Caffe's unrolled blobs.
Helpers return a single Value, or a tuple for multi-output layers such as Slice. The attributes
come from each op's own ``make_attrs``, so their names live in the op class only.

A recurrent type describes one step and nothing else: ``s = b.step()`` is a NodeBuilder on a
new body graph; ``s.sequence`` (slice t of a (T, ...) value computed before the loop),
``s.state`` (a carried state at t − 1, times cont_t by Caffe's rule when given one) and
``s.invariant`` (a value every step reads) are its inputs; ``s.update`` and ``s.output`` its
results; ``b.loop(s, ...)`` appends the Loop node. Everything else (the ILoop, the Scan, the
unrolled copies, ``--state io``, Triton's sequence state, the DOT cluster) is built from it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from caffe_lstm.errors import GraphError
from caffe_lstm.ir.graph import Graph, Node, Value
from caffe_lstm.ops.activation import Clip, ReLU
from caffe_lstm.ops.conv import Convolution
from caffe_lstm.ops.data import DummyData
from caffe_lstm.ops.elementwise import Eltwise, Scale
from caffe_lstm.ops.linear import InnerProduct
from caffe_lstm.ops.loop import COPY_DIM, LoopState
from caffe_lstm.ops.registry import get_op
from caffe_lstm.ops.shape import Concat, Reshape, Slice


class NodeBuilder:
    """Appends nodes to ``graph`` on behalf of the Caffe layer ``origin``."""

    def __init__(self, graph: Graph, origin: str, where: str = "") -> None:
        self.graph, self.origin, self.where = graph, origin, where
        #: ``id(node)`` -> ``file:line`` of the call outside caffe-lstm that built it (a plugin's
        #: ``add``, or its call of a cell builder such as ``gru_step``), for the errors of a
        #: plugin's layers that their types refuse.
        self.sites: dict[int, str] = {}

    def add(self, op: str, name: str, inputs: Sequence[Value], attrs: dict[str, Any] | None = None,
            weights: Sequence[Value] = (), tops: Sequence[str] | None = None,
            outputs: Sequence[Value] | None = None) -> list[Value]:
        """Appends one node; returns its output values (new ones named after ``tops``, or the
        given ``outputs``, e.g. the tops of the layer being replaced).

        Raises:
            TypeError: arguments of the wrong kind (a caller's bug: an expand facet's)."""
        if outputs is None:
            outputs = [Value(f"{self.origin}/{top}") for top in (tops or [name])]
        _check_arguments(op, name, inputs, attrs, weights, outputs)
        node = Node(f"__{self.origin}/{name}", op, list(inputs), list(outputs), dict(attrs or {}),
                    list(weights), origin=self.origin, where=self.where)
        self.graph.nodes.append(node)
        self.sites[id(node)] = _caller()
        return outputs

    def inner_product(self, name: str, x: Value, w: Value, b: Value | None = None,
                      axis: int = 2, top: str | None = None) -> Value:
        """y = x·Wᵀ (+ b) over ``axis``; the output is called ``top`` (default ``name``)."""
        attrs = InnerProduct.make_attrs(w.shape[0], bias_term=b is not None, axis=axis)
        weights = [w] + ([b] if b is not None else [])
        return self.add("InnerProduct", name, [x], attrs, weights, tops=[top or name])[0]

    def convolution(self, name: str, x: Value, w: Value, b: Value | None = None, *,
                    pad: int | Sequence[int] = 0, stride: int | Sequence[int] = 1,
                    dilation: int | Sequence[int] = 1, axis: int = 1, group: int = 1,
                    top: str | None = None) -> Value:
        """Caffe's Convolution of x with W (M, C/group, *kernel) (+ b) over the spatial axes
        after the channel ``axis``; pad, stride and dilation once for every spatial axis or
        once per axis. The output is called ``top`` (default ``name``)."""
        attrs = Convolution.make_attrs(w.shape[0], list(w.shape[2:]), pad=pad, stride=stride,
                                       dilation=dilation, axis=axis, group=group,
                                       bias_term=b is not None)
        weights = [w] + ([b] if b is not None else [])
        return self.add("Convolution", name, [x], attrs, weights, tops=[top or name])[0]

    def scale(self, name: str, x: Value, factor: Value, axis: int = 0) -> Value:
        """Caffe's two-bottom Scale: x times factor broadcast from ``axis`` on."""
        return self.add("Scale", name, [x, factor], Scale.make_attrs(axis=axis))[0]

    def learned_scale(self, name: str, x: Value, factor: Value, axis: int) -> Value:
        """Caffe's one-bottom Scale: x times the learned blob ``factor`` from ``axis`` on."""
        return self.add("Scale", name, [x], Scale.make_attrs(axis=axis), [factor])[0]

    def eltwise(self, name: str, operation: str, *xs: Value) -> Value:
        return self.add("Eltwise", name, list(xs), Eltwise.make_attrs(operation))[0]

    def unary(self, op: str, name: str, x: Value) -> Value:
        """Sigmoid, TanH (and other attribute-free pointwise layers)."""
        return self.add(op, name, [x], {})[0]

    def relu(self, name: str, x: Value) -> Value:
        return self.add("ReLU", name, [x], ReLU.make_attrs())[0]

    def clip(self, name: str, x: Value, low: float, high: float) -> Value:
        """Caffe's Clip layer: y = max(min(x, high), low)."""
        return self.add("Clip", name, [x], Clip.make_attrs(low, high))[0]

    def slice(self, name: str, x: Value, axis: int, parts: Sequence[str]) -> tuple[Value, ...]:
        """Even split of ``axis`` into ``len(parts)`` tops named ``<name>_<part>``."""
        tops = [f"{name}_{part}" for part in parts]
        return tuple(self.add("Slice", name, [x], Slice.make_attrs(axis), tops=tops))

    def slice_tops(self, name: str, x: Value, axis: int, tops: Sequence[str]) -> list[Value]:
        """Even split of ``axis`` into tops with the given names."""
        return self.add("Slice", name, [x], Slice.make_attrs(axis), tops=tops)

    def concat(self, name: str, xs: Sequence[Value], axis: int, output: Value) -> Value:
        return self.add("Concat", name, list(xs), Concat.make_attrs(axis), outputs=[output])[0]

    def split(self, name: str, x: Value, output: Value) -> Value:
        return self.add("Split", name, [x], {}, outputs=[output])[0]

    def constant(self, name: str, shape: Sequence[int], value: float) -> Value:
        """A DummyData of one constant top."""
        return self.add("DummyData", name, [], DummyData.make_attrs([list(shape)], [value]))[0]

    def reshape(self, name: str, x: Value, dims: Sequence[int],
                output: Value | None = None) -> Value:
        attrs = Reshape.make_attrs(list(dims))
        return self.add("Reshape", name, [x], attrs, outputs=[output] if output else None)[0]

    def eltwise_coeff(self, name: str, coeff: Sequence[float], *xs: Value) -> Value:
        """Caffe's Eltwise SUM with coefficients: Σ coeff_i · x_i (``(1, -1)``: a difference)."""
        return self.add("Eltwise", name, list(xs), Eltwise.make_attrs("SUM", list(coeff)))[0]

    # ---- recurrences ------------------------------------------------------------------------

    def step(self) -> Step:
        """A new time step of this layer's recurrence: a NodeBuilder on the loop's body."""
        return Step(self)

    def loop(self, step: Step, sequences: Sequence[Value],
             finals: Sequence[Value] | None = None) -> list[Value]:
        """Appends the Loop node ``__<origin>/loop`` running ``step`` over the time axis (axis 0
        of its ``sequence`` inputs). Its tops are ``sequences``, one per ``step.output`` (that
        output of every step, concatenated on axis 0), then the final states, in ``step.state``
        order: ``finals`` (the layer's own tops, say) or new values ``<origin>/<state>_T``.
        Returns the final states."""
        body, states, inputs = step._finish()
        if len(sequences) != len(step.outputs):
            raise GraphError(f"the step has {len(step.outputs)} outputs, the loop was given "
                             f"{len(sequences)} sequences for them", self.origin,
                             "give one sequence value per step.output")
        finals = list(finals) if finals is not None else [
            Value(f"{self.origin}/{state.name}_T") for state in states]
        if len(finals) != len(states):
            raise GraphError(f"the step carries {len(states)} states, the loop was given "
                             f"{len(finals)} final values", self.origin,
                             "give one final value per step.state, or none")
        attrs = {"body": body, "n_iterate": step.n_sequences, "states": states,
                 "n_sequence_outputs": len(step.outputs)}
        self.graph.nodes.append(Node(f"__{self.origin}/loop", "Loop", inputs,
                                     list(sequences) + finals, attrs, origin=self.origin,
                                     where=self.where))
        self.sites[id(self.graph.nodes[-1])] = _caller()
        return finals


class Step(NodeBuilder):
    """One time step of ``outer``'s layer: a NodeBuilder whose nodes form the loop's body.

    Body inputs are named ``<origin>/<name>``; its nodes follow the NodeBuilder's naming rule.
    The Loop hands the body, in this order: the ``sequence`` slices, the ``state`` values at
    t − 1, the ``invariant`` values; it takes back each state's ``update``, then the
    ``output`` values.
    """

    def __init__(self, outer: NodeBuilder) -> None:
        super().__init__(Graph(name=f"{outer.origin}/step"), outer.origin, outer.where)
        self.sites = outer.sites  # the body's nodes are the expansion's too
        self._sequences: list[tuple[Value, Value]] = []  # (outer (T, ...), body slice)
        self._states: list[tuple[str, tuple[int, ...], Value, Value | None]] = []
        self._invariants: list[tuple[Value, Value]] = []
        self._next: dict[str, Value] = {}
        self.outputs: list[Value] = []

    @property
    def n_sequences(self) -> int:
        return len(self._sequences)

    def _input(self, name: str) -> Value:
        return Value(f"{self.origin}/{name}")

    def sequence(self, x: Value, name: str) -> Value:
        """x[t:t+1], the step's slice (1, ...) of ``x`` (T, ...), a value computed before the
        loop (the projection of every step's input at once, cont, ...); the body input
        ``<origin>/<name>``. The first one also gives the dims a state's 0 copies."""
        inner = self._input(name)
        self._sequences.append((x, inner))
        return inner

    def state(self, name: str, dims: Sequence[int], initial: Value | None = None,
              cont: Value | None = None) -> Value:
        """The carried state ``name`` at t − 1, of shape (1, *dims): the body input
        ``<origin>/<name>_prev``. ``dims`` may hold 0 for a dim copied from the first
        ``sequence`` at that axis ((0, H) is (1, N, H) with N the sequence's axis 1; (D, 0, 0)
        is (1, D, H, W) beside a (T, C, H, W) sequence). ``initial`` (a value from before the
        loop, (1, *dims)) gives the value at t = 0; without it the state starts at zeros.

        ``cont`` (a ``sequence`` slice (1, N)) applies Caffe's rule: the result is then
        ``<name>_conted`` = cont_t · state (Scale, axis 0), a reset where cont_t = 0. A type
        with another rule passes no ``cont`` and uses the cont slice where its rule says."""
        if any(existing == name for existing, *_ in self._states):
            raise GraphError(f"the step already carries a state named {name!r}", self.origin,
                             "give each state its own name")
        prev = self._input(f"{name}_prev")
        self._states.append((name, tuple(int(d) for d in dims), prev, initial))
        return self.scale(f"{name}_conted", prev, cont) if cont is not None else prev

    def invariant(self, x: Value, name: str) -> Value:
        """``x``, a value computed before the loop and read unchanged by every step (a static
        input's projection); the body input ``<origin>/<name>``."""
        inner = self._input(name)
        self._invariants.append((x, inner))
        return inner

    def update(self, name: str, value: Value) -> None:
        """``value`` is the state ``name`` after this step (its value at t)."""
        self._next[name] = value

    def output(self, value: Value) -> None:
        """``value`` (1, ...) is a step output: the loop's sequence is every step's, stacked."""
        self.outputs.append(value)

    def _finish(self) -> tuple[Graph, list[LoopState], list[Value]]:
        """The body graph (inputs and outputs in the Loop's order), the LoopStates and the
        Loop node's inputs: sequences, the initial values given, invariants."""
        missing = [name for name, *_ in self._states if name not in self._next]
        if missing:
            raise GraphError(f"the step never updates its state {', '.join(missing)}",
                             self.origin, "call step.update(name, value) for every state")
        if not self._sequences:
            raise GraphError("the step has no sequence input", self.origin,
                             "give the loop its time axis with step.sequence(x, name)")
        body = self.graph
        body.inputs = ([inner for _, inner in self._sequences]
                       + [prev for _, _, prev, _ in self._states]
                       + [inner for _, inner in self._invariants])
        body.outputs = [self._next[name] for name, *_ in self._states] + self.outputs
        states = [LoopState(name, dims, initial is not None)
                  for name, dims, _, initial in self._states]
        inputs = ([outer for outer, _ in self._sequences]
                  + [initial for *_, initial in self._states if initial is not None]
                  + [outer for outer, _ in self._invariants])
        return body, states, inputs


def _check_arguments(op: str, name: str, inputs: Sequence[Value], attrs: Any,
                     weights: Sequence[Value], outputs: Sequence[Value]) -> None:
    """What ``add`` can check before any shape is known: a registered type, Values where
    Values belong, attrs a dict of names, and as many bottoms and tops as the type takes."""
    op_class = get_op(op) if isinstance(op, str) else None
    if op_class is None:
        raise TypeError(f"add({op!r}, {name!r}): no layer type {op!r} is registered")
    if attrs is not None and (not isinstance(attrs, dict)
                              or not all(isinstance(key, str) for key in attrs)):
        raise TypeError(f"add({op!r}, {name!r}): attrs must be a dict of attribute names, "
                        f"not {attrs!r:.60}")
    for kind, values in (("inputs", inputs), ("weights", weights), ("outputs", outputs)):
        if isinstance(values, Value) or not all(isinstance(v, Value) for v in values):
            raise TypeError(f"add({op!r}, {name!r}): {kind} must be a list of Values, not "
                            f"{values!r:.60}")
    for kind, found, (low, high) in (("bottoms", len(inputs), op_class.n_bottoms),
                                     ("tops", len(outputs), op_class.n_tops)):
        if found < low or (high is not None and found > high):
            allowed = f"{low}" if low == high else f"{low} to {high if high else 'any'}"
            raise TypeError(f"add({op!r}, {name!r}): {found} {kind}, a {op} layer takes "
                            f"{allowed}")


#: caffe_lstm's own directory: frames in it are the builder's and the cells' (ops/recurrent/
#: cells.py), not the code whose call built a layer.
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _caller() -> str:
    """``file:line`` of the innermost frame outside caffe_lstm (a plugin's call of ``add``, or
    of ``gru_step`` that called it); "" for a built-in expansion's layer."""
    frame = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE):
        frame = frame.f_back
    return f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else ""


__all__ = ["COPY_DIM", "NodeBuilder", "Step"]
