"""The LSTM variants of docs/recurrent-extensions.md (the recurrent_param extension), end to end.

Every numeric case goes through the CLI twice (tests/test_cli_recurrent.py ``run_cli``): `run`
(the rewritten graph of primitive layers) and `run --original` (the direct equations), which
must agree, and the result is compared with a reference that is not the project's code:

- onnxruntime's ONNX LSTM for the activations and peepholes (peers.md §5.3): Caffe blocks
  (i, f, o, g) -> ONNX (i, o, f, c) = (0, 2, 1, 3), P rows (i, f, o) -> (i, o, f),
  ``activations = [Sigmoid, g, h]``, cont emulated by one T = 1 call per step from
  (cont_t·h, cont_t·c) (peers.md §5.4);
- torch ``nn.LSTM(proj_size=P)`` for the projection (peers.md §5.2);
- values worked out by hand for the cell clip (ONNX's and TensorRT's clips are other things).

Then the errors (one ``error:`` line, exit 1), the rewrite written back and read again, DOT,
and TensorRT: every variant builds an engine and its network walk equals numpy.
"""

from __future__ import annotations

import numpy as np
import pytest

from caffe_lstm.backends.numpy_exec import NumpyExecutor
from caffe_lstm.frontend.loader import load_net
from caffe_lstm.passes import run_passes
from tests.helpers import (
    ONNX_VARIANTS, SETUPS, assert_one_error_line, feeds_for, net_with_weights, run_cli,
    run_rewritten_and_original, variant_blobs, variant_net, write_variant,
)

ATOL = 1e-5
#: Caffe gate block k of ONNX's (i, o, f, c) layout, and peephole row k of ONNX's (i, o, f).
ONNX_FROM_CAFFE_GATES = (0, 2, 1, 3)
ONNX_FROM_CAFFE_PEEPHOLES = (0, 2, 1)
#: Caffe gate block k of torch's (i, f, g, o) layout.
TORCH_FROM_CAFFE_GATES = (0, 1, 3, 2)

# ---- the net, its weights and its inputs ----------------------------------------------------


# ---- reference 1: onnxruntime ----------------------------------------------------------------


def _onnx_cell(variant) -> tuple[list[str], list[float], list[float], float, float]:
    """ORT's activations (f, g, h) with their alphas and betas, and the scales sc, so.

    ORT has no clipped ReLU, but κ·HardSigmoid(x; α = 1/κ, β = 0) = min(max(x, 0), κ). So ORT
    runs a scaled copy of the cell: its cell state is c/sc and its output m/so, with sc = κ when
    g is CLIPPED_RELU (then ORT's g is g/κ, a HardSigmoid) and h_ort(c/sc) = h(c)/so:
    TANH -> ScaledTanh(1, sc); RELU, IDENTITY -> Relu, Affine(1, 0) with so = sc;
    CLIPPED_RELU -> HardSigmoid(sc/κ, 0) with so = κ. (SIGMOID needs sc = 1.)
    """
    kappa = variant.get("relu_clip", 20.0)
    g, h = variant.get("candidate_activation", "TANH"), variant.get("cell_activation", "TANH")
    sc = kappa if g == "CLIPPED_RELU" else 1.0
    # (ONNX name, alpha, beta), the parameters only where the activation takes them
    g_onnx = {"TANH": ("Tanh",), "SIGMOID": ("Sigmoid",), "RELU": ("Relu",),
              "IDENTITY": ("Affine", 1.0, 0.0), "CLIPPED_RELU": ("HardSigmoid", 1 / kappa, 0.0)}
    h_onnx = {"TANH": (("ScaledTanh", 1.0, sc), 1.0), "SIGMOID": (("Sigmoid",), 1.0),
              "RELU": (("Relu",), sc), "IDENTITY": (("Affine", 1.0, 0.0), sc),
              "CLIPPED_RELU": (("HardSigmoid", sc / kappa, 0.0), kappa)}
    assert h != "SIGMOID" or sc == 1.0, "σ(κ·c') has no ONNX activation"
    h_spec, so = h_onnx[h]
    specs = [("Sigmoid",), g_onnx[g], h_spec]
    alphas = [spec[1] for spec in specs if len(spec) > 1]
    betas = [spec[2] for spec in specs if len(spec) > 1]
    return [spec[0] for spec in specs], alphas, betas, sc, so


