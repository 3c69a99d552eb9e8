"""type "GRU" as foss-for-synopsys-dwc-arc-processors/synopsys-caffe@1f0101e writes it, in both
forms (recurrent_param.linear_before_reset 0 and 1), on sequences whose cont restarts one
stream midway. References that are not caffe-lstm's: a port of the fork's FillUnrolledNet
written here from gru_layer.cpp, onnxruntime's own ONNX GRU operator (weights through
``weights export --layout onnx``) and torch.nn.GRU for linear_before_reset 1 (through
``--layout pytorch``). Then one ILoop, one Scan, and ``weights export|import`` round trips."""

from __future__ import annotations

import numpy as np
import pytest

import caffe_lstm
from tests.helpers import assert_one_error_line, run_cli

T, N, I, H, S = 7, 2, 3, 4, 5

NET = """
name: "gru_net"
layer {{ name: "in" type: "Input" top: "x" top: "cont"{static_top} input_param {{
        shape {{ dim: 7 dim: 2 dim: 3 }} shape {{ dim: 7 dim: 2 }}{static_shape} }} }}
layer {{ name: "gru1" type: "GRU" bottom: "x" bottom: "cont"{static_bottom} top: "h"
        recurrent_param {{ num_output: 4 linear_before_reset: {form} }} }}
"""


def write_net(tmp_path, form: int, static: bool = False):
    net, weights = tmp_path / f"gru{form}{static:d}.prototxt", tmp_path / f"gru{form}.caffemodel"
    net.write_text(NET.format(
        form=form, static_top=' top: "x_static"' if static else "",
        static_shape=" shape { dim: 2 dim: 5 }" if static else "",
        static_bottom=' bottom: "x_static"' if static else ""))
    weights = tmp_path / f"gru{form}{static:d}.caffemodel"
    caffe_lstm.load(net).write_synthetic_weights(weights, seed=4 + form)
    return net, weights


def feeds(static: bool = False):
    rng = np.random.default_rng(7)
    cont = np.ones((T, N), np.float32)
    cont[0] = 0
    cont[4, 1] = 0  # stream 1 starts a new sequence at t = 4
    arrays = {"x": rng.standard_normal((T, N, I)).astype(np.float32), "cont": cont}
    if static:
        arrays["x_static"] = rng.standard_normal((N, S)).astype(np.float32)
    return arrays


def fill_unrolled_net(arrays, blobs, form: int):
    """gru_layer.cpp's FillUnrolledNet, layer by layer, float64: x_transform (W_xc, b_c),
    W_xc_x_static, the per-step slices W_xc_x_z/r/h, h_conted_{t−1} = cont_t · h_{t−1}, R_z_h,
    inner_z, z (Sigmoid), R_r_h, inner_r, r, then r_ts_h_tm1s and R_rt_h_tm1s (R_h) for 0, or
    Rh_h_tm1s (R_h, Rb_h) and R_rt_h_tm1s = r · Rh_h for 1; inner_h, ht (TanH), H_h_sub =
    h_conted − ht, z_h_prod = z · H_h_sub, h_t = ht + z_h_prod; h_concat."""
    it = iter(np.asarray(b, np.float64) for b in blobs)
    w_xc, b_c = next(it), next(it)
    w_static = next(it) if "x_static" in arrays else None
    r_z, r_r, r_h = next(it), next(it), next(it)
    rb_h = next(it) if form else None
    x, cont = (np.asarray(arrays[k], np.float64) for k in ("x", "cont"))
    w_xc_x = x @ w_xc.T + b_c
    if w_static is not None:
        w_xc_x = w_xc_x + (np.asarray(arrays["x_static"], np.float64) @ w_static.T)[None]
    sigmoid = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    h, tops = np.zeros((N, H)), []
    for t in range(T):
        w_xc_x_z, w_xc_x_r, w_xc_x_h = np.split(w_xc_x[t], 3, axis=1)
        h_conted = h * cont[t][:, None]
        z = sigmoid(h_conted @ r_z.T + w_xc_x_z)
        r = sigmoid(h_conted @ r_r.T + w_xc_x_r)
        if form == 0:
            r_rt_h = (r * h_conted) @ r_h.T
        else:
            r_rt_h = r * (h_conted @ r_h.T + rb_h)
        ht = np.tanh(r_rt_h + w_xc_x_h)
        h = ht + z * (h_conted - ht)
        tops.append(h)
    return np.stack(tops)


def segments():
    """Each stream's runs of steps between cont = 0: (stream, start, stop)."""
    cont = feeds()["cont"]
    for n in range(N):
        starts = [t for t in range(T) if cont[t, n] == 0] + [T]
        yield from ((n, a, b) for a, b in zip(starts, starts[1:]))


