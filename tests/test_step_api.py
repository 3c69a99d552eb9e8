"""States of any shape on the public step API: a convolutional LSTM plugin written as one step
(``lstm_step`` with ``ConvolutionGates`` on the channel axis 2 of (T, N, C, H, W)), whose states
h and c are (1, N, D, H, W). Checked against torch (conv2d per step, Caffe's cell, cont
restarting a stream midway) through numpy, the rewrite, verify's TensorRT walk and
onnxruntime, ``--unroll``, ``--state io`` (``<layer>/h_0`` of shape (1, N, D, H, W)), a
dynamic profile over N and Triton's sequence state with batching."""

from __future__ import annotations

import numpy as np
import pytest

import caffe_lstm
from tests.helpers import isolated_plugin_modules, run_cli

T, N, C, H, W, D = 5, 2, 2, 4, 5, 3

PLUGIN = '''
import numpy as np

from caffe_lstm.errors import ShapeError
from caffe_lstm.ops import ConvolutionGates, Op, RecurrentSpec, lstm_step, register_op


def _states(node):
    """h_0 and c_0: (1, N, D, H, W)."""
    _, n, _, h, w = node.inputs[0].shape
    return ((1, n, node.attrs["num_output"], h, w),) * 2


@register_op
class ConvLSTM(Op):
    """Caffe's LSTM cell with 3x3 "same" convolutions: x (T, N, C, H, W), cont (T, N),
    [h_0, c_0 (1, N, D, H, W)]; tops h (T, N, D, H, W) [, h_T, c_T]; blobs W_x (4D, C, 3, 3),
    b (4D), W_h (4D, D, 3, 3), gates i, f, o, g."""

    type = "ConvLSTM"
    param = "recurrent_param"
    n_bottoms, n_tops = (2, 4), (1, 3)
    recurrent = RecurrentSpec(states=("h", "c"), static_bottom=None, shapes=_states)
    tensorrt_missing_reason = onnx_missing_reason = "expanded into one loop step"

    @staticmethod
    def parse(ctx, p):
        return {"num_output": p.num_output, "expose_hidden": p.expose_hidden}

    @staticmethod
    def infer(ctx, node, x, cont, *states):
        if len(x) != 5 or tuple(cont) != tuple(x[:2]):
            raise ShapeError(f"x must be (T, N, C, H, W) and cont (T, N), found {x}, {cont}",
                             node.label, "")
        top = x[:2] + (node.attrs["num_output"],) + x[3:]
        return (top, *_states(node)) if node.attrs["expose_hidden"] else (top,)

    @staticmethod
    def blobs(ctx, node, x, cont, *states):
        d = node.attrs["num_output"]
        return ("W_x", (4 * d, x[2], 3, 3)), ("b", (4 * d,)), ("W_h", (4 * d, d, 3, 3))

    @staticmethod
    def numpy(ctx, node, x, cont, *rest):
        *states, w_x, b, w_h = rest
        n, d = x.shape[1], node.attrs["num_output"]
        h, c = ([s[0] for s in states] if states else
                [np.zeros((n, d) + x.shape[3:])] * 2)
        sigmoid = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
        tops = []
        for x_t, cont_t in zip(x, cont):
            h, c = h * cont_t[:, None, None, None], c * cont_t[:, None, None, None]
            a = _conv(x_t, w_x) + b[None, :, None, None] + _conv(h, w_h)
            i, f, o, g = np.split(a, 4, axis=1)
            c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
            h = sigmoid(o) * np.tanh(c)
            tops.append(h)
        out = (np.stack(tops),) + ((h[None], c[None]) if node.attrs["expose_hidden"] else ())
        return tuple(a.astype(np.float32) for a in out)

    @staticmethod
    def expand(b, node):
        x, cont, *initial = node.inputs
        w_x, bias, w_h = node.weights
        d = node.attrs["num_output"]
        x_gates = b.convolution("x_conv", x, w_x, bias, pad=1, axis=2, top="W_xc_x")
        s = b.step()
        x_t, cont_t = s.sequence(x_gates, "W_xc_x_t"), s.sequence(cont, "cont_t")
        h = s.state("h", (0, d, 0, 0), initial[0] if initial else None, cont_t)
        c = s.state("c", (0, d, 0, 0), initial[1] if initial else None, cont_t)
        h_t, c_t = lstm_step(s, x_t, h, c, ConvolutionGates(w_h, pad=1, axis=2))
        s.update("h", h_t)
        s.update("c", c_t)
        s.output(h_t)
        b.loop(s, [node.outputs[0]], node.outputs[1:] or None)


def _conv(x, w):
    """3x3 "same" convolution of (N, C, H, W) by (M, C, 3, 3)."""
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    height, width = x.shape[2:]
    return sum(np.einsum("nchw,mc->nmhw", padded[:, :, i:i + height, j:j + width], w[:, :, i, j])
               for i in range(3) for j in range(3))
'''

