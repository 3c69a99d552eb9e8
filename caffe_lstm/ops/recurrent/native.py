"""The ``onnx`` facet of LSTM, RNN and the fork's Lstm: ONNX's own ``LSTM`` / ``RNN`` operator
(``export --lstm-op native``), only where it computes exactly what the Caffe layer computes.

With the default ``--lstm-op scan`` the rewrite expands every recurrent layer first (one Scan
per layer) and these facets are never called. With ``native`` the rewrite leaves the layers
that have an ``onnx`` facet whole, and the exporter calls it: one forward ``LSTM`` (or ``RNN``)
node with the weights reordered to ONNX's gate order (``cell.onnx_lstm_arrays``, which the
``onnx`` weight layout uses too: W = W_xc, R = W_hc, B = [b_c, 0], P = p_i, p_o, p_f), or —
before anything is written — an error naming the layer and the reason (``onnx_refusal``, which
the exporter asks every node for). Never a different model.

When the two are exactly the same computation (the exactness rules, decided per layer):

1. cont (the fork's clip). Caffe computes r̃ = cont_t·r_{t−1}, c̃ = cont_t·c_{t−1} before each
   step; ONNX's LSTM has no per-step reset (``sequence_lens`` only masks trailing padding). So:

   - no cont (the fork's Lstm without a clip bottom: its implicit clip is 0 at t = 0, 1
     after, and its state starts at zero): exact;
   - a cont fed by the caller (a net input) or computed from one: refused, whatever its
     values will be, since one 0 in the middle of a sequence would reset one stream;
   - a constant cont (DummyData, ContinuationIndicator, or layers of constants only, folded
     by ``cont.read_cont``): exact iff cont_t = 1 for every t >= 1 and every stream (then
     r̃ = 1·r, c̃ = 1·c are the states themselves) and cont_0 is finite. Step 0 only scales the
     initial state: from zeros (``--state zero``, or the fork) cont_0·0 = 0 whatever cont_0 is;
     from given h_0, c_0 (``expose_hidden``, ``--state io``) the initial states become
     cont_0·h_0 and cont_0·c_0 — one Mul by the constant (1, N, 1) row, the very product
     Caffe computes, or the inputs as they are where cont_0 = 1. (A cont of 0 at t = 0 with
     state io thus zeroes the given state, as in Caffe: the h_0/c_0 inputs then do nothing.)

2. x_static: refused. Its term W_xc_static·x_static is the same at every step but differs per
   stream, so it fits neither B (no batch axis) nor W without copying x_static to every step.
3. The LSTM cell (docs/recurrent-extensions.md). ONNX's LSTM computes, with f, g, h its
   ``activations``: i = f(a_i + P_i ⊙ C_{t−1}), f_t = f(a_f + P_f ⊙ C_{t−1}),
   c = g(a_c), C_t = f_t ⊙ C_{t−1} + i ⊙ c, o = f(a_o + P_o ⊙ C_t), H_t = o ⊙ h(C_t): the
   output peephole sees the new cell, as in the variant. So f = Sigmoid (Caffe's gates),
   g = candidate_activation, h = cell_activation, P = the peephole rows in order i, o, f.
   TANH, SIGMOID, RELU map to Tanh, Sigmoid, Relu; IDENTITY to LeakyRelu with alpha 1
   (x ≥ 0: x; x < 0: 1·x = x, bit for bit; ONNX's Affine would do too, but TensorRT's parser
   has no Affine). CLIPPED_RELU min(max(x, 0), κ) has no ONNX activation (refused);
   ``cell_clip`` clamps the stored cell, while ONNX's ``clip`` clamps the gate
   pre-activations (refused); ``num_proj`` has no ONNX counterpart (refused).
4. RNN: Caffe's h_t = tanh(W_hh·(cont_t·h_{t−1}) + W_xh·x_t + b_h) is ONNX's RNN with its
   default Tanh; Caffe's top is o_t = tanh(W_ho·h_t + b_o), one MatMul, Add and Tanh after it.

Layout: x (T, N, ...) is reshaped to ONNX's X (T, N, I) (Reshape [0, 0, I]: T and N may be
symbolic); Y (T, 1, N, H) is squeezed to (T, N, H); Y_h, Y_c (1, N, H) are Caffe's h_T, c_T.
The fork's (T·N, I) rows are reshaped to (T, N, I) and its (T, N, H) result back to rows.
"""

from __future__ import annotations

import numpy as np

from caffe_lstm.errors import UnsupportedLayerError
from caffe_lstm.ir.graph import Node, Value
from caffe_lstm.ops.recurrent.cell import LstmVariant, LstmWeights, onnx_lstm_arrays
from caffe_lstm.ops.recurrent.cont import ContReading, read_cont
from caffe_lstm.ops.recurrent.fork_rules import ForkView, fork_view
from caffe_lstm.ops.recurrent.rules import has_static, num_layers
from caffe_lstm.ops.registry import count, recurrent_spec