@pytest.mark.parametrize("form,static", [(0, False), (1, False), (0, True), (1, True)])
def test_gru_equals_the_fork_s_unrolled_net(tmp_path, form, static):
    net_path, weights = write_net(tmp_path, form, static)
    net = caffe_lstm.load(net_path, weights)
    arrays = feeds(static)
    want = fill_unrolled_net(arrays, [v.data for v in net.graph.node("gru1").weights], form)
    for original in (True, False):
        np.testing.assert_allclose(net.run(arrays, original=original)["h"], want,
                                   rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("form", [0, 1])
def test_gru_equals_onnxruntime_s_gru_operator(tmp_path, form):
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    net_path, weights = write_net(tmp_path, form)
    exported = tmp_path / "onnx.npz"
    done = run_cli("weights", "export", net_path, "-w", weights, "--layer", "gru1",
                   "--layout", "onnx", "-o", exported)
    assert done.returncode == 0, done.stderr
    arrays = dict(np.load(exported))
    helper = onnx.helper
    node = helper.make_node("GRU", ["X", "W", "R", "B"], ["Y"], hidden_size=H,
                            linear_before_reset=form)
    graph = helper.make_graph(
        [node], "gru", [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT,
                                                      [None, 1, I])],
        [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(arrays[k], k) for k in ("W", "R", "B")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    inputs = feeds()
    got = caffe_lstm.load(net_path, weights).run(inputs)["h"]
    for n, start, stop in segments():  # a cont of 0 is a fresh sequence from zeros
        (y,) = session.run(None, {"X": inputs["x"][start:stop, n:n + 1]})
        np.testing.assert_allclose(got[start:stop, n], y[:, 0, 0], rtol=1e-5, atol=1e-6)


def test_gru_with_the_reset_after_equals_torch(tmp_path):
    torch = pytest.importorskip("torch")
    net_path, weights = write_net(tmp_path, 1)
    exported = tmp_path / "torch.npz"
    done = run_cli("weights", "export", net_path, "-w", weights, "--layer", "gru1",
                   "--layout", "pytorch", "-o", exported)
    assert done.returncode == 0, done.stderr
    gru = torch.nn.GRU(I, H).double()
    gru.load_state_dict({k: torch.from_numpy(v.astype(np.float64))
                         for k, v in np.load(exported).items()})
    inputs = feeds()
    got = caffe_lstm.load(net_path, weights).run(inputs)["h"]
    with torch.no_grad():
        for n, start, stop in segments():
            y, _ = gru(torch.from_numpy(inputs["x"][start:stop, n:n + 1].astype(np.float64)))
            np.testing.assert_allclose(got[start:stop, n], y[:, 0].numpy(), rtol=1e-5,
                                       atol=1e-6)


@pytest.mark.parametrize("form", [0, 1])
def test_weights_round_trip_through_every_layout(tmp_path, form):
    net_path, weights = write_net(tmp_path, form)
    net = caffe_lstm.load(net_path, weights)
    for layout in ("caffe", "onnx", "pytorch", "keras"):
        if layout == "pytorch" and form == 0:
            continue  # refused: below
        back = tmp_path / f"{layout}.caffemodel"
        net.import_weights("gru1", layout, net.export_weights("gru1", layout), back)
        assert back.read_bytes() == weights.read_bytes(), layout
    done = run_cli("weights", "export", net_path, "-w", weights, "--layer", "gru1",
                   "--layout", "pytorch" if form == 0 else "cudnn", "-o", tmp_path / "x.npz")
    assert_one_error_line(done, "recurrent_param.linear_before_reset 0" if form == 0
                          else "unknown layout 'cudnn' for a GRU")


def test_one_iloop_and_one_scan(tmp_path):
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("tensorrt_rtx_bindings")
    from caffe_lstm.backends.tensorrt.build import BuildOptions, emit
    from caffe_lstm.backends.tensorrt.runtime import load_runtime

    net_path, weights = write_net(tmp_path, 1)
    model = tmp_path / "gru.onnx"
    done = run_cli("export", net_path, "-w", weights, "-o", model)
    assert done.returncode == 0, done.stderr
    assert [n.op_type for n in onnx.load(model).graph.node].count("Scan") == 1
    runtime = load_runtime("tensorrt-rtx")
    _, network, _ = emit(runtime, caffe_lstm.load(net_path, weights).rewritten().graph,
                         BuildOptions())
    kinds = [network.get_layer(i).type for i in range(network.num_layers)]
    assert kinds.count(runtime.trt.LayerType.TRIP_LIMIT) == 1
    done = run_cli("verify", net_path, "-w", weights, "--runtime", "tensorrt-rtx",
                   "--onnxruntime")
    assert done.returncode == 0 and done.stdout.count(" ok") == 3, done.stdout + done.stderr
