"""LSTM, RNN and the fork Lstm against torch (float64) and against values worked out by hand.

Torch mapping (reference/peers.md §5.2): Caffe gate blocks (i, f, o, g) become torch's
(i, f, g, o), i.e. Caffe block indices (0, 1, 3, 2); b_c goes to bias_ih, bias_hh = 0.
A per-step cont is emulated as in peers.md §5.4: torch one step at a time, each step started
from (cont_t·h, cont_t·c).
"""

from __future__ import annotations

import numpy as np
import pytest

from caffe_lstm.errors import ShapeError
from caffe_lstm.frontend.params import to_params
from caffe_lstm.ops import get_op
from caffe_lstm.proto import caffe_pb2
from tests.helpers import make_node, net_with_weights, run_op, torch_lstm

ATOL = 1e-5


def _torch():
    return pytest.importorskip("torch")


def _normal(rng: np.random.Generator, *shape: int, std: float = 0.5) -> np.ndarray:
    return (rng.normal(0.0, std, shape)).astype(np.float32)


def _fresh_cont(steps: int, batch: int) -> np.ndarray:
    """cont = 0 at t = 0 and 1 afterwards: every stream starts a sequence at the first step."""
    cont = np.ones((steps, batch), np.float32)
    cont[0] = 0
    return cont


def _torch_lstm_per_step(x, cont, w_xc, b_c, w_hc, h0=None, c0=None):
    """peers.md §5.4: torch with T = 1 per call, each call started from (cont_t·h, cont_t·c)."""
    batch, hidden = x.shape[1], w_hc.shape[1]
    h = np.zeros((batch, hidden)) if h0 is None else h0
    c = np.zeros((batch, hidden)) if c0 is None else c0
    ys = []
    for x_t, cont_t in zip(x, cont):
        mask = np.asarray(cont_t, np.float64)[:, None]
        y, h, c = torch_lstm(x_t[None], w_xc, b_c, w_hc, mask * h, mask * c)
        ys.append(y[0])
    return np.stack(ys), h, c


def _lstm_weights(rng, inputs: int, hidden: int):
    return (_normal(rng, 4 * hidden, inputs), _normal(rng, 4 * hidden),
            _normal(rng, 4 * hidden, hidden))


LSTM_ATTRS = {"num_output": 0, "expose_hidden": False}


def _lstm_attrs(hidden: int, expose_hidden: bool = False) -> dict:
    return {**LSTM_ATTRS, "num_output": hidden, "expose_hidden": expose_hidden}


# ---- 1. LSTM vs torch.nn.LSTM, cont = [0, 1, 1, ...] -------------------------------------


@pytest.mark.parametrize("x_shape, hidden", [
    ((1, 1, 4), 1),
    ((2, 3, 5), 2),
    ((17, 3, 4), 7),
    ((17, 1, 3), 2),
    ((2, 1, 6), 7),
    ((5, 3, 3, 2), 7),   # trailing input dims: I = 3·2 = 6
    ((2, 3, 3, 2), 1),
])
def test_lstm_matches_torch(x_shape, hidden):
    rng = np.random.default_rng(1)
    steps, batch = x_shape[:2]
    x = _normal(rng, *x_shape, std=1.0)
    cont = _fresh_cont(steps, batch)
    w_xc, b_c, w_hc = _lstm_weights(rng, int(np.prod(x_shape[2:])), hidden)
    (h,) = run_op("LSTM", _lstm_attrs(hidden), [x, cont], [w_xc, b_c, w_hc])
    expected, _, _ = torch_lstm(x.reshape(steps, batch, -1), w_xc, b_c, w_hc)
    assert h.dtype == np.float32
    np.testing.assert_allclose(h, expected, atol=ATOL, rtol=0)


# ---- 2. per-step cont: a reset in one stream only, and a non-binary value -----------------


