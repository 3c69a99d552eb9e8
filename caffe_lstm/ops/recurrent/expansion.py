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


import numpy as np

from caffe_lstm.ir.graph import Node, Value
from caffe_lstm.ops.builder import COPY_DIM, NodeBuilder, Step
from caffe_lstm.ops.recurrent.cell import PEEPHOLE_GATES, LstmVariant, LstmWeights
from caffe_lstm.ops.recurrent.cells import InnerProductGates, lstm_step, rnn_step
from caffe_lstm.ops.recurrent.fork_rules import ForkView
from caffe_lstm.ops.recurrent.rules import num_layers


# ---- the per-step cells (loop bodies): ops/recurrent/cells.py on a Step ---------------------


def _lstm_body(b: NodeBuilder, x_proj: Value, cont: Value | None, w: LstmWeights,
               peepholes: dict[str, Value], variant: LstmVariant, width: int, hidden: int,
               exposed: list[Value], static: Value | None) -> Step:
    """One LSTM step (with defaults, Caffe's LSTMUnit); body inputs W_xc_x_t, [cont_t],
    r_prev (h_prev without a projection), c_prev, [W_xc_x_static]. ``peepholes`` holds P's
    rows by gate (empty without peepholes)."""
    s, rec = b.step(), variant.recurrent_name
    w_xc_x_t = s.sequence(x_proj, "W_xc_x_t")
    cont_t = s.sequence(cont, "cont_t") if cont is not None else None
    initial = iter(exposed)
    # h_conted = cont_t · h_{t-1}   (r̃ = cont_t · r_{t−1} with a projection); c̃ = cont_t · c_{t-1}
    r_conted = s.state(rec, (COPY_DIM, width), next(initial, None), cont_t)
    c_conted = s.state("c", (COPY_DIM, hidden), next(initial, None), cont_t)
    static_t = [s.invariant(static, "W_xc_x_static")] if static is not None else []
    r, c = lstm_step(s, w_xc_x_t, r_conted, c_conted, InnerProductGates(w.w_hc),
                     static=static_t, candidate_activation=variant.candidate_activation,
                     cell_activation=variant.cell_activation, relu_clip=variant.relu_clip,
                     peepholes=peepholes, cell_clip=variant.cell_clip, projection=w.w_hr,
                     recurrent_name=rec)
    s.update(rec, r)
    s.update("c", c)
    s.output(r)  # next r, next c; the step output r
    return s


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


def _final_states(node: Node) -> list[Value] | None:
    """The recurrent layer's final-state tops with expose_hidden, else None (new values)."""
    return list(node.outputs[1:]) if node.attrs.get("expose_hidden") else None


def expand_lstm(b: NodeBuilder, node: Node) -> None:
    """LSTM: the input projection, the static projection, and one Loop of ``lstm_step``."""
    x, cont, x_static, exposed = _recurrent_bottoms(node, 2)
    variant, hidden = LstmVariant.of(node), node.attrs["num_output"]
    w = LstmWeights.split(node.weights, x_static is not None, variant)
    # W_xc_x = x · W_xcᵀ + b_c, all T steps at once   (T, N, 4H)
    x_proj = b.inner_product("x_transform", x, w.w_xc, w.b_c, top="W_xc_x")
    static = (_static_projection(b, x_static, w.w_xc_static, "W_xc_x_static")
              if x_static is not None else None)
    step = _lstm_body(b, x_proj, cont, w, _peephole_rows(node.name, w.p), variant,
                      variant.recurrent_width(hidden), hidden, exposed, static)
    b.loop(step, [node.outputs[0]], _final_states(node))


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
    """RNN: the input projection, the static projection, and one Loop of ``rnn_step``; body
    inputs W_xh_x_t, cont_t, h_prev, [W_xh_x_static]."""
    x, cont, x_static, exposed = _recurrent_bottoms(node, 1)
    w_xh, b_h, *w_static, w_hh, w_ho, b_o = node.weights
    hidden = node.attrs["num_output"]
    # W_xh_x = x · W_xhᵀ + b_h, all T steps at once   (T, N, H)
    x_proj = b.inner_product("x_transform", x, w_xh, b_h, top="W_xh_x")
    s = b.step()
    w_xh_x_t, cont_t = s.sequence(x_proj, "W_xh_x_t"), s.sequence(cont, "cont_t")
    # h_conted = cont_t · h_{t-1}
    h_conted = s.state("h", (COPY_DIM, hidden), exposed[0] if exposed else None, cont_t)
    static_t = ([s.invariant(_static_projection(b, x_static, w_static[0], "W_xh_x_static"),
                             "W_xh_x_static")] if x_static is not None else [])
    h, o = rnn_step(s, w_xh_x_t, h_conted, InnerProductGates(w_hh), static=static_t,
                    output=InnerProductGates(w_ho, b_o))
    s.update("h", h)
    s.output(o)  # next h; the step output o
    b.loop(s, [node.outputs[0]], _final_states(node))


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
    x_proj = b.inner_product("x_transform", x, w_x, bias, top="W_xc_x")
    cont = b.reshape("cont_reshape", clip[0], [-1, view.batch]) if clip else None
    step = _lstm_body(b, x_proj, cont, LstmWeights(w_x, bias, w_h), {}, LstmVariant(),
                      view.hidden, view.hidden, [], None)
    h = Value(f"{node.name}/h_seq") if view.flat else node.outputs[0]
    b.loop(step, [h])
    if view.flat:
        b.reshape("h_reshape", h, [-1, view.hidden], output=node.outputs[0])
