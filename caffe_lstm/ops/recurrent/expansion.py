"""The recurrent surgery, the ``expand`` facet of LSTM, RNN and the fork's Lstm: each becomes
primitive layers plus one Loop (the pass that calls it is passes/expand.py).

Outside the loop: the input projection of all time steps (one InnerProduct, axis 2) and, for
a static input, one InnerProduct without bias whose (1, N, G) result every step reads (a loop
invariant, as in Caffe's own unrolled net; a Tile over time would fix T at rewrite time and
break engines with a dynamic sequence length). Inside the loop body, per step: the delta nodes
(cont_t times the carried states, Caffe's two-bottom Scale on axis 0), the one recurrent
InnerProduct, the gate sum, the gates sliced by name, their activations and the cell and
hidden updates. Names follow Caffe's own unrolled net
(lstm_layer.cpp FillUnrolledNet): W_xc_x, h_conted, W_hc_h, gate_input, c, h.

The LSTM variants of docs/recurrent-extensions.md are primitive layers too: the activations
TanH, Sigmoid, ReLU or Clip (min 0, max κ for CLIPPED_RELU; IDENTITY is no layer), each
peephole a learned one-bottom Scale (axis 2) of the cell plus a SUM, the cell clip a Clip
(−cell_clip, cell_clip) after the update, the projection one more InnerProduct (W_hr) after
m_t; with a projection the carried state is r (values r_prev, r_conted, W_hc_r, m, r).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from caffe_lstm.ir.graph import Graph, Node, Value
from caffe_lstm.ops.builder import NodeBuilder
from caffe_lstm.ops.loop import LoopState
from caffe_lstm.ops.recurrent.cell import CAFFE_GATES, PEEPHOLE_GATES, LstmVariant, LstmWeights
from caffe_lstm.ops.recurrent.fork_rules import ForkView
from caffe_lstm.ops.recurrent.rules import num_layers


# ---- the per-step cells (loop bodies) ----------------------------------------------------------


@dataclass
class _Step:
    """The body graph of one step and its input values, in Loop order."""

    graph: Graph
    builder: NodeBuilder

    def input(self, name: str) -> Value:
        value = Value(f"{self.builder.origin}/{name}")
        self.graph.inputs.append(value)
        return value


def _new_step(origin: str, where: str) -> _Step:
    body = Graph(name=f"{origin}/step")
    return _Step(body, NodeBuilder(body, origin, where))


def _masked(b: NodeBuilder, name: str, state: Value, cont_t: Value | None) -> Value:
    """The delta node: cont_t · state (a reset where cont_t = 0). No cont: the state itself."""
    return b.scale(name, state, cont_t) if cont_t is not None else state


def _lstm_cell(step: _Step, w: LstmWeights, peepholes: dict[str, Value], variant: LstmVariant,
               has_cont: bool, has_static: bool) -> None:
    """One LSTM step (with defaults, Caffe's LSTMUnit); body inputs W_xc_x_t, [cont_t],
    r_prev (h_prev without a projection), c_prev, [W_xc_x_static]. ``peepholes`` holds P's
    rows by gate (empty without peepholes)."""
    b, rec = step.builder, variant.recurrent_name
    w_xc_x_t = step.input("W_xc_x_t")
    cont_t = step.input("cont_t") if has_cont else None
    r_prev, c_prev = step.input(f"{rec}_prev"), step.input("c_prev")
    static_t = [step.input("W_xc_x_static")] if has_static else []
    # h_conted = cont_t · h_{t-1}   (r̃ = cont_t · r_{t−1} with a projection)
    r_conted = _masked(b, f"{rec}_conted", r_prev, cont_t)
    # c̃ = cont_t · c_{t-1}
    c_conted = _masked(b, "c_conted", c_prev, cont_t)
    # W_hc_h = h_conted · W_hcᵀ   (the one recurrent matrix multiply)
    w_hc_h = b.inner_product("transform", r_conted, w.w_hc, top=f"W_hc_{rec}")
    # gate_input = W_hc_h + W_xc_x_t (+ W_xc_x_static)
    gate_input = b.eltwise("gate_input", "SUM", w_hc_h, w_xc_x_t, *static_t)
    # [a_i | a_f | a_o | a_g] = gate_input
    a = dict(zip(CAFFE_GATES, b.slice("gate", gate_input, axis=2, parts=CAFFE_GATES)))
    # i_t = σ(a_i + p_i ⊙ c̃), f_t = σ(a_f + p_f ⊙ c̃)   (peephole terms only with peephole)
    i, f = (b.unary("Sigmoid", gate, _peephole(b, gate, a[gate], c_conted, peepholes))
            for gate in ("i", "f"))
    # g_t = candidate_activation(a_g)   (tanh in Caffe)
    g = _activation(b, variant.candidate_activation, variant.relu_clip, "g", a["g"])
    # c_t = f_t · c̃ + i_t · g_t
    c = b.eltwise("c_unclipped" if variant.cell_clip > 0 else "c", "SUM",
                  b.eltwise("f_c", "PROD", f, c_conted), b.eltwise("i_g", "PROD", i, g))
    if variant.cell_clip > 0:
        # c_t = clamp(c_t, −cell_clip, cell_clip)   (the stored state, after the update)
        c = b.clip("c", c, -variant.cell_clip, variant.cell_clip)
    # o_t = σ(a_o + p_o ⊙ c_t)   (the output peephole sees the new cell)
    o = b.unary("Sigmoid", "o", _peephole(b, "o", a["o"], c, peepholes))
    # h_t = o_t · tanh(c_t)   (m_t = o_t ⊙ cell_activation(c_t))
    h_c = _activation(b, variant.cell_activation, variant.relu_clip,
                      _CELL_OUTPUT_NAMES.get(variant.cell_activation, ""), c)
    m = b.eltwise("m" if variant.num_proj else "h", "PROD", o, h_c)
    # r_t = m_t · W_hrᵀ   (the recurrent projection; without one, r_t = h_t = m_t)
    r = b.inner_product("r", m, w.w_hr) if variant.num_proj else m
    step.graph.outputs = [r, c, r]  # next r, next c; the step output r


#: Names of the cell activation's node, by activation (Caffe's unrolled net says tanh_c).
_CELL_OUTPUT_NAMES = {"TANH": "tanh_c", "SIGMOID": "sigmoid_c", "RELU": "relu_c",
                      "CLIPPED_RELU": "clipped_relu_c"}


def _activation(b: NodeBuilder, kind: str, relu_clip: float, name: str, x: Value) -> Value:
    """A RecurrentActivation as primitive layers (node ``name``); IDENTITY is no layer."""
    if kind == "TANH":
        return b.unary("TanH", name, x)
    if kind == "SIGMOID":
        return b.unary("Sigmoid", name, x)
    if kind == "RELU":
        return b.relu(name, x)
    if kind == "CLIPPED_RELU":
        # min(max(x, 0), κ) = Caffe's Clip with min 0 and max κ
        return b.clip(name, x, 0.0, relu_clip)
    return x  # IDENTITY


def _peephole(b: NodeBuilder, gate: str, a: Value, c: Value, peepholes: dict[str, Value]
              ) -> Value:
    """a + p_gate ⊙ c (p_gate a learned (H,) Scale on axis 2); ``a`` itself without peepholes."""
    if not peepholes:
        return a
    # p_gate ⊙ c
    p_c = b.learned_scale(f"peephole_{gate}", c, peepholes[gate], axis=2)
    # a_gate + p_gate ⊙ c
    return b.eltwise(f"gate_{gate}_peephole", "SUM", a, p_c)


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


def _static_projection(b: NodeBuilder, x_static: Value, w_static: Value, name: str) -> Value:
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


def _add_loop(b: NodeBuilder, node: Node, iterated: list[Value], step: _Step,
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


def expand_lstm(b: NodeBuilder, node: Node) -> None:
    """LSTM: the input projection, the static projection, and one Loop of ``_lstm_cell``."""
    x, cont, x_static, exposed = _recurrent_bottoms(node, 2)
    variant, hidden = LstmVariant.of(node), node.attrs["num_output"]
    w = LstmWeights.split(node.weights, x_static is not None, variant)
    # W_xc_x = x · W_xcᵀ + b_c, all T steps at once   (T, N, 4H)
    iterated = [b.inner_product("x_transform", x, w.w_xc, w.b_c, top="W_xc_x"), cont]
    invariants = ([_static_projection(b, x_static, w.w_xc_static, "W_xc_x_static")]
                  if x_static is not None else [])
    step = _new_step(node.name, node.where)
    _lstm_cell(step, w, _peephole_rows(node.name, w.p), variant, has_cont=True,
               has_static=x_static is not None)
    rec = variant.recurrent_name
    states = [LoopState(rec, variant.recurrent_width(hidden), bool(exposed)),
              LoopState("c", hidden, bool(exposed))]
    outputs = [node.outputs[0]] + _final_states(node, (f"{rec}_T", "c_T"))
    _add_loop(b, node, iterated, step, states, exposed, outputs, invariants)


def expand_lstm_or_stack(b: NodeBuilder, node: Node) -> None:
    """One LSTM, or a num_layers stack as that many LSTMs written out (``expand_lstm`` each,
    level l named ``<layer>/level<l>`` and fed the h of level l − 1)."""
    levels = num_layers(node)
    if levels == 1:
        expand_lstm(b, node)
        return
    x, cont = node.inputs
    hidden = node.attrs["num_output"]
    for level in range(levels):
        last = level == levels - 1
        h = node.outputs[0] if last else Value(f"{node.name}/level{level}/h",
                                               (x.shape[0], x.shape[1], hidden))
        attrs = {"num_output": hidden, "expose_hidden": False, "extensions": {}}
        step = Node(f"{node.name}/level{level}", node.op, [x, cont], [h], attrs,
                    list(node.weights[3 * level:3 * level + 3]), origin=node.origin,
                    where=node.where)
        expand_lstm(NodeBuilder(b.graph, step.name, b.where), step)
        x = h


def _peephole_rows(layer: str, p: Value | None) -> dict[str, Value]:
    """The peephole blob P (3, H) as one (H,) weight per gate, ``<layer>/P_i`` and so on: a
    learned Scale's blob has the shape of the axes it scales. The rows are copies of P's data
    (none without weights), so every writer stores them as ordinary blobs."""
    if p is None:
        return {}
    return {gate: Value(f"{layer}/P_{gate}", p.shape[1:], is_weight=True,
                        data=None if p.data is None else np.array(p.data[row]))
            for row, gate in enumerate(PEEPHOLE_GATES)}


def expand_rnn(b: NodeBuilder, node: Node) -> None:
    """RNN: the input projection, the static projection, and one Loop of ``_rnn_cell``."""
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


def expand_fork_lstm(b: NodeBuilder, node: Node, view: ForkView) -> None:
    """The fork's Lstm is the same cell; W_x, W_h, b play W_xc, W_hc, b_c and clip plays cont.

    Rows (``view.flat``: x of T·N rows, whatever its axes) are reshaped to (T, N, I) first and
    the result back to (T·N, H). Without a clip bottom the state starts at zero and is never
    reset: no delta nodes are needed.
    """
    x, *clip = node.inputs
    w_x, w_h, bias = node.weights
    if view.flat:
        x = b.reshape("x_reshape", x, view.sequence_dims())
    iterated = [b.inner_product("x_transform", x, w_x, bias, top="W_xc_x")]
    if clip:
        iterated.append(b.reshape("cont_reshape", clip[0], [-1, view.batch]))
    step = _new_step(node.name, node.where)
    _lstm_cell(step, LstmWeights(w_x, bias, w_h), {}, LstmVariant(), has_cont=bool(clip),
               has_static=False)
    states = [LoopState(name, view.hidden, False) for name in ("h", "c")]
    h = Value(f"{node.name}/h_seq") if view.flat else node.outputs[0]
    _add_loop(b, node, iterated, step, states, [], [h] + _final_states(node, ("h_T", "c_T")), [])
    if view.flat:
        b.reshape("h_reshape", h, [-1, view.hidden], output=node.outputs[0])