def test_lstm_cont_reset_in_one_stream_and_non_binary_cont():
    rng = np.random.default_rng(2)
    steps, batch, inputs, hidden = 6, 3, 4, 5
    x = _normal(rng, steps, batch, inputs, std=1.0)
    cont = _fresh_cont(steps, batch)
    cont[3, 1] = 0.0   # stream 1 starts a new sequence at step 3
    cont[4, 2] = 0.5   # stream 2: a non-binary cont scales the carried state
    w_xc, b_c, w_hc = _lstm_weights(rng, inputs, hidden)
    (h,) = run_op("LSTM", _lstm_attrs(hidden), [x, cont], [w_xc, b_c, w_hc])
    expected, _, _ = _torch_lstm_per_step(x, cont, w_xc, b_c, w_hc)
    np.testing.assert_allclose(h, expected, atol=ATOL, rtol=0)
    # The reset matters: a plain run differs after it in stream 1 and 2, not in stream 0.
    plain, _, _ = torch_lstm(x, w_xc, b_c, w_hc)
    assert np.abs(h[3:, 1:] - plain[3:, 1:]).max() > 1e-3
    np.testing.assert_allclose(h[:, 0], plain[:, 0], atol=ATOL, rtol=0)


# ---- 3. static input --------------------------------------------------------------------------


@pytest.mark.parametrize("static_shape", [(3, 4), (3, 2, 2)])
def test_lstm_static_input_matches_torch_with_concatenated_input(static_shape):
    rng = np.random.default_rng(3)
    steps, batch, inputs, hidden = 4, 3, 5, 2
    static = int(np.prod(static_shape[1:]))
    x = _normal(rng, steps, batch, inputs, std=1.0)
    x_static = _normal(rng, *static_shape, std=1.0)
    cont = _fresh_cont(steps, batch)
    w_xc, b_c, w_hc = _lstm_weights(rng, inputs, hidden)
    w_static = _normal(rng, 4 * hidden, static)
    (h,) = run_op("LSTM", _lstm_attrs(hidden), [x, cont, x_static], [w_xc, b_c, w_static, w_hc])
    # torch: x_static appended to every step's input, W_xc_static's columns to weight_ih.
    x_cat = np.concatenate([x, np.broadcast_to(x_static.reshape(batch, static),
                                               (steps, batch, static))], axis=2)
    expected, _, _ = torch_lstm(x_cat, np.concatenate([w_xc, w_static], axis=1), b_c, w_hc)
    np.testing.assert_allclose(h, expected, atol=ATOL, rtol=0)


# ---- 4. expose_hidden -----------------------------------------------------------------------


@pytest.mark.parametrize("with_static", [False, True])
def test_lstm_expose_hidden_matches_torch_initial_state(with_static):
    rng = np.random.default_rng(4)
    steps, batch, inputs, hidden, static = 5, 3, 4, 3, 2
    x = _normal(rng, steps, batch, inputs, std=1.0)
    x_static = _normal(rng, batch, static, std=1.0)
    h_0, c_0 = _normal(rng, 1, batch, hidden, std=1.0), _normal(rng, 1, batch, hidden, std=1.0)
    cont = np.ones((steps, batch), np.float32)
    cont[0] = [1.0, 0.0, 0.5]   # keep, drop and halve the given initial state
    w_xc, b_c, w_hc = _lstm_weights(rng, inputs, hidden)
    w_static = _normal(rng, 4 * hidden, static)
    bottoms = [x, cont] + ([x_static] if with_static else []) + [h_0, c_0]
    weights = [w_xc, b_c] + ([w_static] if with_static else []) + [w_hc]
    h, h_T, c_T = run_op("LSTM", _lstm_attrs(hidden, True), bottoms, weights, n_tops=3)
    x_ref, w_ref = x, w_xc
    if with_static:
        x_ref = np.concatenate([x, np.broadcast_to(x_static, (steps, batch, static))], axis=2)
        w_ref = np.concatenate([w_xc, w_static], axis=1)
    mask = cont[0][:, None].astype(np.float64)
    y, h_n, c_n = torch_lstm(x_ref, w_ref, b_c, w_hc, mask * h_0[0], mask * c_0[0])
    np.testing.assert_allclose(h, y, atol=ATOL, rtol=0)
    np.testing.assert_allclose(h_T, h_n[None], atol=ATOL, rtol=0)
    np.testing.assert_allclose(c_T, c_n[None], atol=ATOL, rtol=0)


# ---- 5. LSTM worked out by hand -------------------------------------------------------------


