"""Reusable recurrent cells: one step of an LSTM, a GRU or a vanilla RNN, written with primitive
layers on a ``Step`` (ops/builder.py), given how the gate pre-activations come from h.

A fork's recurrent variant is then its parse, its blobs and one call: the x side of the gates
is computed before the loop (all steps at once) and handed in as a ``Step.sequence`` slice;
the h side is ``InnerProductGates`` (Caffe's recurrent matrix, gate axis 2 of (1, N, G)) or
``ConvolutionGates`` (a convolutional recurrence, gate axis = the channel axis). The gate blocks
lie along that axis in the order the caller names. Each function returns the new state(s); the
caller decides what the step updates and outputs (docs/ops.md, "Recurrent cells").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from caffe_lstm.errors import GraphError
from caffe_lstm.ir.graph import Value
from caffe_lstm.ops.builder import NodeBuilder, Step
from caffe_lstm.ops.recurrent.cell import CAFFE_GATES

#: The pointwise layer types a cell's activations may name (Caffe's spelling).
ACTIVATIONS = ("Sigmoid", "TanH", "ReLU")


@dataclass(frozen=True)
class InnerProductGates:
    """Pre-activations = x · Wᵀ (+ b) over ``axis`` (InnerProduct): W is (G, width of x)."""

    w: Value
    b: Value | None = None
    axis: int = 2

    def apply(self, s: NodeBuilder, name: str, x: Value, top: str | None = None) -> Value:
        return s.inner_product(name, x, self.w, self.b, axis=self.axis, top=top)


@dataclass(frozen=True)
class ConvolutionGates:
    """Pre-activations = W ⋆ x (+ b) (Convolution): W is (G, C/group, *kernel), the gates on
    the channel ``axis`` (1 for (1, C, H, W), 2 for (1, N, C, H, W)); pad, stride and dilation
    once for every spatial axis or once per axis."""

    w: Value
    b: Value | None = None
    pad: int | tuple[int, ...] = 0
    stride: int | tuple[int, ...] = 1
    dilation: int | tuple[int, ...] = 1
    axis: int = 1
    group: int = 1

    def apply(self, s: NodeBuilder, name: str, x: Value, top: str | None = None) -> Value:
        return s.convolution(name, x, self.w, self.b, pad=_listed(self.pad),
                             stride=_listed(self.stride), dilation=_listed(self.dilation),
                             axis=self.axis, group=self.group, top=top)


Gates = InnerProductGates | ConvolutionGates


def _listed(value):
    return list(value) if isinstance(value, tuple) else value


def activate(s: NodeBuilder, kind: str, name: str, x: Value) -> Value:
    """A pointwise activation by layer type (``ACTIVATIONS``) as node ``name``."""
    if kind == "ReLU":
        return s.relu(name, x)
    if kind not in ACTIVATIONS:
        raise GraphError(f"activation {kind!r} is not one of {', '.join(ACTIVATIONS)}",
                         s.origin, "name a Caffe layer type: Sigmoid, TanH or ReLU")
    return s.unary(kind, name, x)


def _recurrent_blocks(s: Step, name: str, h: Value, recurrent: Gates | Sequence[Gates],
                      gates: Sequence[str], axis: int) -> dict[str, Value]:
    """The h side of ``gates``: one projection sliced into blocks on ``axis``, or one
    projection per gate."""
    if isinstance(recurrent, (InnerProductGates, ConvolutionGates)):
        projected = recurrent.apply(s, name, h)
        if len(gates) == 1:
            return {gates[0]: projected}
        return dict(zip(gates, s.slice(f"{name}_gate", projected, axis, parts=gates)))
    if len(recurrent) != len(gates):
        raise GraphError(f"{len(recurrent)} recurrent projections for the {len(gates)} gates "
                         f"{', '.join(gates)}", s.origin, "give one projection, or one per gate")
    return {gate: g.apply(s, f"{name}_{gate}", h) for gate, g in zip(gates, recurrent)}


def rnn_step(s: Step, x_t: Value, h: Value, recurrent: Gates, *, static: Sequence[Value] = (),
             output: Gates | None = None) -> tuple[Value, Value]:
    """Caffe's RNN step: h_t = tanh(R(h) + x_t [+ static]); o_t = tanh(output(h_t)) (h_t
    itself without ``output``). ``h`` is the state as the step reads it (cont applied).
    Returns (h_t, o_t). Nodes W_hh_h, h_neuron_input, h, W_ho_h, o (rnn_layer.cpp's names)."""
    # h_neuron_input = W_hh·h_conted + W_xh_x_t (+ W_xh_x_static)
    h_input = s.eltwise("h_neuron_input", "SUM", recurrent.apply(s, "W_hh_h", h), x_t, *static)
    # h_t = tanh(h_neuron_input)
    h_t = s.unary("TanH", "h", h_input)
    if output is None:
        return h_t, h_t
    # o_t = tanh(W_ho·h_t + b_o)
    return h_t, s.unary("TanH", "o", output.apply(s, "W_ho_h", h_t))


def gru_step(s: Step, x_t: Value, h: Value, recurrent: Gates | Sequence[Gates],
             candidate: Gates | None = None, *, order: Sequence[str] = ("z", "r", "h"),
             linear_before_reset: bool = False, z_keeps: str = "previous",
             gate_activation: str = "Sigmoid", candidate_activation: str = "TanH") -> Value:
    """One GRU step; returns h_t. ``x_t`` holds the x side of the gates z, r, h in ``order``
    along the gate axis (bias included); ``h`` is h_{t−1} as the step reads it (cont applied).

    - ``recurrent``: the h side of z and r (in ``order``), one projection sliced or one per
      gate; with ``linear_before_reset`` and no ``candidate`` it covers h's block too.
    - ``candidate``: the h side of the candidate, applied to r_t ⊙ h_{t−1} (reset before,
      ONNX's default form) or to h_{t−1} and then multiplied by r_t (``linear_before_reset``,
      torch's form).

    z_t = f(x_z + R_z h), r_t = f(x_r + R_r h), h̃_t = g(x_h + reset term), and
    h_t = h̃_t + z_t ⊙ (h_{t−1} − h̃_t) (``z_keeps="previous"``: ONNX, torch, Caffe forks) or
    h_t = h_{t−1} + z_t ⊙ (h̃_t − h_{t−1}) (``z_keeps="candidate"``).
    """
    if not linear_before_reset and candidate is None:
        raise GraphError("a GRU that resets before the recurrent product needs its candidate "
                         "projection", s.origin, "pass candidate=, or linear_before_reset=True")
    if z_keeps not in ("previous", "candidate"):
        raise GraphError(f"z_keeps is {z_keeps!r}", s.origin, "use 'previous' or 'candidate'")
    first = recurrent if isinstance(recurrent, (InnerProductGates, ConvolutionGates)) \
        else recurrent[0]
    axis = first.axis
    x = dict(zip(order, s.slice("x_gate", x_t, axis, parts=order)))
    with_h = candidate is None
    r_side = _recurrent_blocks(s, "R", h, recurrent,
                               [g for g in order if with_h or g != "h"], axis)
    # z_t = f(x_z + R_z·h_{t−1}), r_t = f(x_r + R_r·h_{t−1})
    z = activate(s, gate_activation, "z", s.eltwise("inner_z", "SUM", x["z"], r_side["z"]))
    r = activate(s, gate_activation, "r", s.eltwise("inner_r", "SUM", x["r"], r_side["r"]))
    if linear_before_reset:
        # r_t ⊙ (R_h·h_{t−1} + Rb_h)
        recurrent_h = r_side["h"] if with_h else candidate.apply(s, "Rh_h", h)
        reset = s.eltwise("R_rt_h", "PROD", r, recurrent_h)
    else:
        # R_h·(r_t ⊙ h_{t−1})
        reset = candidate.apply(s, "R_rt_h", s.eltwise("rt_h", "PROD", r, h))
    # h̃_t = g(x_h + reset term)
    h_tilde = activate(s, candidate_activation, "ht",
                       s.eltwise("inner_h", "SUM", x["h"], reset))
    if z_keeps == "previous":
        # h_t = h̃_t + z_t ⊙ (h_{t−1} − h̃_t)
        blended = s.eltwise("z_h_prod", "PROD", z, s.eltwise_coeff("h_sub", (1, -1), h, h_tilde))
        return s.eltwise("h", "SUM", h_tilde, blended)
    # h_t = h_{t−1} + z_t ⊙ (h̃_t − h_{t−1})
    blended = s.eltwise("z_h_prod", "PROD", z, s.eltwise_coeff("h_sub", (1, -1), h_tilde, h))
    return s.eltwise("h", "SUM", h, blended)


def lstm_step(s: Step, x_t: Value, h: Value, c: Value, recurrent: Gates, *,
              static: Sequence[Value] = (), candidate_activation: str = "TANH",
              cell_activation: str = "TANH", relu_clip: float = 0.0,
              peepholes: dict[str, Value] | None = None, cell_clip: float = 0.0,
              projection: Value | None = None, recurrent_name: str = "h",
              ) -> tuple[Value, Value]:
    """One LSTM step (with defaults, Caffe's LSTMUnit); returns (r_t, c_t), r_t = h_t without
    a projection. ``x_t`` holds the x side of the gates i, f, o, g along the recurrent
    projection's gate axis (bias included), ``h`` (r with a projection) and ``c`` the states as
    the step reads them (cont applied). The extension of docs/recurrent-extensions.md:
    activations by name ("TANH", "SIGMOID", "RELU", "CLIPPED_RELU" with ``relu_clip``,
    "IDENTITY"), ``peepholes`` p_i, p_f, p_o (learned Scales on the gate axis), ``cell_clip``,
    and ``projection`` W_hr (r_t = m_t·W_hrᵀ). Nodes after lstm_layer.cpp's unrolled net."""
    peepholes = peepholes or {}
    axis, rec = recurrent.axis, recurrent_name
    # W_hc_h = h_conted · W_hcᵀ   (the one recurrent product)
    w_hc_h = recurrent.apply(s, "transform", h, top=f"W_hc_{rec}")
    # gate_input = W_hc_h + W_xc_x_t (+ W_xc_x_static)
    gate_input = s.eltwise("gate_input", "SUM", w_hc_h, x_t, *static)
    # [a_i | a_f | a_o | a_g] = gate_input
    a = dict(zip(CAFFE_GATES, s.slice("gate", gate_input, axis=axis, parts=CAFFE_GATES)))
    # i_t = σ(a_i + p_i ⊙ c̃), f_t = σ(a_f + p_f ⊙ c̃)   (peephole terms only with peephole)
    i, f = (s.unary("Sigmoid", gate, _peephole(s, gate, a[gate], c, peepholes, axis))
            for gate in ("i", "f"))
    # g_t = candidate_activation(a_g)   (tanh in Caffe)
    g = _lstm_activation(s, candidate_activation, relu_clip, "g", a["g"])
    # c_t = f_t · c̃ + i_t · g_t
    c_t = s.eltwise("c_unclipped" if cell_clip > 0 else "c", "SUM",
                    s.eltwise("f_c", "PROD", f, c), s.eltwise("i_g", "PROD", i, g))
    if cell_clip > 0:
        # c_t = clamp(c_t, −cell_clip, cell_clip)   (the stored state, after the update)
        c_t = s.clip("c", c_t, -cell_clip, cell_clip)
    # o_t = σ(a_o + p_o ⊙ c_t)   (the output peephole sees the new cell)
    o = s.unary("Sigmoid", "o", _peephole(s, "o", a["o"], c_t, peepholes, axis))
    # h_t = o_t · tanh(c_t)   (m_t = o_t ⊙ cell_activation(c_t))
    h_c = _lstm_activation(s, cell_activation, relu_clip,
                           _CELL_OUTPUT_NAMES.get(cell_activation, ""), c_t)
    m = s.eltwise("m" if projection is not None else "h", "PROD", o, h_c)
    # r_t = m_t · W_hrᵀ   (the recurrent projection; without one, r_t = h_t = m_t)
    r = s.inner_product("r", m, projection) if projection is not None else m
    return r, c_t


#: Names of the cell activation's node, by activation (Caffe's unrolled net says tanh_c).
_CELL_OUTPUT_NAMES = {"TANH": "tanh_c", "SIGMOID": "sigmoid_c", "RELU": "relu_c",
                      "CLIPPED_RELU": "clipped_relu_c"}


def _lstm_activation(s: NodeBuilder, kind: str, relu_clip: float, name: str, x: Value) -> Value:
    """A RecurrentActivation as primitive layers (node ``name``); IDENTITY is no layer."""
    if kind == "TANH":
        return s.unary("TanH", name, x)
    if kind == "SIGMOID":
        return s.unary("Sigmoid", name, x)
    if kind == "RELU":
        return s.relu(name, x)
    if kind == "CLIPPED_RELU":
        # min(max(x, 0), κ) = Caffe's Clip with min 0 and max κ
        return s.clip(name, x, 0.0, relu_clip)
    if kind == "IDENTITY":
        return x  # no layer
    raise GraphError(f"LSTM activation {kind!r} is not one of TANH, SIGMOID, RELU, "
                     "CLIPPED_RELU, IDENTITY", s.origin, "use recurrent_param's spelling")


def _peephole(s: NodeBuilder, gate: str, a: Value, c: Value, peepholes: dict[str, Value],
              axis: int) -> Value:
    """a + p_gate ⊙ c (p_gate a learned Scale on the gate axis); ``a`` without peepholes."""
    if not peepholes:
        return a
    # p_gate ⊙ c
    p_c = s.learned_scale(f"peephole_{gate}", c, peepholes[gate], axis=axis)
    # a_gate + p_gate ⊙ c
    return s.eltwise(f"gate_{gate}_peephole", "SUM", a, p_c)


__all__ = ["ACTIVATIONS", "ConvolutionGates", "Gates", "InnerProductGates", "activate",
           "gru_step", "lstm_step", "rnn_step"]
