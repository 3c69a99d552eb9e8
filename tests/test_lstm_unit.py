"""BVLC's LSTMUnit: the op against values worked out by hand, and a net unrolled by hand with
LSTMUnit layers (as Caffe's own LSTM unrolls itself) against the LSTM layer and torch.nn.LSTM,
through the CLI (run; convert builds an engine; verify passes); its ONNX facet in onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from caffe_lstm.errors import ShapeError
from caffe_lstm.frontend.caffe_writer import write_caffemodel
from caffe_lstm.ops import get_op
from tests.helpers import make_node, run_onnx_facet, run_op, torch_lstm


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


# ---- the op -----------------------------------------------------------------------------------


def test_lstm_unit_by_hand():
    # N = 2, H = 1; stream 0: cont 1, stream 1: cont 0 (the forget term vanishes).
    # X = (a_i, a_f, a_o, a_g) = (0.5, -0.5, 1, 1) for both, c_prev = (2, 2):
    #   i = σ(0.5) = 0.62245933, f = cont·σ(-0.5) = cont·0.37754067,
    #   o = σ(1) = 0.73105858, g = tanh(1) = 0.76159416
    #   stream 0: c = 0.37754067·2 + 0.62245933·0.76159416 = 1.22914273,
    #             h = 0.73105858·tanh(1.22914273) = 0.73105858·0.84233049 = 0.61579293
    #   stream 1: c = 0.62245933·0.76159416 = 0.47406139, h = 0.73105858·0.44147499 = 0.32274408
    c_prev = np.array([2.0, 2.0]).reshape(1, 2, 1)
    x = np.array([[0.5, -0.5, 1.0, 1.0], [0.5, -0.5, 1.0, 1.0]]).reshape(1, 2, 4)
    cont = np.array([[1.0, 0.0]])
    c, h = run_op("LSTMUnit", {}, [c_prev, x, cont], n_tops=2)
    np.testing.assert_allclose(c.reshape(-1), [1.22914273, 0.47406139], atol=1e-6)
    np.testing.assert_allclose(h.reshape(-1), [0.61579293, 0.32274408], atol=1e-6)


def test_lstm_unit_non_binary_cont_scales_the_forget_gate_only():
    rng = np.random.default_rng(0)
    c_prev, x = rng.normal(size=(1, 3, 2)), rng.normal(size=(1, 3, 8))
    cont = np.array([[0.5, 1.0, 0.0]])
    c, h = run_op("LSTMUnit", {}, [c_prev, x, cont], n_tops=2)
    a_i, a_f, a_o, a_g = np.split(x, 4, axis=2)
    expected_c = cont[..., None] * _sigmoid(a_f) * c_prev + _sigmoid(a_i) * np.tanh(a_g)
    np.testing.assert_allclose(c, expected_c, atol=1e-6)
    np.testing.assert_allclose(h, _sigmoid(a_o) * np.tanh(expected_c), atol=1e-6)


@pytest.mark.parametrize("shapes, message", [
    (((2, 3, 4), (1, 3, 16), (1, 3)), "c_prev must be 3-D (1, N, …)"),
    (((1, 3, 4), (1, 3, 12), (1, 3)), "gates must be (1, N, 4H) = (1, 3, 16)"),
    (((1, 3, 4), (1, 2, 16), (1, 3)), "with N = 3"),
    (((1, 3, 4), (1, 3, 16), (3,)), "cont must be 2-D (1, N)"),
])
def test_lstm_unit_refuses_bad_bottoms(shapes, message):
    node = make_node("LSTMUnit", {}, shapes, n_tops=2)
    with pytest.raises(ShapeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        get_op("LSTMUnit").infer(None, node, *shapes)


def test_lstm_unit_onnx_facet_matches_numpy():
    rng = np.random.default_rng(1)
    arrays = [rng.normal(size=(1, 3, 5)), rng.normal(size=(1, 3, 20)),
              np.array([[1.0, 0.0, 0.25]])]
    expected = run_op("LSTMUnit", {}, arrays, n_tops=2)
    got = run_onnx_facet("LSTMUnit", {}, arrays, n_tops=2)
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, atol=1e-6)


# ---- a hand-unrolled net against the LSTM layer and torch -------------------------------------


def _layer(name: str, kind: str, bottoms: list[str], tops: list[str], param: str = "") -> str:
    """One ``layer { }`` of a prototxt."""
    wiring = " ".join([f'bottom: "{b}"' for b in bottoms] + [f'top: "{t}"' for t in tops])
    return f'layer {{ name: "{name}" type: "{kind}" {wiring} {param} }}'


def _unrolled_prototxt(steps: int, batch: int, inputs: int, hidden: int) -> str:
    """Caffe's own unrolled LSTM net (lstm_layer.cpp FillUnrolledNet), written by hand."""
    gates, times = 4 * hidden, range(1, steps + 1)
    state = f"shape {{ dim: 1 dim: {batch} dim: {hidden} }}"
    layers = [
        f'input: "x" input_shape {{ dim: {steps} dim: {batch} dim: {inputs} }}',
        f'input: "cont" input_shape {{ dim: {steps} dim: {batch} }}',
        _layer("state0", "DummyData", [], ["h_0", "c_0"],
               f"dummy_data_param {{ {state} {state} }}"),
        _layer("x_transform", "InnerProduct", ["x"], ["W_xc_x"],
               f"inner_product_param {{ num_output: {gates} axis: 2 }}"),
        _layer("cont_slice", "Slice", ["cont"], [f"cont_{t}" for t in times],
               "slice_param { axis: 0 }"),
        _layer("W_xc_x_slice", "Slice", ["W_xc_x"], [f"W_xc_x_{t}" for t in times],
               "slice_param { axis: 0 }"),
    ]
    for t in times:
        u = t - 1
        layers += [
            _layer(f"h_conted_{u}", "Scale", [f"h_{u}", f"cont_{t}"], [f"h_conted_{u}"],
                   "scale_param { axis: 0 }"),
            _layer(f"transform_{t}", "InnerProduct", [f"h_conted_{u}"], [f"W_hc_h_{u}"],
                   f"inner_product_param {{ num_output: {gates} bias_term: false axis: 2 }}"),
            _layer(f"gate_input_{t}", "Eltwise", [f"W_hc_h_{u}", f"W_xc_x_{t}"],
                   [f"gate_input_{t}"]),
            _layer(f"unit_{t}", "LSTMUnit", [f"c_{u}", f"gate_input_{t}", f"cont_{t}"],
                   [f"c_{t}", f"h_{t}"]),
        ]
    layers.append(_layer("h_concat", "Concat", [f"h_{t}" for t in times], ["h"],
                         "concat_param { axis: 0 }"))
    return "\n".join(layers) + "\n"


