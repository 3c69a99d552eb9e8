"""`caffe-lstm run` on LSTM/RNN nets, end to end through the CLI, against torch and hand values."""

from __future__ import annotations

import numpy as np
import pytest

from caffe_lstm.frontend.caffe_writer import write_caffemodel
from tests.helpers import lstm_prototxt, run_rewritten_and_original

torch = pytest.importorskip("torch")

# Caffe's gate blocks are (i, f, o, g); torch's are (i, f, g, o).
CAFFE_TO_TORCH_BLOCKS = (0, 1, 3, 2)


def reorder(array: np.ndarray, hidden: int) -> np.ndarray:
    blocks = [array[k * hidden:(k + 1) * hidden] for k in CAFFE_TO_TORCH_BLOCKS]
    return np.concatenate(blocks, axis=0)


def write_net(tmp_path, text, blobs, layer="lstm1", layer_type="LSTM"):
    net, weights = tmp_path / "net.prototxt", tmp_path / "net.caffemodel"
    net.write_text(text)
    write_caffemodel(weights, [(layer, layer_type, blobs)])
    return net, weights


def torch_lstm(x, w_xc, b_c, w_hc, h0=None, c0=None):
    """torch.nn.LSTM in float64 with Caffe's blobs mapped; x is (T, N, I)."""
    hidden = w_hc.shape[1]
    lstm = torch.nn.LSTM(x.shape[2], hidden, dtype=torch.float64)
    with torch.no_grad():
        lstm.weight_ih_l0.copy_(torch.from_numpy(reorder(w_xc, hidden).astype(np.float64)))
        lstm.weight_hh_l0.copy_(torch.from_numpy(reorder(w_hc, hidden).astype(np.float64)))
        lstm.bias_ih_l0.copy_(torch.from_numpy(reorder(b_c, hidden).astype(np.float64)))
        lstm.bias_hh_l0.zero_()
        state = None
        if h0 is not None:
            state = (torch.from_numpy(h0.astype(np.float64)),
                     torch.from_numpy(c0.astype(np.float64)))
        y, (h_n, c_n) = lstm(torch.from_numpy(x.astype(np.float64)), state)
    return y.numpy(), h_n.numpy(), c_n.numpy()


def torch_per_step(x, cont, w_xc, b_c, w_hc, h0, c0):
    """peers.md §5.4: one torch call per step from (cont_t·h, cont_t·c); exact for any cont."""
    h, c, ys = h0, c0, []
    for t in range(x.shape[0]):
        scale = cont[t][None, :, None]
        y, h, c = torch_lstm(x[t:t + 1], w_xc, b_c, w_hc, scale * h, scale * c)
        ys.append(y)
    return np.concatenate(ys), h, c


def random_lstm(rng, I, H, S=None):
    blobs = [rng.normal(0, 0.5, (4 * H, I)), rng.normal(0, 0.5, (4 * H,))]
    if S is not None:
        blobs.append(rng.normal(0, 0.5, (4 * H, S)))
    blobs.append(rng.normal(0, 0.5, (4 * H, H)))
    return [b.astype(np.float32) for b in blobs]


