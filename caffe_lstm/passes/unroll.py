"""Unrolling: each Loop becomes T step blocks, plain Caffe layers only (needs a static T).

As Caffe's own unrolled net: the iterated inputs are sliced on the time axis, the body is
copied once per step with values named ``<layer>/t<t>/<blob>``, the step outputs are
concatenated on the time axis, and zero initial states come from constant DummyData layers.
"""

from __future__ import annotations

from caffe_lstm.ops.builder import NodeBuilder
from caffe_lstm.ir.graph import Graph, Node, Value
from caffe_lstm.ir.walk import GraphWalker
from caffe_lstm.ops.loop import LoopLayout
from caffe_lstm.passes.cleanup import remove_dead_nodes


def unroll_loops(graph: Graph) -> bool:
    """Replaces every Loop node of ``graph``; returns whether there was one."""
    nodes, changed = [], False
    for node in graph.nodes:
        if not node.subgraphs:  # not a Loop
            nodes.append(node)
            continue
        scratch = NodeBuilder(Graph(), node.origin, node.where)
        _unroll(scratch, node)
        nodes.extend(scratch.graph.nodes)
        changed = True
    graph.nodes = nodes
    if changed:
        remove_dead_nodes(graph)
    return changed


def _unroll(b: NodeBuilder, loop: Node) -> None:
    layout = LoopLayout.of(loop)
    iterated, initial, invariants = layout.split_inputs(loop.inputs)
    steps = iterated[0].shape[0]
    slices = [_time_slices(b, x, steps) for x in iterated]
    states = _initial_states(b, layout, iterated[0], initial)
    outputs: list[list[Value]] = []
    for t in range(steps):
        inputs = [s[t] for s in slices] + states + invariants
        results = _copy_body(b, layout.body, inputs, f"t{t + 1}")
        states, step_outputs = results[:len(states)], results[len(states):]
        outputs.append(step_outputs)
    n_seq = layout.n_sequence_outputs
    for j, target in enumerate(loop.outputs[:n_seq]):
        # the sequence: the step outputs concatenated on the time axis
        b.concat(f"{_base(target)}_concat", [o[j] for o in outputs], 0, target)
    for state, target in zip(states, loop.outputs[n_seq:]):
        # the final state: Caffe's unrolled net also ends the recurrence with a Split
        b.split(f"{_base(target)}_split", state, target)


def _time_slices(b: NodeBuilder, x: Value, steps: int) -> list[Value]:
    if steps == 1:
        return [x]
    base = _base(x)
    tops = [f"{base}_{t + 1}" for t in range(steps)]
    return b.slice_tops(f"{base}_slice", x, 0, tops)


def _initial_states(b: NodeBuilder, layout: LoopLayout, first: Value,
                    initial: list[Value]) -> list[Value]:
    given, states = iter(initial), []
    for state in layout.states:
        if state.has_initial:
            states.append(next(given))
        else:
            # h_0 = 0 (and c_0 = 0): a constant, as the zero-filled inputs of Caffe's unrolled net
            states.append(b.constant(f"{state.name}_0", state.zeros_shape(first.shape), 0.0))
    return states


def _copy_body(b: NodeBuilder, body: Graph, inputs: list[Value], step: str) -> list[Value]:
    """One copy of the body, wired to ``inputs``; returns the copies of its outputs."""
    return _BodyCopy(b, step).walk(body, inputs)


class _BodyCopy(GraphWalker[Value]):
    """A walk copying each node of a body (same op, attrs and weights) for one step; what
    travels along the edges are the copies' values."""

    def __init__(self, b: NodeBuilder, step: str) -> None:
        self.b, self.step = b, step

    def visit(self, node: Node, inputs: list[Value]) -> list[Value]:
        b = self.b
        outputs = [Value(f"{b.origin}/{self.step}/{_base(v)}") for v in node.outputs]
        b.graph.nodes.append(Node(f"__{b.origin}/{self.step}/{_base_name(node.name)}", node.op,
                                  inputs, outputs, dict(node.attrs), list(node.weights),
                                  origin=node.origin, where=node.where,
                                  built_by=node.built_by, built_for=node.built_for))
        return outputs


def _base(value: Value) -> str:
    """A value's name without its layer prefix: ``lstm1/W_xc_x`` -> ``W_xc_x``."""
    return value.name.rsplit("/", 1)[-1]


def _base_name(node_name: str) -> str:
    return node_name.rsplit("/", 1)[-1]