def _onnx_blocks(array, H, order):
    return np.concatenate([array[k * H:(k + 1) * H] for k in order], axis=0)


class OnnxLstmStep:
    """One ONNX LSTM step (T = 1) in onnxruntime with Caffe's blobs mapped.

    ONNX has no projection and no r_0: its input is [x_t, x_static, r̃_0] with W = [W_xc,
    W_xc_static, W_hc] (r̃_0 is zero after t = 1), and its recurrent state is m (ORT's Y), since
    W_hc·r = (W_hc·W_hr)·m, so R = so·W_hc·W_hr. P (rows i, f, o) becomes sc·P in (i, o, f).
    """

    def __init__(self, blobs, variant, N):
        onnx = pytest.importorskip("onnx")
        ort = pytest.importorskip("onnxruntime")
        H = blobs["b_c"].shape[0] // 4
        acts, alphas, betas, self.sc, self.so = _onnx_cell(variant)
        w_hr = blobs.get("W_hr", np.eye(H))
        inputs = [blobs["W_xc"]] + [blobs[k] for k in ("W_xc_static",) if k in blobs]
        W = np.concatenate(inputs + [blobs["W_hc"]], axis=1)
        R = self.so * (blobs["W_hc"].astype(np.float64) @ w_hr)
        B = np.concatenate([_onnx_blocks(blobs["b_c"], H, ONNX_FROM_CAFFE_GATES), np.zeros(4 * H)])
        P = self.sc * blobs.get("P", np.zeros((3, H)))[list(ONNX_FROM_CAFFE_PEEPHOLES)].ravel()
        arrays = {"W": _onnx_blocks(W, H, ONNX_FROM_CAFFE_GATES)[None],
                  "R": _onnx_blocks(R, H, ONNX_FROM_CAFFE_GATES)[None], "B": B[None], "P": P[None]}
        self.session = ort.InferenceSession(
            _onnx_model(onnx, arrays, N, W.shape[1], H, acts, alphas, betas),
            providers=["CPUExecutionProvider"])

    def __call__(self, x_t, m, c):
        """(x_t (N, I'), m (N, H), c (N, H)) -> (m_t, c_t), in Caffe's scale."""
        feeds = {"X": x_t[None], "h0": (m / self.so)[None], "c0": (c / self.sc)[None]}
        y, y_c = self.session.run(["Y", "Y_c"], {k: v.astype(np.float32) for k, v in feeds.items()})
        return self.so * y[0, 0].astype(np.float64), self.sc * y_c[0].astype(np.float64)