@pytest.mark.parametrize("T,N,in_dims,H", [
    (1, 1, (3,), 2), (2, 3, (4,), 1), (17, 3, (5,), 7), (6, 2, (3, 2), 4), (5, 1, (6,), 2),
    (2, 1, (1,), 7), (17, 1, (2, 2), 1), (1, 3, (3,), 7),
])
def test_run_matches_torch_lstm(invoke, tmp_path, T, N, in_dims, H):
    rng = np.random.default_rng(T * 100 + H)
    I = int(np.prod(in_dims))
    w_xc, b_c, w_hc = random_lstm(rng, I, H)
    net, weights = write_net(tmp_path, lstm_prototxt(T, N, in_dims, H), [w_xc, b_c, w_hc])
    x = rng.normal(size=(T, N) + in_dims).astype(np.float32)
    cont = np.ones((T, N), np.float32)
    cont[0] = 0
    got = run_rewritten_and_original(invoke, tmp_path, net, weights, {"x": x, "cont": cont})["h"]
    expected, _, _ = torch_lstm(x.reshape(T, N, I), w_xc, b_c, w_hc)
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("cont_case", ["reset_one_stream", "non_binary"])
def test_run_cont_matches_per_step_emulation(invoke, tmp_path, cont_case):
    T, N, I, H = 7, 3, 4, 5
    rng = np.random.default_rng(7)
    w_xc, b_c, w_hc = random_lstm(rng, I, H)
    net, weights = write_net(tmp_path, lstm_prototxt(T, N, (I,), H), [w_xc, b_c, w_hc])
    x = rng.normal(size=(T, N, I)).astype(np.float32)
    cont = np.ones((T, N), np.float32)
    cont[0] = 0
    if cont_case == "reset_one_stream":
        cont[4, 1] = 0  # stream 1 starts a new sequence at t = 4; streams 0 and 2 go on
    else:
        cont[3, 2] = 0.5  # acts linearly on the carried h and c
    got = run_rewritten_and_original(invoke, tmp_path, net, weights, {"x": x, "cont": cont})["h"]
    zeros = np.zeros((1, N, H))
    expected, _, _ = torch_per_step(x, cont, w_xc, b_c, w_hc, zeros, zeros)
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)


def test_run_x_static_matches_torch(invoke, tmp_path):
    T, N, I, S, H = 5, 2, 3, 4, 6
    rng = np.random.default_rng(11)
    w_xc, b_c, w_static, w_hc = random_lstm(rng, I, H, S)
    net, weights = write_net(tmp_path, lstm_prototxt(T, N, (I,), H, static=S),
                             [w_xc, b_c, w_static, w_hc])
    x = rng.normal(size=(T, N, I)).astype(np.float32)
    x_static = rng.normal(size=(N, S)).astype(np.float32)
    cont = np.ones((T, N), np.float32)
    cont[0] = 0
    got = run_rewritten_and_original(invoke, tmp_path, net, weights,
                  {"x": x, "cont": cont, "x_static": x_static})["h"]
    # x_static joins every step's input; its weight columns join W_xc's (peers.md §5.2).
    x_joined = np.concatenate([x, np.broadcast_to(x_static, (T, N, S))], axis=2)
    expected, _, _ = torch_lstm(x_joined, np.concatenate([w_xc, w_static], axis=1), b_c, w_hc)
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)


def test_run_expose_hidden_matches_torch(invoke, tmp_path):
    T, N, I, H = 4, 2, 3, 5
    rng = np.random.default_rng(5)
    w_xc, b_c, w_hc = random_lstm(rng, I, H)
    net, weights = write_net(tmp_path, lstm_prototxt(T, N, (I,), H, expose=True),
                             [w_xc, b_c, w_hc])
    x = rng.normal(size=(T, N, I)).astype(np.float32)
    h0 = rng.normal(size=(1, N, H)).astype(np.float32)
    c0 = rng.normal(size=(1, N, H)).astype(np.float32)
    cont = np.ones((T, N), np.float32)  # cont_1 = 1: the given state carries into step 1
    out = run_rewritten_and_original(invoke, tmp_path, net, weights,
                                     {"x": x, "cont": cont, "h_0": h0, "c_0": c0})
    expected, h_n, c_n = torch_lstm(x, w_xc, b_c, w_hc, h0, c0)
    np.testing.assert_allclose(out["h"], expected, atol=1e-5, rtol=0)
    np.testing.assert_allclose(out["h_T"], h_n, atol=1e-5, rtol=0)
    np.testing.assert_allclose(out["c_T"], c_n, atol=1e-5, rtol=0)


