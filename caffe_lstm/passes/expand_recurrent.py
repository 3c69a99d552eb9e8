"""The recurrent surgery: every LSTM, RNN and fork Lstm becomes primitive layers plus one Loop.

Outside the loop: the input projection of all time steps (one InnerProduct, axis 2) and, for
a static input, one InnerProduct without bias whose (1, N, G) result every step reads (a loop
invariant, as in Caffe's own unrolled net; a Tile over time would fix T at rewrite time and
break engines with a dynamic sequence length). Inside the loop body, per step: the delta node (cont_t times the carried state, Caffe's two-bottom
Scale on axis 0), the one recurrent InnerProduct, the gate sum, the gates sliced by name, their
activations and the cell and hidden updates. Names follow Caffe's own unrolled net
(lstm_layer.cpp FillUnrolledNet): W_xc_x, h_conted, W_hc_h, gate_input, c, h.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from caffe_lstm.ir.builder import GraphBuilder
from caffe_lstm.ir.graph import Graph, Node, Value
from caffe_lstm.ops.loop import LoopState
from caffe_lstm.ops.recurrent import CAFFE_GATES
from caffe_lstm.ops.registry import count

#: Layer types this pass replaces.
RECURRENT_TYPES = ("LSTM", "RNN", "Lstm")


def expand_recurrent(graph: Graph) -> bool:
    """Replaces every recurrent node of ``graph`` in place. Returns whether anything changed.

    Postcondition: no LSTM, RNN or Lstm node remains.
    """
    nodes, changed = [], False
    for node in graph.nodes:
        expand = _EXPANDERS.get(node.op)
        if expand is None:
            nodes.append(node)
            continue
        scratch = Graph()
        expand(GraphBuilder(scratch, node.name, node.where), node)
        nodes.extend(scratch.nodes)
        changed = True
    graph.nodes = nodes
    return changed


# ---- the per-step cells (loop bodies) ----------------------------------------------------------


@dataclass
class _Step:
    """The body graph of one step and its input values, in Loop order."""

    graph: Graph
    builder: GraphBuilder

    def input(self, name: str) -> Value:
        value = Value(f"{self.builder.origin}/{name}")
        self.graph.inputs.append(value)
        return value


def _new_step(origin: str, where: str) -> _Step:
    body = Graph(name=f"{origin}/step")
    return _Step(body, GraphBuilder(body, origin, where))


def _masked(b: GraphBuilder, name: str, state: Value, cont_t: Value | None) -> Value:
    """The delta node: cont_t · state (a reset where cont_t = 0). No cont: the state itself."""
    return b.scale(name, state, cont_t) if cont_t is not None else state


def _lstm_cell(step: _Step, w_hc: Value, has_cont: bool, has_static: bool) -> None:
    """One LSTMUnit step; body inputs W_xc_x_t, [cont_t], h_prev, c_prev, [W_xc_x_static]."""
    b = step.builder
    w_xc_x_t = step.input("W_xc_x_t")
    cont_t = step.input("cont_t") if has_cont else None
    h_prev, c_prev = step.input("h_prev"), step.input("c_prev")
    static_t = [step.input("W_xc_x_static")] if has_static else []
    # h_conted = cont_t · h_{t-1}
    h_conted = _masked(b, "h_conted", h_prev, cont_t)
    # W_hc_h = h_conted · W_hcᵀ   (the one recurrent matrix multiply)
    w_hc_h = b.inner_product("transform", h_conted, w_hc, top="W_hc_h")
    # gate_input = W_hc_h + W_xc_x_t (+ W_xc_x_static)
    gate_input = b.eltwise("gate_input", "SUM", w_hc_h, w_xc_x_t, *static_t)
    # [a_i | a_f | a_o | a_g] = gate_input
    a = dict(zip(CAFFE_GATES, b.slice("gate", gate_input, axis=2, parts=CAFFE_GATES)))
    # i_t = σ(a_i), f_t = σ(a_f), o_t = σ(a_o), g_t = tanh(a_g)
    i, f, o = (b.unary("Sigmoid", gate, a[gate]) for gate in ("i", "f", "o"))
    g = b.unary("TanH", "g", a["g"])
    # c_t = f_t · (cont_t · c_{t-1}) + i_t · g_t
    c_conted = _masked(b, "c_conted", c_prev, cont_t)
    c = b.eltwise("c", "SUM", b.eltwise("f_c", "PROD", f, c_conted), b.eltwise("i_g", "PROD", i, g))
    # h_t = o_t · tanh(c_t)
    h = b.eltwise("h", "PROD", o, b.unary("TanH", "tanh_c", c))
    step.graph.outputs = [h, c, h]  # next h, next c; the step output h


def _rnn_cell(step: _Step, w_hh: Value, w_ho: Value, b_o: Value, has_static: bool) -> None:
    """One RNN step; body inputs W_xh_x_t, cont_t, h_prev, [W_xh_x_static]."""
    b = step.builder
    w_xh_x_t, cont_t = step.input("W_xh_x_t"), step.input("cont_t")
    h_prev = step.input("h_prev")
    static_t = [step.input("W_xh_x_static")] if has_static else []
    # h_conted = cont_t · h_{t-1}
    h_conted = _masked(b, "h_conted", h_prev, cont_t)
    # h_neuron_input = h_conted · W_hhᵀ + W_xh_x_t (+ W_xh_x_static)
    w_hh_h = b.inner_product("W_hh_h", h_conted, w_hh)
    h_input = b.eltwise("h_neuron_input", "SUM", w_hh_h, w_xh_x_t, *static_t)
    # h_t = tanh(h_neuron_input)
    h = b.unary("TanH", "h", h_input)
    # o_t = tanh(h_t · W_hoᵀ + b_o)
    o = b.unary("TanH", "o", b.inner_product("W_ho_h", h, w_ho, b_o))
    step.graph.outputs = [h, o]  # next h; the step output o


# ---- the layers --------------------------------------------------------------------------------


def _static_projection(b: GraphBuilder, x_static: Value, w_static: Value, name: str) -> Value:
    """W_x_static·x_static, the same for every step: InnerProduct (axis 1) and Reshape."""
    # W_xc_x_static = x_static · W_xc_staticᵀ   (N, G), no bias
    projected = b.inner_product(f"{name}_preshape", x_static, w_static, axis=1)
    # as (1, N, G), the shape of one step's gate input
    return b.reshape(name, projected, [1, -1, w_static.shape[0]])


def _recurrent_bottoms(node: Node, n_states: int) -> tuple[Value, Value, Value | None, list]:
    """x, cont, x_static or None, and the exposed initial states (possibly empty)."""
    x, cont, *rest = node.inputs
    exposed = rest[-n_states:] if node.attrs.get("expose_hidden") else []
    static = rest[0] if len(rest) > len(exposed) else None
    return x, cont, static, exposed


def _add_loop(b: GraphBuilder, node: Node, iterated: list[Value], step: _Step,
              states: list[LoopState], initial: list[Value], outputs: list[Value],
              invariants: list[Value]) -> None:
    """The Loop node; its outputs are the recurrent layer's own tops (plus unused final states)."""
    attrs = {"body": step.graph, "n_iterate": len(iterated), "states": states,
             "n_sequence_outputs": len(step.graph.outputs) - len(states)}
    loop = Node(f"__{node.name}/loop", "Loop", iterated + initial + invariants, outputs, attrs,
                origin=node.name, where=node.where)
    b.graph.nodes.append(loop)


