"""The worked recurrent plugin (samples/conv_gru_plugin): AzoresCabbage/caffe's ConvGRU written
as one time step on the public step API, through ``--plugin`` and through its entry point.

Its numbers are checked against a port of the fork's ``Forward_cpu`` (conv_gru_layer.cpp)
written here from the source with torch's conv2d, with and without the h_0 bottom; then every
command: inspect, run (rewritten and --original), verify's three columns, convert (one ILoop
holding one step's convolution, whatever T), export (one Scan), rewrite --unroll (plain Caffe
that loads and runs), --state io with its (1, D, H, W) state, and Triton's Python backend
served step by step, equal to ``run --state io``.
"""

from __future__ import annotations

import ast
import re

import numpy as np
import pytest

import caffe_lstm
from tests.helpers import ROOT, SAMPLES, install_example, isolated_plugin_modules, run_cli

EXAMPLE = SAMPLES / "conv_gru_plugin"
NET, WEIGHTS = EXAMPLE / "conv_gru.prototxt", EXAMPLE / "conv_gru.caffemodel"
PLUGIN = EXAMPLE / "caffe_lstm_conv_gru" / "__init__.py"
MODULE = "caffe_lstm_conv_gru"
T, C, H, W, D = 5, 3, 6, 7, 4

#: The sample's net with the fork's optional second bottom h_0 (1, D, H, W).
NET_WITH_H0 = NET.read_text().replace(
    'top: "frames"\n  input_param { shape { dim: 5 dim: 3 dim: 6 dim: 7 } }',
    'top: "frames"\n  top: "h0"\n'
    '  input_param { shape { dim: 5 dim: 3 dim: 6 dim: 7 } shape { dim: 1 dim: 4 dim: 6 dim: 7 } }'
).replace('bottom: "frames"\n  top: "gru1"', 'bottom: "frames"\n  bottom: "h0"\n  top: "gru1"')


@pytest.fixture(autouse=True)
def isolated_plugins():
    with isolated_plugin_modules(MODULE):
        yield


def fork_forward(x, w_x, b_x, w_h, h_0=None, pad=1, dilation=1):
    """ConvGRULayer::Forward_cpu (AzoresCabbage/caffe@5102dc1), in torch, float64: conv_x of
    all steps, then per step conv_h of h_{t-1}, the gates r, z, h at offsets 0, 1, 2 ·
    feature_dims, Wh = tanh(Wh_x + r · Uh_h), h_t = (1 − z) · h_{t−1} + z · Wh."""
    torch = pytest.importorskip("torch")
    f = torch.nn.functional
    t64 = [torch.from_numpy(np.asarray(a, np.float64)) for a in (x, w_x, b_x, w_h)]
    x, w_x, b_x, w_h = t64
    conv_x = f.conv2d(x, w_x, b_x, padding=pad, dilation=dilation)
    hidden = w_h.shape[0] // 3
    h = (torch.zeros((1, hidden) + tuple(x.shape[2:]), dtype=torch.float64) if h_0 is None
         else torch.from_numpy(np.asarray(h_0, np.float64)))
    top = []
    for t in range(x.shape[0]):
        wr_x, wz_x, wh_x = conv_x[t:t + 1].split(hidden, dim=1)
        ur_h, uz_h, uh_h = f.conv2d(h, w_h, None, padding=pad, dilation=dilation).split(
            hidden, dim=1)
        r, z = torch.sigmoid(wr_x + ur_h), torch.sigmoid(wz_x + uz_h)
        wh = 2 * torch.sigmoid(2 * (wh_x + r * uh_h)) - 1  # the fork's tanh
        h = (1 - z) * h + z * wh
        top.append(h)
    return torch.cat(top).numpy()


def frames(seed=0, steps=T):
    return np.random.default_rng(seed).standard_normal((steps, C, H, W)).astype(np.float32)


def gru_blobs(net):
    return [v.data for v in net.graph.node("gru1").weights]


def score(net, h):
    """The sample's 1×1 convolution of the ConvGRU's output."""
    w, b = (v.data for v in net.graph.node("score").weights)
    return np.einsum("tdyx,md->tmyx", h, w[:, :, 0, 0]) + b[None, :, None, None]


# ---- the sample reads only what docs/ops.md documents -------------------------------------------


def test_the_sample_imports_only_names_docs_ops_md_documents():
    documented = set(re.findall(r"`(caffe_lstm(?:\.\w+)+)`", (ROOT / "docs" / "ops.md")
                                .read_text()))
    imported = [f"{node.module}.{alias.name}"
                for node in ast.walk(ast.parse(PLUGIN.read_text()))
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("caffe")
                for alias in node.names]
    plain = [alias.name for node in ast.walk(ast.parse(PLUGIN.read_text()))
             if isinstance(node, ast.Import) for alias in node.names]
    assert imported and not [name for name in plain if name.startswith("caffe_lstm")]
    assert [name for name in imported if name not in documented] == []


# ---- numbers: the fork's Forward_cpu ------------------------------------------------------------


