"""Loop: the one primitive Caffe has no layer for, a recurrence over the time axis (axis 0).

A Loop node holds a body graph that computes one time step. Its layout:

- node inputs:  [iterated (k)] + [initial states, for the states that have one] + [invariants]
- body inputs:  [step slices (k), each (1, ...)] + [previous states (s)] + [invariants]
- body outputs: [next states (s)] + [step outputs (m)]
- node outputs: [sequences (m), the step outputs concatenated on axis 0] + [final states (s)]

The trip count T is axis 0 of the iterated inputs. A state has the shape (1, *dims), any rank:
(1, N, H) for an LSTM's h, (1, D, H, W) or (1, N, C, H, W) for a convolutional one. A state
without an initial value starts at zeros of that shape, where a 0 in ``dims`` copies the dim of
the first iterated input at the same axis, read at run time (as Caffe's Reshape reads 0): an
LSTM's (0, H) is (1, N, H), N being axis 1 of the first iterated input (Caffe's zero h_0/c_0).
This maps one to one onto TensorRT's ILoop: iterators, recurrences, CONCATENATE and LAST_VALUE,
and onto ONNX's Scan: scan inputs, state variables, scan outputs and final state values.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from caffe_lstm.errors import GraphError
from caffe_lstm.ir.graph import Graph, Node, Shape
from caffe_lstm.ops.registry import Op, register_op, shape_error


#: In ``LoopState.dims``: this dim is the first iterated input's dim at the same axis.
COPY_DIM = 0


@dataclass(frozen=True, repr=False)
class LoopState:
    """A carried state: its name (``h``, ``c``), its dims after the leading step axis of 1
    (``COPY_DIM`` = 0 copies the first iterated input's dim at that axis), and whether an
    input initialises it. An LSTM's h is ``LoopState("h", (0, H), False)``: (1, N, H)."""

    name: str
    dims: tuple[int, ...]
    has_initial: bool

    @staticmethod
    def of_width(name: str, width: int, has_initial: bool) -> LoopState:
        """A (1, N, width) state, N being axis 1 of the first iterated input."""
        return LoopState(name, (COPY_DIM, width), has_initial)

    @property
    def width(self) -> int | None:
        """The width of a (1, N, width) state (loop_param's ``size``), else None."""
        if len(self.dims) == 2 and self.dims[0] == COPY_DIM:
            return self.dims[1]
        return None

    def __repr__(self) -> str:
        # a (1, N, width) state reads as loop_param writes it: by its size
        shape = f"size={self.width}" if self.width is not None else f"dims={self.dims}"
        return f"LoopState(name={self.name!r}, {shape}, has_initial={self.has_initial})"

    def zeros_shape(self, first: Shape) -> Shape:
        """(1, *dims) with each 0 resolved from ``first``, the first iterated input's shape."""
        return (1,) + tuple((first[axis] if axis < len(first) else 1) if dim == COPY_DIM
                            else dim for axis, dim in enumerate(self.dims, start=1))


@dataclass(frozen=True)
class LoopLayout:
    """How a Loop node's inputs and outputs split into their roles."""

    body: Graph
    n_iterate: int
    states: tuple[LoopState, ...]
    n_sequence_outputs: int

    @staticmethod
    def of(node: Node) -> LoopLayout:
        a = node.attrs
        return LoopLayout(a["body"], a["n_iterate"], tuple(a["states"]), a["n_sequence_outputs"])

    @property
    def n_initial(self) -> int:
        return sum(state.has_initial for state in self.states)

    def split_inputs(self, items: list) -> tuple[list, list, list]:
        """(iterated, initial states, invariants) of the node's inputs (or their shapes)."""
        k, s = self.n_iterate, self.n_initial
        return list(items[:k]), list(items[k:k + s]), list(items[k + s:])


@register_op
class Loop(Op):
    """for t in 0..T-1: states, outputs_t = body(iterated[t], states, invariants).

    Sequences are the step outputs concatenated on axis 0; final states are the last states.
    """

    type = "Loop"
    origin = "caffe-lstm (the rewrite's loop_param, no Caffe layer)"
    n_bottoms = (1, None)
    n_tops = (1, None)

    holds_subgraph = True  # its facets run the body through ctx.run_subgraph
    param = "loop_param"

    @staticmethod
    def parse(ctx, p) -> dict:
        """loop_param: the body's layers (imported by ``ctx`` like the net's own), the names of
        its input and output blobs, the counts and the carried states."""
        body = ctx.import_subgraph(p.input, p.output)
        states = tuple(LoopState(s.name, tuple(s.dim) or (COPY_DIM, s.size), s.has_initial)
                       for s in p.state)
        return {"body": body, "n_iterate": p.num_iterated, "states": states,
                "n_sequence_outputs": p.num_sequence_outputs}

    @staticmethod
    def infer(ctx, node: Node, *shapes: Shape) -> tuple[Shape, ...]:
        _check_layout(node)
        layout = LoopLayout.of(node)
        iterated, initial, invariants = layout.split_inputs(list(shapes))
        steps = _trip_count(node, iterated)
        state_shapes = _state_shapes(node, layout, iterated, initial)
        body_shapes = [(1,) + s[1:] for s in iterated] + state_shapes + invariants
        outs = ctx.run_subgraph(layout.body, body_shapes)
        for state, want, got in zip(layout.states, state_shapes, outs):
            if tuple(got) != tuple(want):
                raise shape_error(node, f"state {state.name} changes shape from {want} to {got}")
        sequences = [(steps,) + tuple(s[1:]) for s in outs[len(layout.states):]]
        return tuple(sequences) + tuple(state_shapes)

    @staticmethod
    def numpy(ctx, node: Node, *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
        layout = LoopLayout.of(node)
        iterated, initial, invariants = layout.split_inputs(list(arrays))
        states = _initial_states(layout, iterated, initial)
        s, steps = len(layout.states), iterated[0].shape[0]
        sequences: list[np.ndarray] = []
        for t in range(steps):
            outs = ctx.run_subgraph(layout.body,
                                    [x[t:t + 1] for x in iterated] + states + invariants)
            states = outs[:s]
            if t == 0:  # the steps' outputs stacked along axis 0, each written where it goes
                sequences = [np.empty((steps * out.shape[0], *out.shape[1:]), np.float32)
                             for out in outs[s:]]
            for sequence, out in zip(sequences, outs[s:]):
                sequence[t * out.shape[0]:(t + 1) * out.shape[0]] = out
        return tuple(sequences) + tuple(states)

    @staticmethod
    def tensorrt(ctx, node: Node, *tensors):
        return _emit_loop(ctx, node, tensors)

    @staticmethod
    def onnx(ctx, node: Node, *names):
        return _export_scan(ctx, node, names)

    @staticmethod
    def caffe(ctx, node: Node) -> dict:
        """Our loop_param: the body's layers (written by ``ctx``), its input and output blobs,
        the counts, the states."""
        layout = LoopLayout.of(node)
        return {"layer": ctx.run_subgraph(layout.body),
                "input": [v.name for v in layout.body.inputs],
                "output": [v.name for v in layout.body.outputs],
                "num_iterated": layout.n_iterate,
                "num_sequence_outputs": layout.n_sequence_outputs,
                "state": [_state_message(st) for st in layout.states]}

    @staticmethod
    def dot(ctx, node: Node) -> None:
        """A cluster holding the step inputs (with their roles), the body and the Loop node;
        the next states go back to the previous-state inputs as back edges."""
        layout = LoopLayout.of(node)
        body, n_states = layout.body, len(layout.states)
        steps = node.inputs[0].shape[0] if node.inputs and node.inputs[0].shape else "T"
        output_roles = (["all steps"] * (len(node.outputs) - n_states)
                        + [f"last {state.name}" for state in layout.states])
        previous = body.inputs[layout.n_iterate:layout.n_iterate + n_states]
        ctx.draw_cluster(
            node, f"loop {node.origin} ({steps} steps)", body,
            input_roles=_step_input_roles(layout), entries=_entries(layout, node.inputs),
            output_roles=output_roles,
            exits=body.outputs[n_states:] + body.outputs[:n_states],
            back_edges=[(value, prev, f"next {state.name}") for state, value, prev
                        in zip(layout.states, body.outputs, previous)])


def _state_message(state: LoopState) -> dict:
    """A LoopState message: ``size`` for a (1, N, size) state, its ``dim``s for any other."""
    shape = {"size": state.width} if state.width is not None else {"dim": list(state.dims)}
    return {"name": state.name, **shape, "has_initial": state.has_initial}


def _check_layout(node: Node) -> None:
    """The attributes must fit the layer: body inputs = iterated + states + invariants,
    body outputs = states + step outputs, tops = sequences + final states."""
    layout = LoopLayout.of(node)
    n_states, initial = len(layout.states), layout.n_initial
    invariants = len(node.inputs) - layout.n_iterate - initial
    hint = "write the Loop layer again with caffe-lstm rewrite"
    if layout.n_iterate < 1 or invariants < 0:
        raise GraphError(f"loop_param: expected 1 to {len(node.inputs) - initial} iterated "
                         f"bottoms, found num_iterated {layout.n_iterate}", node.label, hint)
    for what, expected, found in (
            ("body inputs", len(node.inputs) - initial + n_states, len(layout.body.inputs)),
            ("body outputs", n_states + layout.n_sequence_outputs, len(layout.body.outputs)),
            ("tops", layout.n_sequence_outputs + n_states, len(node.outputs))):
        if expected != found:
            raise GraphError(f"loop_param: expected {expected} {what}, found {found}",
                             node.label, hint)


def _step_input_roles(layout: LoopLayout) -> list[str]:
    """What each body input receives: a step slice, a carried state, or an invariant."""
    k, s = layout.n_iterate, len(layout.states)
    roles = ["step slice t"] * k
    roles += [f"state {state.name}" + ("" if state.has_initial else ", 0 at t=0")
              for state in layout.states]
    return roles + ["invariant"] * (len(layout.body.inputs) - k - s)


def _entries(layout: LoopLayout, inputs: list) -> list[tuple]:
    """(loop input, the body input it feeds): iterated, initial states, invariants."""
    iterated, initial, invariants = layout.split_inputs(inputs)
    k, body = layout.n_iterate, layout.body.inputs
    initialised = [k + i for i, state in enumerate(layout.states) if state.has_initial]
    pairs = list(zip(iterated, body[:k])) + [(v, body[i]) for v, i in zip(initial, initialised)]
    return pairs + list(zip(invariants, body[k + len(layout.states):]))


def _emit_loop(ctx, node: Node, tensors: tuple) -> tuple:
    """One ILoop: COUNT trip limit T, iterators over the iterated inputs, one recurrence per
    state, the body in between, CONCATENATE for sequences and LAST_VALUE for final states."""
    trt, layout = ctx.trt, LoopLayout.of(node)
    iterated, initial, invariants = layout.split_inputs(list(tensors))
    steps = ctx.dim(iterated[0], 0)  # T, a 0-D shape tensor defined before the loop
    initial = _trt_initial_states(ctx, layout, iterated[0], initial)
    loop = ctx.network.add_loop()
    loop.name = ctx.layer_name()
    ctx.named(loop.add_trip_limit(steps, trt.TripLimit.COUNT), "trip_limit")
    # the iterator drops the time axis; the body sees (1, N, ...) slices as Caffe's Slice gives
    step_inputs = [ctx.unsqueeze(ctx.out(loop.add_iterator(x, 0, False), "iterator"), 0)
                   for x in iterated]
    recurrences = [ctx.named(loop.add_recurrence(init), f"{state.name}_prev")
                   for init, state in zip(initial, layout.states)]
    outs = ctx.run_subgraph(layout.body,
                            step_inputs + [r.get_output(0) for r in recurrences] + invariants)
    n_states = len(layout.states)
    for recurrence, new_state in zip(recurrences, outs[:n_states]):
        recurrence.set_input(1, new_state)
    sequences = []
    for out in outs[n_states:]:
        concat = loop.add_loop_output(ctx.squeeze(out, 0), trt.LoopOutput.CONCATENATE, 0)
        concat.set_input(1, steps)
        sequences.append(ctx.out(concat, "sequence"))
    finals = [ctx.out(loop.add_loop_output(r.get_output(0), trt.LoopOutput.LAST_VALUE), "last")
              for r in recurrences]
    return tuple(sequences) + tuple(finals)


def _trt_initial_states(ctx, layout: LoopLayout, first, initial: list) -> list:
    """Given initial states, or zeros of (1, *dims), each 0 read from the first iterated input
    at run time (an LSTM's (1, N, H): N)."""
    given = iter(initial)
    return [next(given) if state.has_initial else ctx.zeros(ctx.concat_shape(
        [1] + [ctx.dims(first, axis, axis + 1) if dim == COPY_DIM else dim
               for axis, dim in enumerate(state.dims, start=1)]), f"{state.name}_0")
        for state in layout.states]


def _export_scan(ctx, node: Node, names: tuple) -> tuple:
    """One ONNX Scan: the body is the step graph, with the IR's shapes inside.

    Scan removes the scanned axis from each slice and stacks the step outputs on a new axis 0,
    while the body works on (1, N, ...) slices. So outside the Scan an iterated input x (T, ...)
    is viewed as (T, 1, ...) (slice t is then x[t:t+1]) and a stacked output (T, 1, N, ...) is
    squeezed back to (T, N, ...), the sequence. Carried states are Scan state variables (zeros
    of (1, N, size) without an initial value); invariants (the static projection) are read by
    the body from the outer scope; final states are the Scan's final state values.
    """
    layout = LoopLayout.of(node)
    iterated, initial, invariants = layout.split_inputs(list(names))
    body, k, s = layout.body, layout.n_iterate, len(layout.states)
    # x (T, ...) -> (T, 1, ...): the slice Scan hands the body is then (1, ...)
    steps = [ctx.unsqueeze(x, [1], f"{value.name.rsplit('/', 1)[-1]}_steps")
             for x, value in zip(iterated, node.inputs)]
    first_states = _onnx_initial_states(ctx, layout, iterated[0], node.inputs[0], initial)
    # body inputs in the IR's order: step slices, states, invariants (outer-scope names)
    body_inputs = [ctx.tensor_info(v.name, v) for v in body.inputs[:k + s]] + list(invariants)
    state_outputs, step_outputs = _body_output_names(ctx, body, s)
    graph = ctx.run_subgraph(
        body, body_inputs,
        [ctx.tensor_info(name, v) for name, v in zip(state_outputs + step_outputs,
                                                     body.outputs)],
        f"{ctx.base_name()}/step",
        input_order=list(range(k, k + s)) + list(range(k)))  # Scan: states, then slices
    results = ctx.add("Scan", first_states + steps, s + len(step_outputs), suffix="scan",
                      body=graph, num_scan_inputs=k)
    finals, stacked = results[:s], results[s:]
    # (T, 1, N, ...) -> (T, N, ...): the step outputs concatenated on axis 0
    sequences = [ctx.squeeze(x, [1], "sequence") for x in stacked]
    return tuple(sequences) + tuple(finals)


def _body_output_names(ctx, body: Graph, n_states: int) -> tuple[list[str], list[str]]:
    """Names of the body's outputs: the IR value's name where it appears first, a fresh one
    for a repeat (the LSTM's h is both the next state and the step output)."""
    names, seen = [], set()
    for value in body.outputs:
        names.append(value.name if value.name not in seen else
                     ctx.unique(f"{value.name}/step_output"))
        seen.add(value.name)
    return names[:n_states], names[n_states:]


def _onnx_initial_states(ctx, layout: LoopLayout, first: str, first_value,
                         initial: list) -> list:
    """Given initial states, or zeros of (1, *dims), each 0 the first iterated input's dim at
    that axis (read at run time when it is symbolic; an LSTM's (1, N, H): N)."""
    given = iter(initial)
    states = []
    for state in layout.states:
        if state.has_initial:
            states.append(next(given))
            continue
        parts = [part for axis, dim in enumerate(state.dims, start=1)
                 for part in (ctx.dim_parts(first, first_value, [axis]) if dim == COPY_DIM
                              else [dim])]
        shape = ctx.shape_tensor([1, *parts], f"{state.name}_0_shape")
        states.append(ctx.zeros(shape, f"{state.name}_0"))
    return states


def _trip_count(node: Node, iterated: list[Shape]) -> int:
    lengths = {shape[0] for shape in iterated}
    if len(lengths) != 1:
        raise shape_error(node,
                          f"iterated inputs disagree on the number of steps {sorted(lengths)}")
    steps = lengths.pop()
    if steps < 1:
        raise shape_error(node, "the sequence has no time steps (axis 0 is 0)",
                          "give the recurrent input at least one step")
    return steps


def _state_shapes(node: Node, layout: LoopLayout, iterated: list[Shape],
                  initial: list[Shape]) -> list[Shape]:
    given = iter(initial)
    return [tuple(next(given)) if state.has_initial else state.zeros_shape(iterated[0])
            for state in layout.states]


def _initial_states(layout: LoopLayout, iterated: list[np.ndarray],
                    initial: list[np.ndarray]) -> list[np.ndarray]:
    given = iter(initial)
    return [next(given) if state.has_initial
            else np.zeros(state.zeros_shape(iterated[0].shape), np.float32)
            for state in layout.states]