def test_lstm_by_hand():
    # I = H = 1, T = 2, N = 1; x = [1, 2], cont = [0, 1]; gate rows (i, f, o, g):
    # W_xc = [0.5, -1, 1, 0.5], b_c = [0, 0.5, 0, 0.5], W_hc = [1, -1, 0.5, 2].
    # t = 1 (cont 0, so h_conted = 0 and the forget term vanishes):
    #   a = (0.5·1 + 0, -1·1 + 0.5, 1·1 + 0, 0.5·1 + 0.5) = (0.5, -0.5, 1, 1)
    #   i = σ(0.5) = 0.62245933, o = σ(1) = 0.73105858, g = tanh(1) = 0.76159416
    #   c1 = 0·σ(-0.5)·0 + i·g = 0.62245933·0.76159416 = 0.47406139
    #   h1 = o·tanh(c1) = 0.73105858·0.44147499 = 0.32274408
    # t = 2 (cont 1, h_conted = h1):
    #   a_i = 0.5·2 + 0   + 1·h1   = 1.32274408  -> i = 0.78963789
    #   a_f = -1·2 + 0.5  - 1·h1   = -1.82274408 -> f = 0.13910493
    #   a_o = 1·2 + 0     + 0.5·h1 = 2.16137204  -> o = 0.89672668
    #   a_g = 0.5·2 + 0.5 + 2·h1   = 2.14548816  -> g = 0.97298675
    #   c2 = f·c1 + i·g = 0.13910493·0.47406139 + 0.78963789·0.97298675 = 0.83425148
    #   h2 = o·tanh(c2) = 0.89672668·0.68275225 = 0.61224216
    x = np.array([1.0, 2.0]).reshape(2, 1, 1)
    cont = np.array([[0.0], [1.0]])
    w_xc = np.array([[0.5], [-1.0], [1.0], [0.5]])
    b_c = np.array([0.0, 0.5, 0.0, 0.5])
    w_hc = np.array([[1.0], [-1.0], [0.5], [2.0]])
    (h,) = run_op("LSTM", _lstm_attrs(1), [x, cont], [w_xc, b_c, w_hc])
    np.testing.assert_allclose(h.ravel(), [0.32274408, 0.61224216], atol=1e-6, rtol=0)


# ---- 6. RNN: by hand and vs torch.nn.RNN ----------------------------------------------------


def test_rnn_by_hand():
    # I = H = 1, T = 2, N = 1; x = [1, 2], cont = [0, 1];
    # W_xh = 0.5, b_h = 0.1, W_hh = -1, W_ho = 2, b_o = -0.5.
    # t = 1: h1 = tanh(0.5·1 + 0.1 + -1·(0·h0)) = tanh(0.6) = 0.53704957
    #        o1 = tanh(2·h1 - 0.5) = tanh(0.57409913) = 0.51836334
    # t = 2: h2 = tanh(0.5·2 + 0.1 + -1·(1·h1)) = tanh(0.56295043) = 0.51016325
    #        o2 = tanh(2·h2 - 0.5) = tanh(0.52032650) = 0.47795197
    x = np.array([1.0, 2.0]).reshape(2, 1, 1)
    cont = np.array([[0.0], [1.0]])
    weights = [np.array([[0.5]]), np.array([0.1]), np.array([[-1.0]]), np.array([[2.0]]),
               np.array([-0.5])]
    (o,) = run_op("RNN", _lstm_attrs(1), [x, cont], weights)
    np.testing.assert_allclose(o.ravel(), [0.51836334, 0.47795197], atol=1e-6, rtol=0)


def _torch_rnn(x, w_xh, b_h, w_hh, w_ho, b_o, h0):
    """h from torch.nn.RNN(tanh) (float64) from h0, then o = tanh(h·W_hoᵀ + b_o) in torch."""
    torch = _torch()
    hidden = w_hh.shape[0]
    rnn = torch.nn.RNN(x.shape[2], hidden, nonlinearity="tanh").double()
    as64 = lambda a: torch.from_numpy(np.asarray(a, np.float64))  # noqa: E731
    with torch.no_grad():
        rnn.weight_ih_l0.copy_(as64(w_xh))
        rnn.weight_hh_l0.copy_(as64(w_hh))
        rnn.bias_ih_l0.copy_(as64(b_h))
        rnn.bias_hh_l0.zero_()
        h, h_n = rnn(as64(x), as64(h0)[None])
        o = torch.tanh(torch.nn.functional.linear(h, as64(w_ho), as64(b_o)))
    return o.numpy(), h_n[0].numpy()