def test_run_lstm_hand_worked(invoke, tmp_path):
    """I = H = N = 1, T = 2, cont = [0, 1]. Weights: W_xc = [0.5, -1, 1, 0.5] (i, f, o, g),
    b_c = 0, W_hc = [1, 1, 1, 1]; x = [1, 2].

    t=1: a = 0.5·1, -1·1, 1·1, 0.5·1 = (0.5, -1, 1, 0.5) (h_0 masked by cont = 0)
         i = σ(0.5) = 0.6224593, o = σ(1) = 0.7310586, g = tanh(0.5) = 0.4621172
         c_1 = i·g = 0.2876491;  h_1 = o·tanh(c_1) = 0.7310586·0.2799693 = 0.2046742
    t=2: a = x·W + h_1 = (1 + 0.2046742, -2 + 0.2046742, 2 + 0.2046742, 1 + 0.2046742)
         i = σ(1.2046742) = 0.7693553, f = σ(-1.7953258) = 0.1424210,
         o = σ(2.2046742) = 0.9006685, g = tanh(1.2046742) = 0.8350748
         c_2 = f·c_1 + i·g = 0.0409673 + 0.6424692 = 0.6834365
         h_2 = o·tanh(c_2) = 0.9006685·0.5937489 = 0.5347709
    """
    net, weights = write_net(tmp_path, lstm_prototxt(2, 1, (1,), 1), [
        np.array([[0.5], [-1.0], [1.0], [0.5]], np.float32), np.zeros(4, np.float32),
        np.ones((4, 1), np.float32)])
    x = np.array([[[1.0]], [[2.0]]], np.float32)
    cont = np.array([[0.0], [1.0]], np.float32)
    got = run_rewritten_and_original(invoke, tmp_path, net, weights, {"x": x, "cont": cont})["h"]
    np.testing.assert_allclose(got.ravel(), [0.2046742, 0.5347709], atol=2e-7)


def test_run_rnn_hand_worked(invoke, tmp_path):
    """RNN, I = H = N = 1, T = 2, cont = [0, 1]; W_xh = 1, b_h = 0, W_hh = 2, W_ho = 1, b_o = 0.5;
    x = [0.5, -0.25].

    t=1: h_1 = tanh(0.5) = 0.4621172;            o_1 = tanh(0.4621172 + 0.5) = 0.7452197
    t=2: h_2 = tanh(-0.25 + 2·0.4621172) = tanh(0.6742343) = 0.5877583
                                                  o_2 = tanh(1.0877583) = 0.7960585
    """
    text = ('layer { name: "input" type: "Input" top: "x" top: "cont" '
            'input_param { shape { dim: 2 dim: 1 dim: 1 } shape { dim: 2 dim: 1 } } }\n'
            'layer { name: "rnn1" type: "RNN" bottom: "x" bottom: "cont" top: "o" '
            'recurrent_param { num_output: 1 } }\n')
    blobs = [np.array(v, np.float32) for v in ([[1.0]], [0.0], [[2.0]], [[1.0]], [0.5])]
    net, weights = write_net(tmp_path, text, blobs, layer="rnn1", layer_type="RNN")
    x = np.array([[[0.5]], [[-0.25]]], np.float32)
    cont = np.array([[0.0], [1.0]], np.float32)
    got = run_rewritten_and_original(invoke, tmp_path, net, weights, {"x": x, "cont": cont})["o"]
    np.testing.assert_allclose(got.ravel(), [0.7452197, 0.7960585], atol=2e-7)


