"""torch.nn.LSTM as the independent reference for Caffe's LSTM, with Caffe's blobs mapped.

Caffe's gate blocks are (i, f, o, g), torch's (i, f, g, o); Caffe has one bias, torch two
(the second is zeroed). Everything in float64.
"""

from __future__ import annotations

import numpy as np
import pytest

#: Caffe block k of the torch layout: torch (i, f, g, o) = Caffe blocks (0, 1, 3, 2).
TORCH_FROM_CAFFE = (0, 1, 3, 2)


def to_torch_gates(a: np.ndarray) -> np.ndarray:
    """A (4H, …) Caffe weight or bias with its gate blocks in torch's order, float64."""
    blocks = np.split(np.asarray(a, np.float64), 4, axis=0)
    return np.concatenate([blocks[k] for k in TORCH_FROM_CAFFE], axis=0)


def torch_lstm(x, w_xc, b_c, w_hc, h0=None, c0=None):
    """torch.nn.LSTM over x (T, N, I) from (h0, c0) of (N, H), zeros by default -> y (T, N, H),
    h_n (N, H), c_n (N, H)."""
    torch = pytest.importorskip("torch")
    steps, batch, inputs = np.shape(x)
    hidden = np.shape(w_hc)[1]
    zeros = np.zeros((batch, hidden))
    lstm = torch.nn.LSTM(inputs, hidden).double()
    with torch.no_grad():
        lstm.weight_ih_l0.copy_(torch.from_numpy(to_torch_gates(w_xc)))
        lstm.weight_hh_l0.copy_(torch.from_numpy(to_torch_gates(w_hc)))
        lstm.bias_ih_l0.copy_(torch.from_numpy(to_torch_gates(b_c)))
        lstm.bias_hh_l0.zero_()
        state = tuple(torch.from_numpy(np.asarray(s if s is not None else zeros, np.float64))[None]
                      for s in (h0, c0))
        y, (h_n, c_n) = lstm(torch.from_numpy(np.asarray(x, np.float64)), state)
    return y.numpy(), h_n[0].numpy(), c_n[0].numpy()