def _rnn_weights(rng, inputs: int, hidden: int):
    return (_normal(rng, hidden, inputs), _normal(rng, hidden), _normal(rng, hidden, hidden),
            _normal(rng, hidden, hidden), _normal(rng, hidden))


@pytest.mark.parametrize("steps, batch, inputs, hidden",
                         [(1, 1, 3, 1), (7, 3, 4, 2), (17, 2, 3, 7)])
def test_rnn_matches_torch(steps, batch, inputs, hidden):
    rng = np.random.default_rng(6)
    x = _normal(rng, steps, batch, inputs, std=1.0)
    w_xh, b_h, w_hh, w_ho, b_o = _rnn_weights(rng, inputs, hidden)
    (o,) = run_op("RNN", _lstm_attrs(hidden), [x, _fresh_cont(steps, batch)],
                  [w_xh, b_h, w_hh, w_ho, b_o])
    expected, _ = _torch_rnn(x, w_xh, b_h, w_hh, w_ho, b_o, np.zeros((batch, hidden)))
    np.testing.assert_allclose(o, expected, atol=ATOL, rtol=0)


def test_rnn_static_expose_hidden_and_reset_match_torch_per_step():
    rng = np.random.default_rng(7)
    steps, batch, inputs, hidden, static = 5, 3, 4, 3, 2
    x = _normal(rng, steps, batch, inputs, std=1.0)
    x_static = _normal(rng, batch, static, std=1.0)
    h_0 = _normal(rng, 1, batch, hidden, std=1.0)
    cont = np.ones((steps, batch), np.float32)
    cont[0] = [1.0, 0.0, 0.5]
    cont[2, 0] = 0.0
    w_xh, b_h, w_hh, w_ho, b_o = _rnn_weights(rng, inputs, hidden)
    w_static = _normal(rng, hidden, static)
    o, h_T = run_op("RNN", _lstm_attrs(hidden, True), [x, cont, x_static, h_0],
                    [w_xh, b_h, w_static, w_hh, w_ho, b_o], n_tops=2)
    # torch: x_static appended to every step's input; one step per call from cont_t·h.
    x_cat = np.concatenate([x, np.broadcast_to(x_static, (steps, batch, static))], axis=2)
    w_cat = np.concatenate([w_xh, w_static], axis=1)
    h, outputs = h_0[0].astype(np.float64), []
    for x_t, cont_t in zip(x_cat, cont):
        o_t, h = _torch_rnn(x_t[None], w_cat, b_h, w_hh, w_ho, b_o, cont_t[:, None] * h)
        outputs.append(o_t[0])
    np.testing.assert_allclose(o, np.stack(outputs), atol=ATOL, rtol=0)
    np.testing.assert_allclose(h_T, h[None], atol=ATOL, rtol=0)


# ---- 7. the fork type Lstm ------------------------------------------------------------------


def _fork_attrs(hidden: int, batch_size: int | None = None) -> dict:
    return {"num_output": hidden, "batch_size": batch_size}


@pytest.mark.parametrize("batch_size", [1, 2])
def test_fork_lstm_2d_layout_matches_torch(batch_size):
    rng = np.random.default_rng(8)
    steps, inputs, hidden = 6, 4, 3
    x = _normal(rng, steps * batch_size, inputs, std=1.0)   # row t·N + n
    w_x, b, w_h = _lstm_weights(rng, inputs, hidden)
    (h,) = run_op("Lstm", _fork_attrs(hidden, batch_size), [x], [w_x, w_h, b])
    expected, _, _ = torch_lstm(x.reshape(steps, batch_size, inputs), w_x, b, w_h)
    assert h.shape == (steps * batch_size, hidden)
    np.testing.assert_allclose(h, expected.reshape(steps * batch_size, hidden), atol=ATOL, rtol=0)