@pytest.mark.parametrize("with_h0", [False, True], ids=["zeros", "h0_bottom"])
def test_conv_gru_equals_the_fork_s_forward(tmp_path, with_h0):
    net_path = NET
    feeds = {"frames": frames(1)}
    if with_h0:
        net_path = tmp_path / "with_h0.prototxt"
        net_path.write_text(NET_WITH_H0)
        feeds["h0"] = np.random.default_rng(2).standard_normal((1, D, H, W)).astype(np.float32)
    net = caffe_lstm.load(net_path, WEIGHTS, plugins=[PLUGIN])
    want = score(net, fork_forward(feeds["frames"], *gru_blobs(net), h_0=feeds.get("h0")))
    for original in (True, False):
        got = net.run(feeds, original=original)["score"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # the rewritten graph: one Loop whose body holds the one recurrent convolution
    loop, = [n for n in net.rewritten().graph.nodes if n.op == "Loop"]
    assert [n.op for n in loop.attrs["body"].nodes].count("Convolution") == 1


# ---- every command, through the entry point and through --plugin -------------------------------


def test_through_the_entry_point_inspect_run_original_and_state_io(tmp_path):
    site = install_example(tmp_path / "site", EXAMPLE)
    done = run_cli("inspect", NET, "-w", WEIGHTS, path=(site, EXAMPLE))
    assert done.returncode == 0, done.stderr
    layer = "gru1 (ConvGRU): frames -> gru1  (5, 4, 6, 7)  blobs (12, 3, 3, 3), (12), (12, 4, 3, 3)"
    assert layer in done.stdout
    assert "plugin 'conv_gru' (entry point of caffe-lstm-conv-gru): ConvGRU" in done.stdout
    np.savez(tmp_path / "in.npz", frames=frames(3))
    net = caffe_lstm.load(NET, WEIGHTS, plugins=[PLUGIN])
    want_h = fork_forward(frames(3), *gru_blobs(net))
    for extra in ((), ("--original",)):
        out = tmp_path / "out.npz"
        done = run_cli("run", NET, "-w", WEIGHTS, "--inputs", tmp_path / "in.npz", "-o", out,
                       *extra, path=(site, EXAMPLE))
        assert done.returncode == 0, done.stderr
        with np.load(out) as got:
            np.testing.assert_allclose(got["score"], score(net, want_h), rtol=1e-5, atol=1e-5)
    # --state io: the state is (1, D, H, W), in as gru1/h_0 and out as gru1/h_T
    out = tmp_path / "io.npz"
    done = run_cli("run", NET, "-w", WEIGHTS, "--inputs", tmp_path / "in.npz", "-o", out,
                   "--state", "io", path=(site, EXAMPLE))
    assert done.returncode == 0, done.stderr
    with np.load(out) as got:
        assert got["gru1/h_T"].shape == (1, D, H, W)
        np.testing.assert_allclose(got["gru1/h_T"], want_h[-1:], rtol=1e-5, atol=1e-5)


def test_state_io_carries_the_state_step_by_step():
    net = caffe_lstm.load(NET, WEIGHTS, plugins=[PLUGIN])
    x = frames(4)
    whole = net.run({"frames": x}, state="io")
    h, steps = np.zeros((1, D, H, W), np.float32), []
    stepwise = caffe_lstm.load(NET, WEIGHTS, plugins=[PLUGIN], shapes={"frames": (1, C, H, W)})
    for t in range(T):
        got = stepwise.run({"frames": x[t:t + 1], "gru1/h_0": h}, state="io")
        h = got["gru1/h_T"]
        steps.append(got["score"])
    np.testing.assert_allclose(np.concatenate(steps), whole["score"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(h, whole["gru1/h_T"], rtol=1e-5, atol=1e-5)


def test_verify_convert_export_and_unroll_through_plugin(tmp_path):
    pytest.importorskip("tensorrt_rtx_bindings")
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    done = run_cli("verify", NET, "-w", WEIGHTS, "--plugin", PLUGIN, "--runtime", "tensorrt-rtx",
                   "--onnxruntime", "--atol", "1e-5", "--rtol", "1e-4")
    assert done.returncode == 0, done.stderr
    assert len(re.findall(r"^score .* ok$", done.stdout, re.M)) == 3, done.stdout
    engine = tmp_path / "net.engine"
    done = run_cli("convert", NET, "-w", WEIGHTS, "--plugin", PLUGIN, "--runtime",
                   "tensorrt-rtx", "-o", engine, "--state", "io")
    assert done.returncode == 0 and engine.stat().st_size > 0, done.stderr
    assert "inputs: frames, gru1/h_0" in done.stdout
    for steps in (T, 9):  # one Scan, one recurrent Conv in its body, whatever T
        model = tmp_path / f"net{steps}.onnx"
        done = run_cli("export", NET, "-w", WEIGHTS, "--plugin", PLUGIN, "-o", model,
                       "--shape", f"frames:{steps}x{C}x{H}x{W}")
        assert done.returncode == 0, done.stderr
        graph = onnx.load(model).graph
        scans = [n for n in graph.node if n.op_type == "Scan"]
        assert len(scans) == 1 and [n.op_type for n in graph.node].count("Conv") == 2
        body = next(a.g for a in scans[0].attribute if a.name == "body")
        assert [n.op_type for n in body.node].count("Conv") == 1
    unrolled = tmp_path / "unrolled"
    done = run_cli("rewrite", NET, "-w", WEIGHTS, "--plugin", PLUGIN, "--unroll", "-o", unrolled)
    assert done.returncode == 0, done.stderr
    text = (unrolled / "conv_gru.prototxt").read_text()
    assert "ConvGRU" not in text and "Loop" not in text
    np.savez(tmp_path / "in.npz", frames=frames(5))
    outs = []
    for net, weights, extra in ((unrolled / "conv_gru.prototxt", unrolled / "conv_gru.caffemodel",
                                 ()), (NET, WEIGHTS, ("--plugin", PLUGIN))):
        out = tmp_path / f"out{len(outs)}.npz"
        done = run_cli("run", net, "-w", weights, "--inputs", tmp_path / "in.npz", "-o", out,
                       *extra)
        assert done.returncode == 0, done.stderr
        outs.append(np.load(out)["score"])
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("steps", [T, 9])
def test_the_tensorrt_network_has_one_iloop_with_one_step_s_convolution(steps):
    pytest.importorskip("tensorrt_rtx_bindings")
    from caffe_lstm.backends.tensorrt.build import BuildOptions, emit
    from caffe_lstm.backends.tensorrt.runtime import load_runtime

    runtime = load_runtime("tensorrt-rtx")
    net = caffe_lstm.load(NET, WEIGHTS, plugins=[PLUGIN], shapes={"frames": (steps, C, H, W)})
    _, network, _ = emit(runtime, net.rewritten().graph, BuildOptions())
    kinds = [network.get_layer(i).type for i in range(network.num_layers)]
    trt = runtime.trt
    assert kinds.count(trt.LayerType.TRIP_LIMIT) == 1
    # x's convolution before the loop, h's inside it, the 1×1 score after: 3 for any T
    assert kinds.count(trt.LayerType.CONVOLUTION) == 3


def test_triton_python_backend_served_step_by_step_equals_run_state_io(tmp_path):
    from caffe_lstm.serving.server import ServingError, TritonServer, find_triton

    grpcclient = pytest.importorskip("tritonclient.grpc")
    try:
        find_triton()
    except ServingError as exc:
        pytest.skip(f"the bundled Triton server cannot start here: {exc.line()}")
    repository = tmp_path / "repo"
    done = run_cli("triton", NET, "-w", WEIGHTS, "--plugin", PLUGIN, "-o", repository,
                   "--backend", "python", "--max-batch", "0", "--shape", f"frames:1x{C}x{H}x{W}",
                   "--state", "io")
    assert done.returncode == 0, done.stderr
    assert "states: gru1/h_0 <- gru1/h_T" in done.stdout
    x = frames(6)
    net = caffe_lstm.load(NET, WEIGHTS, plugins=[PLUGIN])
    want = net.run({"frames": x}, state="io")["score"]
    with TritonServer(repository) as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        for sequence in (11, 12):  # a second sequence starts again from zeros
            for t in range(T):
                tensor = grpcclient.InferInput("frames", [1, C, H, W], "FP32")
                tensor.set_data_from_numpy(np.ascontiguousarray(x[t:t + 1]))
                result = client.infer("conv_gru", [tensor], sequence_id=sequence,
                                      sequence_start=t == 0, sequence_end=t == T - 1)
                np.testing.assert_allclose(result.as_numpy("score"), want[t:t + 1],
                                           rtol=1e-5, atol=1e-5)


def test_a_dynamic_image_size_reaches_the_state(tmp_path):
    """export with H and W ranges and --state io: the state input is (1, D, H, W) with the
    image's symbolic H and W (a 0 of the state's dims), and onnxruntime at another size equals
    numpy there."""
    ort = pytest.importorskip("onnxruntime")
    model = tmp_path / "dynamic.onnx"
    done = run_cli("export", NET, "-w", WEIGHTS, "--plugin", PLUGIN, "--state", "io", "-o", model,
                   "--shape", f"frames:{T}x{C}x4x4:{T}x{C}x{H}x{W}:{T}x{C}x8x9")
    assert done.returncode == 0, done.stderr
    assert "gru1/h_0 (1, 4, frames_dim2, frames_dim3)" in done.stdout
    x = np.random.default_rng(8).standard_normal((T, C, 8, 9)).astype(np.float32)
    net = caffe_lstm.load(NET, WEIGHTS, plugins=[PLUGIN], shapes={"frames": (T, C, 8, 9)})
    want = net.run({"frames": x}, state="io")
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    score, h_t = session.run(["score", "gru1/h_T"], {"frames": x, "gru1/h_0": np.zeros(
        (1, D, 8, 9), np.float32)})
    np.testing.assert_allclose(score, want["score"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(h_t, want["gru1/h_T"], rtol=1e-5, atol=1e-5)