def test_run_stacked_lstms_match_torch_two_layers(invoke, tmp_path):
    """Two stacked LSTM layers equal torch.nn.LSTM(num_layers=2) with cont = [0, 1, ...]."""
    T, N, I, H = 6, 3, 4, 5
    rng = np.random.default_rng(21)
    first, second = random_lstm(rng, I, H), random_lstm(rng, H, H)
    text = lstm_prototxt(T, N, (I,), H) + (
        'layer { name: "lstm2" type: "LSTM" bottom: "h" bottom: "cont" top: "h2" '
        f'recurrent_param {{ num_output: {H} }} }}\n')
    net, weights = tmp_path / "net.prototxt", tmp_path / "net.caffemodel"
    net.write_text(text)
    write_caffemodel(weights, [("lstm1", "LSTM", first), ("lstm2", "LSTM", second)])
    x = rng.normal(size=(T, N, I)).astype(np.float32)
    cont = np.ones((T, N), np.float32)
    cont[0] = 0
    got = run_rewritten_and_original(invoke, tmp_path, net, weights, {"x": x, "cont": cont})["h2"]
    lower, _, _ = torch_lstm(x, *first)
    expected, _, _ = torch_lstm(lower.astype(np.float32), *second)
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("T,N,I,H", [(5, 3, 4, 2), (1, 1, 3, 7), (17, 2, 2, 1)])
def test_run_rnn_matches_torch(invoke, tmp_path, T, N, I, H):
    """RNN: h_t from torch.nn.RNN (tanh) with bias_hh = 0, then o_t = tanh(W_ho·h_t + b_o)."""
    rng = np.random.default_rng(T + 10 * H)
    w_xh, b_h, w_hh, w_ho, b_o = [rng.normal(0, 0.5, s).astype(np.float32) for s in
                                  ((H, I), (H,), (H, H), (H, H), (H,))]
    text = (f'layer {{ name: "input" type: "Input" top: "x" top: "cont" input_param {{ '
            f'shape {{ dim: {T} dim: {N} dim: {I} }} shape {{ dim: {T} dim: {N} }} }} }}\n'
            f'layer {{ name: "rnn1" type: "RNN" bottom: "x" bottom: "cont" top: "o" '
            f'recurrent_param {{ num_output: {H} }} }}\n')
    net, weights = write_net(tmp_path, text, [w_xh, b_h, w_hh, w_ho, b_o], "rnn1", "RNN")
    x = rng.normal(size=(T, N, I)).astype(np.float32)
    cont = np.ones((T, N), np.float32)
    cont[0] = 0
    got = run_rewritten_and_original(invoke, tmp_path, net, weights, {"x": x, "cont": cont})["o"]
    rnn = torch.nn.RNN(I, H, nonlinearity="tanh", dtype=torch.float64)
    with torch.no_grad():
        for param, value in ((rnn.weight_ih_l0, w_xh), (rnn.weight_hh_l0, w_hh),
                             (rnn.bias_ih_l0, b_h)):
            param.copy_(torch.from_numpy(value.astype(np.float64)))
        rnn.bias_hh_l0.zero_()
        h, _ = rnn(torch.from_numpy(x.astype(np.float64)))
        expected = torch.tanh(h @ torch.from_numpy(w_ho.T.astype(np.float64))
                              + torch.from_numpy(b_o.astype(np.float64))).numpy()
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("layout", ["flat_batch2_clip", "sequence_clip", "sequence_no_clip"])
def test_run_fork_lstm_matches_torch(invoke, tmp_path, layout):
    """The fork's Lstm (W_x, W_h, b = Caffe's W_xc, W_hc, b_c) in its layouts."""
    T, N, I, H = 5, 2, 3, 4
    rng = np.random.default_rng(3)
    w_xc, b_c, w_hc = random_lstm(rng, I, H)
    x = rng.normal(size=(T, N, I)).astype(np.float32)
    clip = np.ones((T, N), np.float32)
    clip[0] = 0
    if layout == "flat_batch2_clip":
        x_shape, clip_shape, feeds = (T * N, I), (T * N, 1), {
            "x": x.reshape(T * N, I), "clip": clip.reshape(T * N, 1)}
    else:
        x_shape, clip_shape, feeds = (T, N, I), (T, N), {"x": x, "clip": clip}
    with_clip = layout != "sequence_no_clip"
    if not with_clip:
        feeds.pop("clip")
    def dims(shape):
        return " ".join(f"dim: {d}" for d in shape)

    tops = 'top: "x" top: "clip"' if with_clip else 'top: "x"'
    shapes = f"shape {{ {dims(x_shape)} }}" + (f" shape {{ {dims(clip_shape)} }}" if with_clip
                                                else "")
    text = (f'layer {{ name: "input" type: "Input" {tops} input_param {{ {shapes} }} }}\n'
            f'layer {{ name: "lstm1" type: "Lstm" bottom: "x" '
            + ('bottom: "clip" ' if with_clip else "")
            + f'top: "h" lstm_param {{ num_output: {H} batch_size: {N} }} }}\n')
    net, weights = write_net(tmp_path, text, [w_xc, w_hc, b_c], "lstm1", "Lstm")
    got = run_rewritten_and_original(invoke, tmp_path, net, weights, feeds)["h"]
    expected, _, _ = torch_lstm(x, w_xc, b_c, w_hc)
    np.testing.assert_allclose(got.reshape(T, N, H), expected, atol=1e-5, rtol=0)