NET = """
layer { name: "in" type: "Input" top: "x" top: "cont"
        input_param { shape { dim: 5 dim: 2 dim: 2 dim: 4 dim: 5 } shape { dim: 5 dim: 2 } } }
layer { name: "clstm" type: "ConvLSTM" bottom: "x" bottom: "cont" top: "h"
        recurrent_param { num_output: 3 } }
"""


@pytest.fixture
def files(tmp_path):
    plugin, net, weights = (tmp_path / "conv_lstm.py", tmp_path / "net.prototxt",
                            tmp_path / "net.caffemodel")
    plugin.write_text(PLUGIN)
    net.write_text(NET)
    with isolated_plugin_modules():
        caffe_lstm.load(net, plugins=[plugin]).write_synthetic_weights(weights, seed=3)
    return plugin, net, weights


def inputs(path=None, batch=N):
    rng = np.random.default_rng(5)
    cont = np.ones((T, batch), np.float32)
    cont[0] = 0
    cont[3, 0] = 0  # stream 0 restarts at t = 3
    arrays = {"x": rng.standard_normal((T, batch, C, H, W)).astype(np.float32), "cont": cont}
    if path is not None:
        np.savez(path, **arrays)
    return arrays


def torch_reference(arrays, w_x, b, w_h):
    """Caffe's LSTM cell with torch's conv2d for both convolutions, float64."""
    torch = pytest.importorskip("torch")
    f = torch.nn.functional
    x, cont, w_x, b, w_h = (torch.from_numpy(np.asarray(a, np.float64))
                            for a in (arrays["x"], arrays["cont"], w_x, b, w_h))
    h = c = torch.zeros((x.shape[1], D, H, W), dtype=torch.float64)
    tops = []
    for t in range(x.shape[0]):
        keep = cont[t][:, None, None, None]
        h, c = h * keep, c * keep
        i, f_, o, g = (f.conv2d(x[t], w_x, b, padding=1) + f.conv2d(h, w_h, padding=1)).chunk(4, 1)
        c = torch.sigmoid(f_) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        tops.append(h)
    return torch.stack(tops).numpy(), h.numpy(), c.numpy()