def test_fork_lstm_2d_layout_with_clip_bottom():
    rng = np.random.default_rng(9)
    steps, batch, inputs, hidden = 5, 2, 3, 2
    x = _normal(rng, steps * batch, inputs, std=1.0)
    clip = _fresh_cont(steps, batch)
    clip[3, 1] = 0.0   # stream 1 restarts at step 3
    w_x, b, w_h = _lstm_weights(rng, inputs, hidden)
    (h,) = run_op("Lstm", _fork_attrs(hidden, batch), [x, clip.reshape(steps * batch, 1)],
                  [w_x, w_h, b])
    expected, _, _ = _torch_lstm_per_step(x.reshape(steps, batch, inputs), clip, w_x, b, w_h)
    np.testing.assert_allclose(h, expected.reshape(steps * batch, hidden), atol=ATOL, rtol=0)


@pytest.mark.parametrize("x_shape", [(5, 3, 4), (4, 2, 3, 2)])
def test_fork_lstm_time_major_layout_without_clip(x_shape):
    rng = np.random.default_rng(10)
    steps, batch, hidden = x_shape[0], x_shape[1], 7
    x = _normal(rng, *x_shape, std=1.0)
    w_x, b, w_h = _lstm_weights(rng, int(np.prod(x_shape[2:])), hidden)
    (h,) = run_op("Lstm", _fork_attrs(hidden), [x], [w_x, w_h, b])
    expected, _, _ = torch_lstm(x.reshape(steps, batch, -1), w_x, b, w_h)
    np.testing.assert_allclose(h, expected, atol=ATOL, rtol=0)


def test_fork_lstm_time_major_layout_with_clip():
    rng = np.random.default_rng(11)
    steps, batch, inputs, hidden = 6, 3, 4, 2
    x = _normal(rng, steps, batch, inputs, std=1.0)
    clip = _fresh_cont(steps, batch)
    clip[2, 0] = 0.0
    clip[4, 2] = 0.0
    w_x, b, w_h = _lstm_weights(rng, inputs, hidden)
    (h,) = run_op("Lstm", _fork_attrs(hidden), [x, clip], [w_x, w_h, b])
    expected, _, _ = _torch_lstm_per_step(x, clip, w_x, b, w_h)
    np.testing.assert_allclose(h, expected, atol=ATOL, rtol=0)


# ---- parse and blob names ---------------------------------------------------------------------


def test_parse_reads_recurrent_and_lstm_params():
    p = to_params(caffe_pb2.RecurrentParameter(num_output=4, expose_hidden=True))
    expected = {"num_output": 4, "expose_hidden": True, "extensions": {}}
    assert get_op("LSTM").parse(None, p) == expected
    assert get_op("RNN").parse(None, p) == expected
    # extension fields are kept by presence, even at their default value
    p = to_params(caffe_pb2.RecurrentParameter(num_output=4, peephole=False, num_proj=2))
    assert get_op("LSTM").parse(None, p)["extensions"] == {"peephole": False, "num_proj": 2}
    fork = to_params(caffe_pb2.LSTMParameter(num_output=3, clipping_threshold=0.1, batch_size=2))
    assert get_op("Lstm").parse(None, fork) == {"num_output": 3, "batch_size": 2}


def test_blob_names_follow_caffe_order():
    def names(op_type, attrs, shapes):
        return [name for name, _ in get_op(op_type).blobs(None, make_node(op_type, attrs, shapes),
                                                          *shapes)]
    assert names("LSTM", _lstm_attrs(2), [(3, 1, 4), (3, 1), (1, 5)]) == [
        "W_xc", "b_c", "W_xc_static", "W_hc"]
    assert names("RNN", _lstm_attrs(2), [(3, 1, 4), (3, 1)]) == [
        "W_xh", "b_h", "W_hh", "W_ho", "b_o"]
    assert names("Lstm", _fork_attrs(2), [(3, 1, 4)]) == ["W_x", "W_h", "b"]


# ---- 8. errors ---------------------------------------------------------------------------------


def _infer_error(op_type, attrs, shapes, n_tops=1, error=ShapeError) -> str:
    node = make_node(op_type, attrs, shapes, n_tops, name="rec1")
    with pytest.raises(error) as info:
        get_op(op_type).infer(None, node, *shapes)
    message = str(info.value)
    assert "\n" not in message and f"layer 'rec1' ({op_type})" in message
    return message