#: ONNX activation (name, alpha or None) of each RecurrentActivation it can express.
_ACTIVATIONS = {"TANH": ("Tanh", None), "SIGMOID": ("Sigmoid", None), "RELU": ("Relu", None),
                "IDENTITY": ("LeakyRelu", 1.0)}


# ---- the exactness rules ------------------------------------------------------------------------


def _cont_refusal(cont: ContReading, what: str, steps: int, batch: int) -> str | None:
    """Why a cont (``what``: cont or clip) makes ONNX's operator differ from Caffe's layer."""
    values, cont = cont.constant, cont.value
    if values is None:
        source = ("a net input" if cont.producer is None else
                  f"computed by layer '{cont.producer.name}' from values known at run time")
        return (f"its {what} '{cont.name}' is {source}, so it may reset a stream in the middle of "
                "a sequence, which ONNX's operator cannot do (it has no per-step reset)")
    values = values.reshape(steps, batch)
    if not np.all(np.isfinite(values[0])):
        return f"its constant {what} '{cont.name}' is not finite at t = 0"
    late = np.argwhere(values[1:] != 1.0)
    if late.size:
        t, n = int(late[0][0]) + 1, int(late[0][1])
        return (f"its constant {what} '{cont.name}' is {values[t, n]:g} at t = {t} (stream {n}), "
                f"where Caffe scales the carried state (only t = 0 may differ from 1), which "
                f"ONNX's operator cannot do")
    return None


def _recurrent_refusal(node: Node) -> str | None:
    """The rules shared by LSTM and RNN: no x_static, a constant cont of 1 after t = 0."""
    x, spec = node.inputs[0], recurrent_spec(node.op)
    if has_static(node, len(spec.states)):
        return (f"it has a static input '{node.inputs[spec.static_bottom].name}', whose term "
                "differs per stream but not per step: ONNX's operator has no place for it")
    return _cont_refusal(read_cont(node), "cont", x.shape[0], x.shape[1])


def lstm_refusal(node: Node) -> str | None:
    """Why ONNX's LSTM cannot compute this LSTM exactly, or None (the module's rules)."""
    variant = LstmVariant.of(node)
    if num_layers(node) > 1:
        return (f"it stacks num_layers: {num_layers(node)} levels in one layer; the default "
                "export writes the stack level by level")
    if variant.num_proj:
        return (f"it has a recurrent projection (num_proj: {variant.num_proj}), "
                "which ONNX's LSTM has not")
    if variant.cell_clip > 0:
        return (f"it clips the stored cell (cell_clip: {variant.cell_clip:g}), while ONNX's "
                "clip bounds the gate pre-activations, not the cell")
    for field in ("candidate_activation", "cell_activation"):
        kind = getattr(variant, field)
        if kind not in _ACTIVATIONS:
            return f"its {field} {kind} has no ONNX activation"
    return _recurrent_refusal(node)


def rnn_refusal(node: Node) -> str | None:
    """Why ONNX's RNN (+ Caffe's output layer) cannot compute this RNN exactly, or None."""
    return _recurrent_refusal(node)


def fork_refusal(node: Node) -> str | None:
    """Why ONNX's LSTM cannot compute this fork Lstm exactly, or None."""
    clip = read_cont(node)
    if clip is None:
        return None  # the implicit clip: 0 at t = 0 (on a zero state), 1 after
    view = _fork_view(node)
    return _cont_refusal(clip, "clip", view.steps, view.batch)


# ---- the ONNX nodes -----------------------------------------------------------------------------


def _refuse(node: Node, reason: str | None) -> None:
    if reason is not None:  # the exporter asks onnx_refusal first: here only for direct calls
        raise UnsupportedLayerError(f"ONNX's own {node.op} operator cannot compute this layer "
                                    f"exactly: {reason}", node.label)


def _sequence(ctx, x: str, value: Value) -> str:
    """x (T, N, ...) as X (T, N, I): a Reshape unless x is 3-D already."""
    if len(value.shape) == 3:
        return x
    return ctx.add("Reshape", [x, ctx.ints([0, 0, count(value.shape, 2)], "x_shape")],
                   suffix="x_sequence")[0]


def _initial_states(ctx, node: Node, states: list[str]) -> list[str]:
    """The given initial states, times cont_0 where cont_0 differs from 1 (Caffe's r̃_0)."""
    if not states:
        return []
    cont = read_cont(node).constant[0].reshape(1, -1, 1)
    if np.all(cont == 1.0):
        return states
    scale = ctx.constant(cont.astype(np.float32), "cont_0")
    return [ctx.add("Mul", [state, scale], suffix=f"{name}_conted")[0]
            for state, name in zip(states, ("h_0", "c_0"))]


