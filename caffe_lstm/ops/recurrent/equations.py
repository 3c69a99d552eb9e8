"""The recurrent equations in numpy: the ground truth that the rewrite is checked against, so
the math is written out literally, step by step, in float64 (float32 in and out)."""

from __future__ import annotations

import numpy as np

from caffe_lstm.ir.graph import Node
from caffe_lstm.ops.registry import count
from caffe_lstm.ops.recurrent.cell import CAFFE_GATES, PEEPHOLE_GATES, LstmVariant, LstmWeights


def sigmoid(x: np.ndarray) -> np.ndarray:
    # σ(x) = 1 / (1 + e^−x) = 0.5·tanh(0.5·x) + 0.5, which cannot overflow
    return 0.5 * np.tanh(0.5 * x) + 0.5


def _activate(kind: str, x: np.ndarray, relu_clip: float) -> np.ndarray:
    """A RecurrentActivation: TANH, SIGMOID, RELU, CLIPPED_RELU min(max(x, 0), κ), IDENTITY."""
    if kind == "TANH":
        return np.tanh(x)
    if kind == "SIGMOID":
        return sigmoid(x)
    if kind == "RELU":
        return np.maximum(x, 0.0)
    if kind == "CLIPPED_RELU":
        return np.minimum(np.maximum(x, 0.0), relu_clip)
    return x  # IDENTITY


def project_inputs(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """x_transform: X = x·Wᵀ + b for all steps at once, x flattened from axis 2 (T, N, out)."""
    steps, batch = x.shape[:2]
    return x.reshape(steps, batch, count(x.shape, 2)) @ w.T + b


def project_static(x_static: np.ndarray | None, w: np.ndarray | None) -> np.ndarray | float:
    """W_xc_x_static = x_static·W_staticᵀ (no bias) -> (N, out); 0 without a static input."""
    if x_static is None:
        return 0.0
    return x_static.reshape(x_static.shape[0], -1) @ w.T


def _split_gates(gate_input: np.ndarray) -> dict[str, np.ndarray]:
    """The 4H pre-activations cut into H-wide blocks, by gate name."""
    return dict(zip(CAFFE_GATES, np.split(gate_input, len(CAFFE_GATES), axis=-1)))


def _peephole(w: LstmWeights, gate: str, c: np.ndarray) -> np.ndarray | float:
    """p_gate ⊙ c, or 0 without peepholes."""
    return 0.0 if w.p is None else w.p[PEEPHOLE_GATES.index(gate)] * c


def _lstm_step(x_proj_t: np.ndarray, cont_t: np.ndarray, r: np.ndarray, c: np.ndarray,
               w: LstmWeights, v: LstmVariant) -> tuple[np.ndarray, np.ndarray]:
    """One step of docs/recurrent-extensions.md (with defaults: lstm_layer.cpp's unrolled net
    and LSTMUnit); r is (N, R), c (N, H), cont_t (N,); ``w`` holds float64 arrays."""
    cont = cont_t[:, None]
    # r̃ = cont_t · r_{t−1}, c̃ = cont_t · c_{t−1}   (a product, not a select)
    r_conted, c_conted = cont * r, cont * c
    # a_t = W_hc·r̃ + W_xc·x_t + b_c (+ W_xc_static·x_static, already in x_proj_t)
    a = _split_gates(r_conted @ w.w_hc.T + x_proj_t)
    # i_t = σ(a_i + p_i ⊙ c̃), f_t = σ(a_f + p_f ⊙ c̃)   (peephole terms only with peephole)
    i = sigmoid(a["i"] + _peephole(w, "i", c_conted))
    f = sigmoid(a["f"] + _peephole(w, "f", c_conted))
    # g_t = candidate_activation(a_g)
    g = _activate(v.candidate_activation, a["g"], v.relu_clip)
    # c_t = f_t ⊙ c̃ + i_t ⊙ g_t
    c = f * c_conted + i * g
    if v.cell_clip > 0:
        # c_t = clamp(c_t, −cell_clip, cell_clip): the stored state, after the update
        c = np.clip(c, -v.cell_clip, v.cell_clip)
    # o_t = σ(a_o + p_o ⊙ c_t)   (the output peephole sees the NEW cell)
    o = sigmoid(a["o"] + _peephole(w, "o", c))
    # m_t = o_t ⊙ cell_activation(c_t)
    m = o * _activate(v.cell_activation, c, v.relu_clip)
    # r_t = W_hr·m_t with a projection, else m_t
    return (m if w.w_hr is None else m @ w.w_hr.T), c


def run_lstm(x_proj: np.ndarray, cont: np.ndarray, r: np.ndarray, c: np.ndarray,
              w: LstmWeights, variant: LstmVariant) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All T steps from (r_0, c_0): returns the stacked r (T, N, R), r_T (N, R), c_T (N, H)."""
    rs = []
    for x_proj_t, cont_t in zip(x_proj, cont):
        r, c = _lstm_step(x_proj_t, cont_t, r, c, w, variant)
        rs.append(r)
    return np.stack(rs), r, c


def rnn_step(x_proj_t: np.ndarray, cont_t: np.ndarray, h: np.ndarray, w_hh: np.ndarray,
              w_ho: np.ndarray, b_o: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One step of rnn_layer.cpp's unrolled net: returns (o_t, h_t), each (N, H)."""
    # h_conted_{t-1} = cont_t · h_{t-1}
    h_conted = cont_t[:, None] * h
    # h_t = tanh(W_hh·h_conted_{t-1} + W_xh_x_t (+ W_xh_x_static, already in x_proj_t))
    h = np.tanh(h_conted @ w_hh.T + x_proj_t)
    # o_t = tanh(W_ho·h_t + b_o)
    o = np.tanh(h @ w_ho.T + b_o)
    return o, h


def split_arrays(node: Node, arrays: tuple[np.ndarray, ...], n_states: int):
    """A numpy facet's arguments as float64 (x, cont, x_static or None, exposed states, blobs)."""
    n_bottoms = len(node.inputs)
    x, cont, *extra = [np.asarray(a, np.float64) for a in arrays[:n_bottoms]]
    blobs = [np.asarray(a, np.float64) for a in arrays[n_bottoms:]]
    n_exposed = n_states if node.attrs["expose_hidden"] else 0
    x_static = extra[0] if len(extra) > n_exposed else None
    return x, cont, x_static, extra[len(extra) - n_exposed:], blobs


def initial_state(exposed: list[np.ndarray], index: int, batch: int, width: int) -> np.ndarray:
    """State ``index`` from the exposed (1, N, width) bottoms, else zeros (one fresh Forward)."""
    return exposed[index].reshape(batch, width) if exposed else np.zeros((batch, width))


def as_float32(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    return tuple(np.asarray(a, np.float32) for a in arrays)