@pytest.mark.parametrize("op_type, attrs, shapes, n_tops, expected", [
    ("LSTM", _lstm_attrs(2), [(5, 3, 4), (5, 4)], 1, "cont must have shape (5, 3), found (5, 4)"),
    ("LSTM", _lstm_attrs(2), [(5, 3, 4), (5, 3, 1)], 1, "cont must have shape (5, 3)"),
    ("LSTM", _lstm_attrs(2, True), [(5, 3, 4), (5, 3), (1, 3, 3), (1, 3, 2)], 3,
     "h_0 must have shape (1, 3, 2), found (1, 3, 3)"),
    ("LSTM", _lstm_attrs(2, True), [(5, 3, 4), (5, 3), (1, 3, 2), (3, 2)], 3,
     "c_0 must have shape (1, 3, 2)"),
    ("LSTM", _lstm_attrs(2), [(5, 3, 4), (5, 3), (3, 2), (1, 3, 2)], 1,
     "expected 2 or 3 bottoms (x, cont, [x_static]), found 4"),
    ("LSTM", _lstm_attrs(2, True), [(5, 3, 4), (5, 3)], 3, "expected 4 or 5 bottoms"),
    ("LSTM", _lstm_attrs(2), [(5, 3, 4)], 1, "found 1"),
    ("LSTM", _lstm_attrs(0), [(5, 3, 4), (5, 3)], 1, "num_output is 0"),
    ("LSTM", _lstm_attrs(2), [(5,), (5, 3)], 1, "x must be (T, N, ...)"),
    ("LSTM", _lstm_attrs(2), [(5, 3, 4), (5, 3), (2, 6)], 1, "x_static must be (N, ...)"),
    ("LSTM", _lstm_attrs(2, True), [(5, 3, 4), (5, 3), (1, 3, 2), (1, 3, 2)], 1,
     "expected 3 top(s) (h, h_T, c_T), found 1"),
    ("LSTM", _lstm_attrs(2), [(5, 3, 4), (5, 3)], 3, "expected 1 top(s) (h), found 3"),
    ("RNN", _lstm_attrs(2), [(5, 3, 4), (3, 5)], 1, "cont must have shape (5, 3), found (3, 5)"),
    ("RNN", _lstm_attrs(2, True), [(5, 3, 4), (5, 3), (3, 1), (1, 3, 2), (1, 3, 2)], 2,
     "expected 3 or 4 bottoms (x, cont, [x_static], h_0), found 5"),
    ("RNN", _lstm_attrs(2, True), [(5, 3, 4), (5, 3), (1, 3, 3)], 2,
     "h_0 must have shape (1, 3, 2), found (1, 3, 3)"),
    ("Lstm", _fork_attrs(2, 2), [(5, 4)], 1, "N = batch_size = 2"),
    ("Lstm", _fork_attrs(2, 2), [(6, 4), (5,)], 1, "clip must hold T·N = 6 values"),
    ("Lstm", _fork_attrs(2, 2), [(6, 4), (3, 2)], 1, "(num == count), found shape (3, 2)"),
    ("Lstm", _fork_attrs(2), [(6, 2, 4), (12,)], 1, "clip must have shape (6, 2), found (12,)"),
    ("Lstm", _fork_attrs(0), [(6, 2, 4)], 1, "num_output is 0"),
    ("Lstm", _fork_attrs(2), [(0, 3)], 1, "x must be T·N rows"),
    ("Lstm", _fork_attrs(2), [(6, 2, 4), (6, 2), (6, 2)], 1, "expected 1 or 2 bottoms"),
])
def test_shape_errors_name_the_layer(op_type, attrs, shapes, n_tops, expected):
    assert expected in _infer_error(op_type, attrs, shapes, n_tops)