def _final_states(node: Node, names: tuple[str, ...]) -> list[Value]:
    """The recurrent layer's final-state tops with expose_hidden, else fresh unused values."""
    if node.attrs.get("expose_hidden"):
        return list(node.outputs[1:])
    return [Value(f"{node.name}/{name}") for name in names]


def _expand_lstm(b: GraphBuilder, node: Node) -> None:
    x, cont, x_static, exposed = _recurrent_bottoms(node, 2)
    w_xc, b_c, *w_static, w_hc = node.weights
    hidden = node.attrs["num_output"]
    # W_xc_x = x · W_xcᵀ + b_c, all T steps at once   (T, N, 4H)
    iterated = [b.inner_product("x_transform", x, w_xc, b_c, top="W_xc_x"), cont]
    invariants = ([_static_projection(b, x_static, w_static[0], "W_xc_x_static")]
                  if x_static is not None else [])
    step = _new_step(node.name, node.where)
    _lstm_cell(step, w_hc, has_cont=True, has_static=x_static is not None)
    states = [LoopState(name, hidden, bool(exposed)) for name in ("h", "c")]
    outputs = [node.outputs[0]] + _final_states(node, ("h_T", "c_T"))
    _add_loop(b, node, iterated, step, states, exposed, outputs, invariants)


def _expand_rnn(b: GraphBuilder, node: Node) -> None:
    x, cont, x_static, exposed = _recurrent_bottoms(node, 1)
    w_xh, b_h, *w_static, w_hh, w_ho, b_o = node.weights
    hidden = node.attrs["num_output"]
    # W_xh_x = x · W_xhᵀ + b_h, all T steps at once   (T, N, H)
    iterated = [b.inner_product("x_transform", x, w_xh, b_h, top="W_xh_x"), cont]
    invariants = ([_static_projection(b, x_static, w_static[0], "W_xh_x_static")]
                  if x_static is not None else [])
    step = _new_step(node.name, node.where)
    _rnn_cell(step, w_hh, w_ho, b_o, has_static=x_static is not None)
    states = [LoopState("h", hidden, bool(exposed))]
    outputs = [node.outputs[0]] + _final_states(node, ("h_T",))
    _add_loop(b, node, iterated, step, states, exposed, outputs, invariants)


def _expand_fork_lstm(b: GraphBuilder, node: Node) -> None:
    """The fork's Lstm is the same cell; W_x, W_h, b play W_xc, W_hc, b_c and clip plays cont.

    A 2-D x (T·N, I) is reshaped to (T, N, I) first and the result back to (T·N, H). Without a
    clip bottom the state starts at zero and is never reset: no delta nodes are needed.
    """
    x, *clip = node.inputs
    w_x, w_h, bias = node.weights
    hidden, flat = node.attrs["num_output"], len(x.shape) == 2
    batch = node.attrs["batch_size"] if flat else x.shape[1]
    if flat:
        x = b.reshape("x_reshape", x, [-1, batch, count(x.shape, 1)])
    iterated = [b.inner_product("x_transform", x, w_x, bias, top="W_xc_x")]
    if clip:
        iterated.append(b.reshape("cont_reshape", clip[0], [-1, batch]))
    step = _new_step(node.name, node.where)
    _lstm_cell(step, w_h, has_cont=bool(clip), has_static=False)
    states = [LoopState(name, hidden, False) for name in ("h", "c")]
    h = Value(f"{node.name}/h_seq") if flat else node.outputs[0]
    _add_loop(b, node, iterated, step, states, [], [h] + _final_states(node, ("h_T", "c_T")), [])
    if flat:
        b.reshape("h_reshape", h, [-1, hidden], output=node.outputs[0])


_EXPANDERS: dict[str, Callable[[GraphBuilder, Node], None]] = {
    "LSTM": _expand_lstm,
    "RNN": _expand_rnn,
    "Lstm": _expand_fork_lstm,
}