def test_a_conv_lstm_step_equals_torch_with_n_c_h_w_states(files):
    plugin, net_path, weights = files
    with isolated_plugin_modules():
        net = caffe_lstm.load(net_path, weights, plugins=[plugin])
        arrays = inputs()
        want, h_t, c_t = torch_reference(arrays, *(v.data for v in net.graph.node("clstm").weights))
        for original in (True, False):
            got = net.run(arrays, original=original, state="io")
            np.testing.assert_allclose(got["h"], want, rtol=1e-5, atol=1e-6)
            assert got["clstm/h_T"].shape == (1, N, D, H, W)
            np.testing.assert_allclose(got["clstm/h_T"][0], h_t, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(got["clstm/c_T"][0], c_t, rtol=1e-5, atol=1e-6)
        loop, = [n for n in net.rewritten().graph.nodes if n.op == "Loop"]
        assert [s.dims for s in loop.attrs["states"]] == [(0, D, 0, 0)] * 2


def test_verify_unroll_and_a_dynamic_batch_profile(files, tmp_path):
    pytest.importorskip("tensorrt_rtx_bindings")
    pytest.importorskip("onnxruntime")
    plugin, net, weights = files
    inputs(tmp_path / "in.npz")
    done = run_cli("verify", net, "-w", weights, "--plugin", plugin, "--inputs",
                   tmp_path / "in.npz", "--runtime", "tensorrt-rtx", "--onnxruntime")
    assert done.returncode == 0 and done.stdout.count(" ok") == 3, done.stdout + done.stderr
    unrolled = tmp_path / "unrolled"
    done = run_cli("rewrite", net, "-w", weights, "--plugin", plugin, "--unroll", "-o", unrolled)
    assert done.returncode == 0, done.stderr
    outs = []
    for args in ((unrolled / "net.prototxt", "-w", unrolled / "net.caffemodel"),
                 (net, "-w", weights, "--plugin", plugin)):
        out = tmp_path / f"out{len(outs)}.npz"
        done = run_cli("run", *args, "--inputs", tmp_path / "in.npz", "-o", out)
        assert done.returncode == 0, done.stderr
        outs.append(np.load(out)["h"])
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-5, atol=1e-6)
    # N from 1 to 4 in one engine: the (1, N, D, H, W) states follow the batch
    done = run_cli("convert", net, "-w", weights, "--plugin", plugin, "--runtime",
                   "tensorrt-rtx", "--state", "io", "-o", tmp_path / "net.engine",
                   "--shape", f"x:{T}x1x{C}x{H}x{W}:{T}x2x{C}x{H}x{W}:{T}x4x{C}x{H}x{W}",
                   "--shape", f"cont:{T}x1:{T}x2:{T}x4")
    assert done.returncode == 0, done.stderr
    assert "inputs: x, cont, clstm/h_0, clstm/c_0" in done.stdout


def test_triton_carries_the_n_c_h_w_states_of_interleaved_sequences(files, tmp_path):
    """Triton's Python backend with batching: each request one step of one sequence (batch-major
    x (1, 1, C, H, W), cont (1, 1)), the (1, D, H, W) states kept per sequence id; the steps
    equal ``run --state io`` of both sequences side by side."""
    from caffe_lstm.serving.server import ServingError, TritonServer, find_triton

    grpcclient = pytest.importorskip("tritonclient.grpc")
    try:
        find_triton()
    except ServingError as exc:
        pytest.skip(f"the bundled Triton server cannot start here: {exc.line()}")
    plugin, net, weights = files
    repository = tmp_path / "repo"
    done = run_cli("triton", net, "-w", weights, "--plugin", plugin, "-o", repository,
                   "--shape", f"x:1x1x{C}x{H}x{W}", "--shape", "cont:1x1")
    assert done.returncode == 0, done.stderr
    assert "states: clstm/h_0 <- clstm/h_T, clstm/c_0 <- clstm/c_T" in done.stdout
    arrays = inputs()
    with isolated_plugin_modules():
        want = caffe_lstm.load(net, weights, plugins=[plugin]).run(arrays, state="io")["h"]
    with TritonServer(repository) as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        for t in range(T):
            for s in range(N):  # the two sequences' steps interleaved
                feeds = {"x": arrays["x"][t:t + 1, s:s + 1].swapaxes(0, 1),
                         "cont": arrays["cont"][t:t + 1, s:s + 1].T}
                tensors = []
                for name, array in feeds.items():
                    tensors.append(grpcclient.InferInput(name, list(array.shape), "FP32"))
                    tensors[-1].set_data_from_numpy(np.ascontiguousarray(array))
                result = client.infer("net", tensors, sequence_id=20 + s,
                                      sequence_start=t == 0, sequence_end=t == T - 1)
                np.testing.assert_allclose(result.as_numpy("h")[0, 0], want[t, s], rtol=1e-5,
                                           atol=1e-5)