@pytest.mark.parametrize("field, value, shown", [
    ("peephole", True, "recurrent_param.peephole: true"),
    ("peephole", False, "recurrent_param.peephole: false"),
    ("num_proj", 16, "recurrent_param.num_proj: 16"),
    ("candidate_activation", caffe_pb2.RecurrentParameter.RELU,
     "recurrent_param.candidate_activation: RELU"),
    ("cell_activation", caffe_pb2.RecurrentParameter.IDENTITY, "cell_activation: IDENTITY"),
    ("relu_clip", 6.0, "recurrent_param.relu_clip: 6"),
    ("cell_clip", 3.0, "recurrent_param.cell_clip: 3"),
])
def test_rnn_rejects_every_extension_field(field, value, shown):
    p = to_params(caffe_pb2.RecurrentParameter(num_output=2, **{field: value}))
    attrs = get_op("RNN").parse(None, p)
    message = _infer_error("RNN", attrs, [(5, 3, 4), (5, 3)])
    assert shown in message and "RNN has no cell variants" in message


# ---- the one reading of cont ----------------------------------------------------------------

#: cont = 0.5 · (2 · ContinuationIndicator): a constant two computed layers deep, 0 at t = 0.
DEEP_CONT_NET = """name: "deep_cont"
input: "x" input_shape { dim: 4 dim: 2 dim: 3 }
layer { name: "ci" type: "ContinuationIndicator" top: "ci"
        continuation_indicator_param { time_step: 4 batch_size: 2 } }
layer { name: "twice" type: "Power" bottom: "ci" top: "twice" power_param { scale: 2 } }
layer { name: "cont" type: "Power" bottom: "twice" top: "cont" power_param { scale: 0.5 } }
layer { name: "lstm" type: "LSTM" bottom: "x" bottom: "cont" top: "h"
        recurrent_param { num_output: 3 } }
"""


def test_a_cont_two_layers_deep_folds_for_all_three_callers(tmp_path):
    from caffe_lstm.feeds import random_feeds
    from caffe_lstm.ops.recurrent import read_cont
    from caffe_lstm.ops.recurrent.native import lstm_refusal
    from caffe_lstm.passes.expose_state import needs_state_io

    graph = net_with_weights(tmp_path, DEEP_CONT_NET)
    lstm = next(node for node in graph.nodes if node.op == "LSTM")
    reading = read_cont(lstm)
    assert reading.index == 1 and reading.value.name == "cont" and not reading.is_input
    np.testing.assert_array_equal(reading.constant, [[0, 0], [1, 1], [1, 1], [1, 1]])
    # --state auto: 0 at t = 0 masks the carried state (one level of folding said "computed")
    assert needs_state_io(graph) is False
    # ONNX's operator: exact, the constant cont is 1 after t = 0
    assert lstm_refusal(lstm) is None
    # the feeds: only x is an input; the same net with cont fed gets 0-then-1 sequences
    assert set(random_feeds(graph, 0)) == {"x"}


def test_a_fed_cont_is_read_the_same_by_the_three_callers(tmp_path):
    from caffe_lstm.feeds import random_feeds
    from caffe_lstm.ops.recurrent.native import lstm_refusal
    from caffe_lstm.passes.expose_state import needs_state_io

    text = ('input: "x" input_shape { dim: 4 dim: 2 dim: 3 }\n'
            'input: "c0" input_shape { dim: 4 dim: 2 }\n'
            'layer { name: "lstm" type: "LSTM" bottom: "x" bottom: "c0" top: "h" '
            'recurrent_param { num_output: 3 } }\n')
    graph = net_with_weights(tmp_path, text)
    lstm = next(node for node in graph.nodes if node.op == "LSTM")
    feeds = random_feeds(graph, 0)
    np.testing.assert_array_equal(feeds["c0"], [[0, 0], [1, 1], [1, 1], [1, 1]])
    assert needs_state_io(graph) is True
    assert "a net input" in lstm_refusal(lstm)


def test_the_cont_question_has_one_answer():
    """feeds.py, passes/expose_state.py and ops/recurrent/native.py ask ``read_cont``; none
    of them reads ``cont_bottom`` or folds a constant itself."""
    import ast
    from pathlib import Path

    import caffe_lstm

    root = Path(caffe_lstm.__file__).parent
    for module in ("feeds.py", "passes/expose_state.py", "ops/recurrent/native.py"):
        tree = ast.parse((root / module).read_text())
        called = {node.func.id for node in ast.walk(tree)
                  if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
        attributes = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
        assert "read_cont" in called, module
        assert not {"cont_bottom", "numpy"} & attributes, module
