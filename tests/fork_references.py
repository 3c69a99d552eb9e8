"""Ports of forks' forward loops, written from their sources, as the references the fork
recurrent layers are checked against (float64, one loop per step and stream, as the C++ does).
"""

from __future__ import annotations

import numpy as np


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def junhyukoh_lstm(x, clip, w_i, w_h, b, batch_size=1):
    """junhyukoh/caffe-lstm@4df18ac LstmLayer: Reshape (N = batch_size, T = num / N,
    I = count / num) then Forward_cpu with the per-stream pointers of its GPU code: rows
    t·N + n of x and of the clip; without a clip cont = (t > 0); the state starts at zero (the
    carry-over of a previous call is masked by clip_0 = 0). Returns the top (T·N, H)."""
    num = x.shape[0]
    steps, inputs = num // batch_size, x.size // num
    hidden = w_h.shape[1]
    rows = np.asarray(x, np.float64).reshape(num, inputs)
    pre_gate = rows @ np.asarray(w_i, np.float64).T + np.asarray(b, np.float64)
    clip = None if clip is None else np.asarray(clip, np.float64).reshape(num)
    h_prev, c_prev = np.zeros((batch_size, hidden)), np.zeros((batch_size, hidden))
    top = np.zeros((num, hidden))
    for t in range(steps):
        h_to_gate = h_prev @ np.asarray(w_h, np.float64).T
        h_next, c_next = np.zeros_like(h_prev), np.zeros_like(c_prev)
        for n in range(batch_size):
            row = t * batch_size + n
            cont = bool(clip[row]) if clip is not None else t > 0
            gate = pre_gate[row] + (h_to_gate[n] if cont else 0.0)
            i, f = _sigmoid(gate[:hidden]), _sigmoid(gate[hidden:2 * hidden]) if cont else 0.0
            o, g = _sigmoid(gate[2 * hidden:3 * hidden]), np.tanh(gate[3 * hidden:])
            c_next[n] = f * c_prev[n] + i * g      # c(t) = f(t)*c(t-1) + i(t)*g(t)
            h_next[n] = o * np.tanh(c_next[n])
            top[row] = h_next[n]
        h_prev, c_prev = h_next, c_next
    return top


def _apollo_tanh(x):
    """apollocaffe's tanh: (e^2x − 1) / (e^2x + 1) for |x| < 5, else ±1."""
    if abs(x) < 5:
        exp2x = np.exp(2 * x)
        return (exp2x - 1) / (exp2x + 1)
    return 1.0 if x > 0 else -1.0


def apollocaffe_lstm_unit(x, c_prev, w_input, w_input_gate, w_forget_gate, w_output_gate):
    """apollocaffe LstmUnitLayer::Forward_cpu: four gemms of x (N, K) with the (1, C, 1, K)
    blobs, then per element: i, f, o = sigmoid, value = tanh (the fork's), c = c_prev·f + i·v,
    h = tanh(c)·o. Returns h (N, C), c (N, C)."""
    num = x.shape[0]
    x = np.asarray(x, np.float64).reshape(num, -1)
    cells = np.shape(c_prev)[1]
    gemm = [x @ np.asarray(w, np.float64).reshape(cells, -1).T
            for w in (w_input, w_input_gate, w_forget_gate, w_output_gate)]
    h, c = np.zeros((num, cells)), np.zeros((num, cells))
    for n in range(num):
        for k in range(cells):
            value = _apollo_tanh(gemm[0][n, k])
            i, f, o = (_sigmoid(gemm[g][n, k]) for g in (1, 2, 3))
            c[n, k] = c_prev[n][k] * f + i * value
            h[n, k] = _apollo_tanh(c[n, k]) * o
    return h, c