def _lstm_prototxt(steps: int, batch: int, inputs: int, hidden: int) -> str:
    return (f'input: "x" input_shape {{ dim: {steps} dim: {batch} dim: {inputs} }}\n'
            f'input: "cont" input_shape {{ dim: {steps} dim: {batch} }}\n'
            'layer { name: "lstm" type: "LSTM" bottom: "x" bottom: "cont" top: "h" '
            f'recurrent_param {{ num_output: {hidden} }} }}\n')


@pytest.fixture(scope="module")
def unrolled_case(module_scratch):
    """The two nets with the same weights and one inputs file: (dir, unrolled, lstm, feeds)."""
    steps, batch, inputs, hidden = 5, 3, 4, 6
    folder = module_scratch.mktemp("lstm_unit")
    rng = np.random.default_rng(7)
    w_xc = rng.normal(0, 0.5, (4 * hidden, inputs)).astype(np.float32)
    b_c = rng.normal(0, 0.5, 4 * hidden).astype(np.float32)
    w_hc = rng.normal(0, 0.5, (4 * hidden, hidden)).astype(np.float32)
    unrolled = folder / "unrolled.prototxt"
    unrolled.write_text(_unrolled_prototxt(steps, batch, inputs, hidden))
    write_caffemodel(folder / "unrolled.caffemodel",
                     [("x_transform", "InnerProduct", [w_xc, b_c])]
                     + [(f"transform_{t}", "InnerProduct", [w_hc]) for t in range(1, steps + 1)])
    lstm = folder / "lstm.prototxt"
    lstm.write_text(_lstm_prototxt(steps, batch, inputs, hidden))
    write_caffemodel(folder / "lstm.caffemodel", [("lstm", "LSTM", [w_xc, b_c, w_hc])])
    x = rng.normal(0, 1, (steps, batch, inputs)).astype(np.float32)
    cont = np.ones((steps, batch), np.float32)
    cont[0] = 0
    np.savez(folder / "in.npz", x=x, cont=cont)
    return folder, unrolled, lstm, (x, w_xc, b_c, w_hc)


