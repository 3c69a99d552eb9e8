"""Bidirectional LSTMs as caffe_ocr and CTPN write them: Reverse(axis 0) → Lstm →
Reverse(axis 0), concatenated (axis 2) after the forward Lstm.

Through the CLI ``run`` (the rewritten graph and the direct equations) the net equals torch's
bidirectional LSTM; the TensorRT network emitted from the rewritten graph equals numpy.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from caffe_lstm.frontend.caffe_writer import write_caffemodel
from caffe_lstm.frontend.loader import load_net
from tests.helpers import BLSTM_NET, BLSTM_SIZES, assert_network_matches_numpy

T, N, I, H = BLSTM_SIZES

# Caffe's gate blocks are (i, f, o, g); torch's are (i, f, g, o).
CAFFE_TO_TORCH_BLOCKS = (0, 1, 3, 2)


def to_torch_gates(array: np.ndarray) -> torch.Tensor:
    blocks = [array[k * H:(k + 1) * H] for k in CAFFE_TO_TORCH_BLOCKS]
    return torch.from_numpy(np.concatenate(blocks, axis=0))


def fork_lstm_blobs(rng) -> list[np.ndarray]:
    """The fork Lstm's blobs in its order: W_x (4H, I), W_h (4H, H), b (4H)."""
    return [rng.uniform(-0.6, 0.6, shape).astype(np.float32)
            for shape in ((4 * H, I), (4 * H, H), (4 * H,))]


@pytest.fixture
def blstm(tmp_path):
    rng = np.random.default_rng(17)
    forward, backward = fork_lstm_blobs(rng), fork_lstm_blobs(rng)
    net, weights = tmp_path / "blstm.prototxt", tmp_path / "blstm.caffemodel"
    net.write_text(BLSTM_NET)
    write_caffemodel(weights, [("lstm", "Lstm", forward), ("rlstm", "Lstm", backward)])
    data = rng.uniform(-1, 1, (T, N, I)).astype(np.float32)
    return net, weights, forward, backward, data


def torch_bidirectional(forward, backward, data) -> np.ndarray:
    """torch.nn.LSTM(bidirectional=True): (T, N, 2H), forward half first; one bias, zero
    initial state (the fork Lstm without a clip bottom)."""
    lstm = torch.nn.LSTM(I, H, bidirectional=True)
    with torch.no_grad():
        for suffix, (w_x, w_h, b) in (("", forward), ("_reverse", backward)):
            getattr(lstm, f"weight_ih_l0{suffix}").copy_(to_torch_gates(w_x))
            getattr(lstm, f"weight_hh_l0{suffix}").copy_(to_torch_gates(w_h))
            getattr(lstm, f"bias_ih_l0{suffix}").copy_(to_torch_gates(b))
            getattr(lstm, f"bias_hh_l0{suffix}").zero_()
        out, _ = lstm(torch.from_numpy(data))
    return out.numpy()


@pytest.mark.parametrize("flags", [(), ("--original",)], ids=["rewritten", "original"])
def test_blstm_run_equals_torch_bidirectional_lstm(invoke, tmp_path, blstm, flags):
    net, weights, forward, backward, data = blstm
    inputs, out = tmp_path / "in.npz", tmp_path / "out.npz"
    np.savez(inputs, data=data)
    result = invoke("run", net, "-w", weights, "--inputs", inputs, "-o", out, *flags)
    assert result.exit_code == 0, result.stderr
    with np.load(out) as outputs:
        merged = outputs["merge"]
    expected = torch_bidirectional(forward, backward, data)
    assert merged.shape == (T, N, 2 * H)
    np.testing.assert_allclose(merged, expected, rtol=1e-5, atol=1e-5)
    # the backward half really runs backwards: its last step saw only x_T
    assert not np.allclose(merged[:, :, H:], torch_bidirectional(forward, forward, data)[:, :, H:])


def test_blstm_tensorrt_network_equals_numpy(blstm):
    pytest.importorskip("tensorrt_rtx_bindings")
    from caffe_lstm.backends.tensorrt.build import BuildOptions
    from caffe_lstm.backends.tensorrt.runtime import load_runtime
    from caffe_lstm.passes import run_passes

    net, weights, _, _, data = blstm
    graph = run_passes(load_net(net, weights).graph)
    runtime = load_runtime("tensorrt-rtx")
    assert_network_matches_numpy(runtime, graph, BuildOptions(), {"data": data})
    # a dynamic T: the Reverse layers read the length at run time
    shapes = {"data": ((1, N, I), (T, N, I), (12, N, I))}
    longer = np.random.default_rng(3).uniform(-1, 1, (10, N, I)).astype(np.float32)
    assert_network_matches_numpy(runtime, graph, BuildOptions(shapes=shapes), {"data": longer})