def _onnx_model(onnx, arrays, N, width, H, acts, alphas, betas) -> bytes:
    helper, FLOAT = onnx.helper, onnx.TensorProto.FLOAT
    attrs = {"hidden_size": H, "activations": acts}
    if alphas:
        attrs.update(activation_alpha=alphas, activation_beta=betas)
    node = helper.make_node("LSTM", ["X", "W", "R", "B", "", "h0", "c0", "P"],
                            ["Y", "", "Y_c"], **attrs)
    inits = [helper.make_tensor(k, FLOAT, v.shape, np.asarray(v, np.float32).ravel())
             for k, v in arrays.items()]
    inputs = [helper.make_tensor_value_info("X", FLOAT, (1, N, width)),
              helper.make_tensor_value_info("h0", FLOAT, (1, N, H)),
              helper.make_tensor_value_info("c0", FLOAT, (1, N, H))]
    outputs = [helper.make_tensor_value_info(k, FLOAT, None) for k in ("Y", "Y_c")]
    graph = helper.make_graph([node], "lstm", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    return model.SerializeToString()


def onnx_reference(feeds, blobs, variant):
    """r (T, N, R), r_T, c_T by one onnxruntime call per step from (cont_t·m, cont_t·c)."""
    x, cont = feeds["x"].astype(np.float64), feeds["cont"].astype(np.float64)
    T, N = cont.shape
    H = blobs["b_c"].shape[0] // 4
    R = variant.get("num_proj") or H
    step = OnnxLstmStep(blobs, variant, N)
    r0 = feeds.get("r_0", np.zeros((1, N, R)))[0].astype(np.float64)
    c = feeds.get("c_0", np.zeros((1, N, H)))[0].astype(np.float64)
    static = [feeds["x_static"].reshape(N, -1)] if "x_static" in feeds else []
    m, rs = np.zeros((N, H)), []
    for t in range(T):
        keep = cont[t][:, None]
        r_first = keep * r0 if t == 0 else np.zeros((N, R))  # W_hc·r̃_0 through the input
        m, c = step(np.concatenate([x[t].reshape(N, -1)] + static + [r_first], axis=1),
                    keep * m, keep * c)
        rs.append(m @ blobs["W_hr"].T if "W_hr" in blobs else m)
    return np.stack(rs), rs[-1][None], c[None]


# ---- reference 2: torch nn.LSTM(proj_size=P) --------------------------------------------------


def torch_projection_reference(feeds, blobs):
    """r, r_T, c_T from torch.nn.LSTM(proj_size) in float64, one call per step from
    (cont_t·r, cont_t·c); x_static joins every step's input and its columns W_xc's."""
    torch = pytest.importorskip("torch")
    x, cont = feeds["x"].astype(np.float64), feeds["cont"].astype(np.float64)
    T, N = cont.shape
    P, H = blobs["W_hr"].shape
    static = [np.broadcast_to(feeds["x_static"].reshape(N, -1), (T, N, feeds["x_static"].size // N))
              ] if "x_static" in feeds else []
    x = np.concatenate([x.reshape(T, N, -1)] + static, axis=2)
    w_ih = np.concatenate([blobs["W_xc"]] + [blobs[k] for k in ("W_xc_static",) if k in blobs],
                          axis=1)
    lstm = torch.nn.LSTM(x.shape[2], H, proj_size=P, dtype=torch.float64)
    as64 = lambda a: torch.from_numpy(np.asarray(a, np.float64))  # noqa: E731
    with torch.no_grad():
        lstm.weight_ih_l0.copy_(as64(_onnx_blocks(w_ih, H, TORCH_FROM_CAFFE_GATES)))
        lstm.weight_hh_l0.copy_(as64(_onnx_blocks(blobs["W_hc"], H, TORCH_FROM_CAFFE_GATES)))
        lstm.bias_ih_l0.copy_(as64(_onnx_blocks(blobs["b_c"], H, TORCH_FROM_CAFFE_GATES)))
        lstm.bias_hh_l0.zero_()
        lstm.weight_hr_l0.copy_(as64(blobs["W_hr"]))
        r = as64(feeds.get("r_0", np.zeros((1, N, P))))
        c = as64(feeds.get("c_0", np.zeros((1, N, H))))
        rs = []
        for t in range(T):
            keep = as64(cont[t])[None, :, None]
            y, (r, c) = lstm(as64(x[t:t + 1]), (keep * r, keep * c))
            rs.append(y[0].numpy())
    return np.stack(rs), r.numpy(), c.numpy()


# ---- 1. activations and peepholes (and their combinations) against onnxruntime ---------------


def _check_outputs(got, expected, expose):
    r, r_T, c_T = expected
    np.testing.assert_allclose(got["r"], r, atol=ATOL, rtol=0)
    if expose:
        np.testing.assert_allclose(got["r_T"], r_T, atol=ATOL, rtol=0)
        np.testing.assert_allclose(got["c_T"], c_T, atol=ATOL, rtol=0)


@pytest.mark.parametrize("setup", SETUPS)
@pytest.mark.parametrize("name", ONNX_VARIANTS)
def test_variant_matches_onnxruntime(invoke, tmp_path, name, setup):
    variant, (T, N, I, H) = ONNX_VARIANTS[name], (6, 3, 3, 5)
    rng = np.random.default_rng(sorted(ONNX_VARIANTS).index(name))
    S, expose = SETUPS[setup]["static"], SETUPS[setup]["expose"]
    blobs = variant_blobs(rng, I, H, variant, S)
    net, weights = write_variant(tmp_path, variant_net(T, N, I, H, variant, S, expose), blobs)
    feeds = feeds_for(rng, T, N, I, H, variant, setup)
    got = run_rewritten_and_original(invoke, tmp_path, net, weights, feeds)
    _check_outputs(got, onnx_reference(feeds, blobs, variant), expose)


def test_the_variants_change_the_result(invoke, tmp_path):
    """The references are not blind to the fields: plain Caffe weights give other outputs."""
    variant, (T, N, I, H) = ONNX_VARIANTS["deepspeech"], (4, 2, 3, 4)
    rng = np.random.default_rng(3)
    blobs = variant_blobs(rng, I, H, variant)
    feeds = feeds_for(rng, T, N, I, H, variant, "plain")
    net, weights = write_variant(tmp_path, variant_net(T, N, I, H, variant), blobs)
    got = run_rewritten_and_original(invoke, tmp_path, net, weights, feeds)["r"]
    plain_blobs = {k: v for k, v in blobs.items() if k != "P"}
    plain, _, _ = onnx_reference(feeds, plain_blobs, {})
    assert np.abs(got - plain).max() > 1e-2


# ---- 2. the projection against torch proj_size -----------------------------------------------


@pytest.mark.parametrize("setup", SETUPS)
@pytest.mark.parametrize("H, P", [(5, 3), (4, 1)])
def test_projection_matches_torch_proj_size(invoke, tmp_path, H, P, setup):
    variant, (T, N, I) = {"num_proj": P}, (7, 3, 4)
    rng = np.random.default_rng(10 * H + P)
    S, expose = SETUPS[setup]["static"], SETUPS[setup]["expose"]
    blobs = variant_blobs(rng, I, H, variant, S)
    net, weights = write_variant(tmp_path, variant_net(T, N, I, H, variant, S, expose), blobs)
    feeds = feeds_for(rng, T, N, I, H, variant, setup)
    got = run_rewritten_and_original(invoke, tmp_path, net, weights, feeds)
    assert got["r"].shape == (T, N, P)
    _check_outputs(got, torch_projection_reference(feeds, blobs), expose)


def test_exposed_state_of_a_projection_is_num_proj_wide(tmp_path):
    """`convert --state io` (the expose-state pass): the state inputs and outputs of an LSTMP
    are r (P wide) and c (H wide), and the rewritten graph fed them matches torch."""
    T, N, I, H, P = 5, 2, 3, 4, 2
    rng = np.random.default_rng(8)
    blobs = variant_blobs(rng, I, H, {"num_proj": P})
    text = variant_net(T, N, I, H, {"num_proj": P})
    graph = load_net(*write_variant(tmp_path, text, blobs)).graph
    run_passes(graph, ("expose-state", "expand-recurrent"))
    shapes = {v.name: v.shape for v in graph.inputs + graph.outputs}
    assert shapes["lstm1/h_0"] == shapes["lstm1/h_T"] == (1, N, P)
    assert shapes["lstm1/c_0"] == shapes["lstm1/c_T"] == (1, N, H)
    feeds = feeds_for(rng, T, N, I, H, {"num_proj": P}, "plain")
    feeds["cont"][0] = 1.0  # the given state carries in
    state = {"r_0": rng.normal(size=(1, N, P)), "c_0": rng.normal(size=(1, N, H))}
    got = NumpyExecutor(graph).run({**feeds, "lstm1/h_0": state["r_0"],
                                    "lstm1/c_0": state["c_0"]})
    r, r_T, c_T = torch_projection_reference({**feeds, **state}, blobs)
    np.testing.assert_allclose(got["r"], r, atol=ATOL, rtol=0)
    np.testing.assert_allclose(got["lstm1/h_T"], r_T, atol=ATOL, rtol=0)
    np.testing.assert_allclose(got["lstm1/c_T"], c_T, atol=ATOL, rtol=0)


# ---- 3. the cell clip, worked out by hand ------------------------------------------------------


def test_cell_clip_by_hand(invoke, tmp_path):
    """cell_clip 0.5; I = H = N = 1, T = 3; W_xc = [0, 0, 1, 2] (i, f, o, g), b_c = [2, 0, 0, 0],
    W_hc = 0; expose_hidden with h_0 = 0, c_0 = 2; cont = [1, 1, 1]; x = [1, -1, 1].

    Every step: i = σ(2) = 0.88079708, f = σ(0) = 0.5, o = σ(x_t), g = tanh(2·x_t).
    t=1: c = 0.5·2 + 0.88079708·0.96402758 = 1.84911268  -> clamped to 0.5
         h = σ(1)·tanh(0.5) = 0.73105858·0.46211716 = 0.33783471
    t=2: c = 0.5·0.5 + 0.88079708·(-0.96402758) = -0.59911268  -> clamped to -0.5
         h = σ(-1)·tanh(-0.5) = 0.26894142·(-0.46211716) = -0.12428245
    t=3: c = 0.5·(-0.5) + 0.88079708·0.96402758 = 0.59911268  -> clamped to 0.5
         h = 0.33783471;  h_T = 0.33783471, c_T = 0.5
    Without the clamp c would run 1.849, 0.075, 0.887: the clip decides every step.
    """
    variant = {"cell_clip": 0.5}
    blobs = {"W_xc": np.array([[0.0], [0.0], [1.0], [2.0]]), "b_c": np.array([2.0, 0, 0, 0]),
             "W_hc": np.zeros((4, 1))}
    net, weights = write_variant(tmp_path, variant_net(3, 1, 1, 1, variant, expose=True),
                                 {k: v.astype(np.float32) for k, v in blobs.items()})
    feeds = {"x": np.array([1.0, -1.0, 1.0], np.float32).reshape(3, 1, 1),
             "cont": np.ones((3, 1), np.float32), "r_0": np.zeros((1, 1, 1), np.float32),
             "c_0": np.full((1, 1, 1), 2.0, np.float32)}
    got = run_rewritten_and_original(invoke, tmp_path, net, weights, feeds)
    np.testing.assert_allclose(got["r"].ravel(), [0.33783471, -0.12428245, 0.33783471],
                               atol=1e-7, rtol=0)
    np.testing.assert_allclose(got["r_T"].ravel(), [0.33783471], atol=1e-7, rtol=0)
    np.testing.assert_allclose(got["c_T"].ravel(), [0.5], atol=1e-7, rtol=0)


def test_every_variant_at_once_by_hand(invoke, tmp_path):
    """CLIPPED_RELU candidate (κ = 1), peepholes, projection P = 1, cell_clip 0.8, a static
    input, expose_hidden and a cont reset; I = S = H = P = N = 1, T = 3.

    W_xc = [1, 1, 1, 2] (i, f, o, g), b_c = [0, 0, 0, -0.5], W_xc_static = [0.5, 0, 0, 0] with
    x_static = 2 (adds 1 to a_i), W_hc = [0, 0, 1, 1], P = (p_i, p_f, p_o) = (0.5, -0.5, 1),
    W_hr = 2; r_0 = 0.25, c_0 = 1; cont = [1, 0, 1]; x = [1, 0.5, -1].
    t=1: r̃ = 0.25, c̃ = 1; a = (1 + 1, 1, 1 + 0.25, 2 - 0.5 + 0.25) = (2, 1, 1.25, 1.75)
         i = σ(2 + 0.5·1) = σ(2.5) = 0.92414182, f = σ(1 - 0.5·1) = σ(0.5) = 0.62245933
         g = min(max(1.75, 0), 1) = 1
         c = 0.62245933·1 + 0.92414182·1 = 1.54660115  -> clamped to 0.8
         o = σ(1.25 + 1·0.8) = σ(2.05) = 0.88594762 (the new, clamped cell)
         m = o·tanh(0.8) = 0.88594762·0.66403677 = 0.58830180;  r = 2·m = 1.17660359
    t=2 (cont 0: r̃ = c̃ = 0): a = (0.5 + 1, 0.5, 0.5, 1 - 0.5) = (1.5, 0.5, 0.5, 0.5)
         i = σ(1.5) = 0.81757448, g = 0.5, c = i·g = 0.40878724 (inside the clip)
         o = σ(0.5 + 0.40878724) = 0.71275193;  m = o·tanh(c) = 0.71275193·0.38744245
           = 0.27615036;  r = 0.55230071
    t=3: r̃ = 0.55230071, c̃ = 0.40878724; a = (-1 + 1, -1, -1 + r̃, -2 - 0.5 + r̃)
         i = σ(0 + 0.5·c̃) = σ(0.20439362) = 0.55092125, g = max(-1.94769929, 0) = 0
         f = σ(-1 - 0.5·c̃) = σ(-1.20439362) = 0.23069454
         c = f·c̃ = 0.09430498;  o = σ(-0.44769929 + 0.09430498) = σ(-0.35339431) = 0.41255955
         m = o·tanh(c) = 0.41255955·0.09402641 = 0.03879149;  r = 0.07758299
    """
    variant = {"candidate_activation": "CLIPPED_RELU", "relu_clip": 1.0, "peephole": True,
               "num_proj": 1, "cell_clip": 0.8}
    blobs = {"W_xc": [[1.0], [1.0], [1.0], [2.0]], "b_c": [0.0, 0.0, 0.0, -0.5],
             "W_xc_static": [[0.5], [0.0], [0.0], [0.0]], "W_hc": [[0.0], [0.0], [1.0], [1.0]],
             "P": [[0.5], [-0.5], [1.0]], "W_hr": [[2.0]]}
    net, weights = write_variant(tmp_path, variant_net(3, 1, 1, 1, variant, 1, expose=True),
                                 {k: np.array(v, np.float32) for k, v in blobs.items()})
    feeds = {"x": np.array([1.0, 0.5, -1.0], np.float32).reshape(3, 1, 1),
             "cont": np.array([[1.0], [0.0], [1.0]], np.float32),
             "x_static": np.array([[2.0]], np.float32),
             "r_0": np.full((1, 1, 1), 0.25, np.float32), "c_0": np.ones((1, 1, 1), np.float32)}
    got = run_rewritten_and_original(invoke, tmp_path, net, weights, feeds)
    np.testing.assert_allclose(got["r"].ravel(), [1.17660359, 0.55230071, 0.07758299],
                               atol=1e-6, rtol=0)
    np.testing.assert_allclose(got["r_T"].ravel(), [0.07758299], atol=1e-6, rtol=0)
    np.testing.assert_allclose(got["c_T"].ravel(), [0.09430498], atol=1e-6, rtol=0)


# ---- 4. errors: one line, exit 1 ----------------------------------------------------------------


def _rnn_net(fields: str) -> str:
    return ('layer { name: "input" type: "Input" top: "x" top: "cont" '
            'input_param { shape { dim: 3 dim: 2 dim: 4 } shape { dim: 3 dim: 2 } } }\n'
            'layer { name: "rnn1" type: "RNN" bottom: "x" bottom: "cont" top: "o" '
            f'recurrent_param {{ num_output: 3 {fields} }} }}\n')


@pytest.mark.parametrize("fields, needle", [
    ("peephole: true", "layer 'rnn1' (RNN)"),
    ("num_proj: 2", "recurrent_param.num_proj: 2 is set, but RNN has no cell variants"),
    ("candidate_activation: RELU cell_clip: 1", ("candidate_activation: RELU, "
                                                 "recurrent_param.cell_clip: 1 is set")),
])
def test_rnn_refuses_the_extension_fields(tmp_path, fields, needle):
    net = tmp_path / "rnn.prototxt"
    net.write_text(_rnn_net(fields))
    assert_one_error_line(run_cli("inspect", net), needle)


@pytest.mark.parametrize("variant, needle", [
    ({"candidate_activation": "CLIPPED_RELU", "relu_clip": 0.0},
     "relu_clip is 0, expected a finite value > 0 for CLIPPED_RELU"),
    ({"cell_activation": "CLIPPED_RELU", "relu_clip": -2.5}, "relu_clip is -2.5"),
    ({"candidate_activation": "RELU", "relu_clip": 6},
     "relu_clip: 6 is set but no activation is CLIPPED_RELU"),
    ({"cell_clip": -1}, "cell_clip is -1, expected a finite value >= 0"),
    ({"cell_clip": "inf"}, "cell_clip is inf"),
])
def test_impossible_combinations_are_refused(tmp_path, variant, needle):
    net = tmp_path / "lstm.prototxt"
    net.write_text(variant_net(3, 2, 4, 5, variant))
    assert_one_error_line(run_cli("inspect", net), needle)


def test_projected_state_must_be_num_proj_wide(tmp_path):
    text = variant_net(3, 2, 4, 5, {"num_proj": 2}, expose=True).replace(
        "shape { dim: 1 dim: 2 dim: 2 }", "shape { dim: 1 dim: 2 dim: 5 }")
    net = tmp_path / "lstm.prototxt"
    net.write_text(text)
    assert_one_error_line(run_cli("inspect", net), "r_0 must have shape (1, 2, 2), found (1, 2, 5)")


def test_weights_without_the_variant_blobs_are_refused(tmp_path):
    rng = np.random.default_rng(0)
    blobs = variant_blobs(rng, 4, 5, {})  # plain LSTM weights for a peephole net
    net, weights = write_variant(tmp_path, variant_net(3, 2, 4, 5, {"peephole": True}), blobs)
    assert_one_error_line(run_cli("run", net, "-w", weights),
                          "the caffemodel has 3 blobs for this layer, the net needs 4")


# ---- 5. the rewrite written back (Loop and unrolled), and DOT ----------------------------------

#: One net with every variant at once (a static input, exposed states), for the backends.
EVERYTHING = {"candidate_activation": "CLIPPED_RELU", "relu_clip": 0.8,
              "cell_activation": "SIGMOID", "peephole": True, "num_proj": 3, "cell_clip": 0.6}


@pytest.mark.parametrize("unroll", [False, True], ids=["loop", "unrolled"])
def test_rewritten_net_written_back_runs_like_the_original(invoke, tmp_path, unroll):
    T, N, I, H = 4, 3, 3, 5
    rng = np.random.default_rng(17)
    blobs = variant_blobs(rng, I, H, EVERYTHING, 4)
    net, weights = write_variant(tmp_path, variant_net(T, N, I, H, EVERYTHING, 4, True), blobs)
    feeds = feeds_for(rng, T, N, I, H, EVERYTHING, "everything")
    expected = run_rewritten_and_original(invoke, tmp_path, net, weights, feeds)
    out = tmp_path / "out"
    result = invoke("rewrite", net, "-w", weights, "-o", out, *(["--unroll"] if unroll else []))
    assert result.exit_code == 0, result.stderr
    written = out / "net.prototxt"
    text = written.read_text()
    assert 'type: "LSTM"' not in text and 'type: "Clip"' in text and 'name: "lstm1/P_o"' in text
    assert ('type: "Loop"' in text) is not unroll
    np.savez(tmp_path / "in.npz", **feeds)
    result = invoke("run", written, "-w", out / "net.caffemodel", "--inputs",
                    tmp_path / "in.npz", "-o", tmp_path / "again.npz")
    assert result.exit_code == 0, result.stderr
    again = dict(np.load(tmp_path / "again.npz"))
    assert sorted(again) == sorted(expected)
    for name, want in expected.items():
        np.testing.assert_allclose(again[name], want, atol=ATOL, rtol=0, err_msg=name)


def test_dot_draws_the_variant_layers(invoke, tmp_path):
    rng = np.random.default_rng(2)
    blobs = variant_blobs(rng, 3, 5, EVERYTHING, 4)
    net, weights = write_variant(tmp_path, variant_net(4, 2, 3, 5, EVERYTHING, 4, True), blobs)
    out = tmp_path / "net.dot"
    result = invoke("dot", net, "-w", weights, "-o", out)
    assert result.exit_code == 0, result.stderr
    text = out.read_text()
    for node in ("__lstm1/peephole_i", "__lstm1/peephole_o", "__lstm1/g", "__lstm1/c",
                 "__lstm1/sigmoid_c", "__lstm1/r"):
        assert f'"{node}"' in text, node
    assert "next r" in text and "next c" in text  # the carried states are r and c


# ---- 6. TensorRT: an engine per variant, and the network walk equals numpy --------------------


TRT_VARIANTS = {**ONNX_VARIANTS, "projection": {"num_proj": 3}, "wide_projection": {"num_proj": 7},
                "cell_clip": {"cell_clip": 0.3}, "everything": EVERYTHING}


@pytest.fixture(scope="module")
def runtime():
    pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT for RTX is not installed")
    from caffe_lstm.backends.tensorrt.runtime import load_runtime
    return load_runtime("tensorrt-rtx")


@pytest.mark.parametrize("setup", SETUPS)
@pytest.mark.parametrize("name", TRT_VARIANTS)
def test_variant_builds_an_engine_whose_network_equals_numpy(runtime, tmp_path, name, setup):
    from caffe_lstm.backends.tensorrt.build import BuildOptions, build_engine, emit
    from caffe_lstm.backends.tensorrt.network_eval import evaluate_network

    variant, (T, N, I, H) = TRT_VARIANTS[name], (5, 3, 3, 4)
    text = variant_net(T, N, I, H, variant, **SETUPS[setup])
    original = net_with_weights(tmp_path, text, seed=7)
    feeds = feeds_for(np.random.default_rng(5), T, N, I, H, variant, setup)
    expected = NumpyExecutor(original).run(feeds)
    rewritten = run_passes(net_with_weights(tmp_path, text, seed=7))
    _, network, _ = emit(runtime, rewritten, BuildOptions())
    got = evaluate_network(runtime.trt, network, feeds)
    assert sorted(got) == sorted(expected)
    for output, want in expected.items():
        np.testing.assert_allclose(got[output], want, atol=ATOL, rtol=0, err_msg=output)
    assert build_engine(runtime, rewritten, BuildOptions())[:4] == b"vtrt"