def _run(invoke, net, weights, inputs, out):
    result = invoke("run", net, "-w", weights, "--inputs", inputs, "-o", out)
    assert result.exit_code == 0, result.stderr
    with np.load(out) as data:
        return data["h"]


def test_unrolled_lstm_unit_net_equals_the_lstm_layer_and_torch(invoke, unrolled_case):
    folder, unrolled, lstm, (x, w_xc, b_c, w_hc) = unrolled_case
    inputs = folder / "in.npz"
    by_units = _run(invoke, unrolled, folder / "unrolled.caffemodel", inputs, folder / "u.npz")
    by_layer = _run(invoke, lstm, folder / "lstm.caffemodel", inputs, folder / "l.npz")
    np.testing.assert_allclose(by_units, by_layer, atol=1e-5, rtol=0)
    np.testing.assert_allclose(by_units, torch_lstm(x, w_xc, b_c, w_hc)[0], atol=1e-5, rtol=0)


def test_unrolled_lstm_unit_net_converts_and_verifies(invoke, unrolled_case):
    pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT for RTX is not installed")
    folder, unrolled, _, _ = unrolled_case
    weights, engine = folder / "unrolled.caffemodel", folder / "unrolled.engine"
    result = invoke("convert", unrolled, "-w", weights, "-o", engine)
    assert result.exit_code == 0, result.stderr
    assert engine.stat().st_size > 0
    result = invoke("verify", unrolled, "-w", weights, "--inputs", folder / "in.npz")
    assert result.exit_code == 0, result.stdout + result.stderr



UNIT_NET = """
input: "c_prev" input_shape { dim: 1 dim: 3 dim: 5 }
input: "gates" input_shape { dim: 1 dim: 3 dim: 20 }
input: "cont" input_shape { dim: 1 dim: 3 }
layer { name: "unit" type: "LSTMUnit" bottom: "c_prev" bottom: "gates" bottom: "cont"
        top: "c" top: "h" }
"""


@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
def test_tensorrt_network_with_a_dynamic_batch(tmp_path, fp16):
    """The TensorRT network (walked on the CPU) against numpy, N varying at run time."""
    pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT for RTX is not installed")
    from caffe_lstm.backends.tensorrt.build import BuildOptions, build_engine, emit
    from caffe_lstm.backends.tensorrt.network_eval import evaluate_network
    from caffe_lstm.backends.tensorrt.runtime import load_runtime
    from caffe_lstm.frontend.loader import load_net

    net = tmp_path / "unit.prototxt"
    net.write_text(UNIT_NET)
    graph, runtime = load_net(net).graph, load_runtime("tensorrt-rtx")
    shapes = {"c_prev": ((1, 1, 5), (1, 3, 5), (1, 8, 5)),
              "gates": ((1, 1, 20), (1, 3, 20), (1, 8, 20)), "cont": ((1, 1), (1, 3), (1, 8))}
    options = BuildOptions(fp16=fp16, shapes=shapes)
    assert build_engine(runtime, graph, options)[:4] == b"vtrt"
    _, network, _ = emit(runtime, graph, options)
    rng = np.random.default_rng(9)
    arrays = [rng.normal(size=(1, 6, 5)), rng.normal(size=(1, 6, 20)),
              np.array([[0, 1, 0.5, 1, 1, 0]])]
    feeds = {name: np.asarray(a, np.float32) for name, a in zip(("c_prev", "gates", "cont"),
                                                                 arrays)}
    got = evaluate_network(runtime.trt, network, feeds)
    want = run_op("LSTMUnit", {}, list(feeds.values()), n_tops=2)
    tolerance = 1e-2 if fp16 else 1e-5
    for name, expected in zip(("c", "h"), want):
        np.testing.assert_allclose(got[name].astype(np.float32), expected, atol=tolerance)