def _lstm_node(ctx, x: str, weights: LstmWeights, variant: LstmVariant, hidden: int,
               initial: list[str], outputs: int) -> list[str]:
    """One forward ONNX LSTM; returns Y squeezed to (T, N, H), then Y_h, Y_c when asked."""
    arrays = onnx_lstm_arrays(weights)  # also the ``onnx`` weight layout's arrays
    names = {key: ctx.constant(np.ascontiguousarray(array, np.float32), key)
             for key, array in arrays.items()}
    acts = [("Sigmoid", None), _ACTIVATIONS[variant.candidate_activation],
            _ACTIVATIONS[variant.cell_activation]]
    attrs = {"hidden_size": hidden, "direction": "forward",
             "activations": [name for name, _ in acts]}
    if any(alpha is not None for _, alpha in acts):
        # one alpha per activation, all 1: the same whether a runtime takes them by position
        # or consumes them in order for the activations that have one (only LeakyRelu here)
        attrs["activation_alpha"] = [1.0] * len(acts)
    inputs = [x, names["W"], names["R"], names["B"], "", *(initial or ["", ""])]
    if "P" in names:
        inputs.append(names["P"])
    results = ctx.add("LSTM", inputs, 1 + outputs, suffix="lstm", **attrs)
    return [ctx.squeeze(results[0], [1], "y"), *results[1:]]


def lstm_onnx(ctx, node: Node, *names: str) -> tuple[str, ...]:
    """LSTM as one ONNX LSTM node (refused unless exact: ``lstm_refusal``)."""
    _refuse(node, lstm_refusal(node))
    variant, hidden = LstmVariant.of(node), node.attrs["num_output"]
    blobs = [v.data for v in node.weights]
    weights = LstmWeights.split(blobs, False, variant)
    exposed = 2 if node.attrs["expose_hidden"] else 0
    x = _sequence(ctx, names[0], node.inputs[0])
    initial = _initial_states(ctx, node, list(names[2:2 + exposed]))
    return tuple(_lstm_node(ctx, x, weights, variant, hidden, initial, exposed))


def rnn_onnx(ctx, node: Node, *names: str) -> tuple[str, ...]:
    """RNN as one ONNX RNN node for h_t, then o_t = tanh(h_t·W_hoᵀ + b_o)."""
    _refuse(node, rnn_refusal(node))
    hidden = node.attrs["num_output"]
    exposed = 1 if node.attrs["expose_hidden"] else 0
    w_xh, b_h, w_hh = (node.weights[k].data for k in range(3))
    w_ho, b_o = names[-2], names[-1]
    x = _sequence(ctx, names[0], node.inputs[0])
    initial = _initial_states(ctx, node, list(names[2:2 + exposed]))
    w = ctx.constant(np.asarray(w_xh, np.float32)[None], "W")
    r = ctx.constant(np.asarray(w_hh, np.float32)[None], "R")
    b_h = np.asarray(b_h, np.float32)
    b = ctx.constant(np.concatenate([b_h, np.zeros_like(b_h)])[None], "B")  # [Wb, Rb]
    # h_t = tanh(W_xh·x_t + W_hh·h_{t−1} + b_h)   (ONNX's RNN, its default activation Tanh)
    results = ctx.add("RNN", [x, w, r, b, "", *initial], 1 + exposed, suffix="rnn",
                      hidden_size=hidden, direction="forward")
    h = ctx.squeeze(results[0], [1], "h")
    # o_t = tanh(h_t · W_hoᵀ + b_o)   (Caffe's output layer after the recurrence)
    w_ho_t = ctx.add("Transpose", [w_ho], suffix="W_ho_t", perm=[1, 0])[0]
    o_input = ctx.add("Add", [ctx.add("MatMul", [h, w_ho_t], suffix="W_ho_h")[0], b_o],
                      suffix="o_input")[0]
    return (ctx.add("Tanh", [o_input], suffix="o")[0], *results[1:])


def _fork_view(node: Node) -> ForkView:
    return fork_view(node, tuple(v.shape for v in node.inputs))


def fork_onnx(ctx, node: Node, *names: str) -> tuple[str, ...]:
    """The fork's Lstm as one ONNX LSTM node (rows reshaped to (T, N, I) and back)."""
    _refuse(node, fork_refusal(node))
    view = _fork_view(node)
    w_x, w_h, b = (v.data for v in node.weights)
    x = names[0]
    if view.flat:
        # rows t·N + n: (T, N, I) with N = batch_size (junhyukoh) or T = sequence_len + 1
        x = ctx.add("Reshape", [x, ctx.ints(view.sequence_dims(), "x_shape")],
                    suffix="x_sequence")[0]
    else:
        x = _sequence(ctx, x, node.inputs[0])
    (y,) = _lstm_node(ctx, x, LstmWeights(w_x, b, w_h), LstmVariant(), view.hidden, [], 0)
    if view.flat:
        y = ctx.add("Reshape", [y, ctx.ints([-1, view.hidden], "h_shape")], suffix="h_rows")[0]
    return (y,)
