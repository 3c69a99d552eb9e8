"""`caffe-lstm weights export|import|init` on real files, checked by the target frameworks.

torch's ``nn.LSTM`` (loading the pytorch export by its state_dict names) and onnxruntime (an
ONNX LSTM node built from the onnx export) run for real. Keras, the legacy CuDNNLSTM, cuDNN and
TensorFlow are not installed: their documented equations (peers.md §1.3, §1.6, §1.8) are written
out below in numpy and run on the exported arrays. Every LSTM has H >= 2 and I != H: with one
unit a transposed or reshaped kernel cannot be told from the right one (peers.md §6, trap 2).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from caffe_lstm.errors import CaffeLstmError
from caffe_lstm.frontend.caffe_writer import write_caffemodel
from caffe_lstm.frontend.loader import load_net
from caffe_lstm.proto import caffe_pb2
from tests.helpers import CORPUS, needs_corpus, sample

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

ALL_LAYOUTS = ["caffe", "pytorch", "onnx", "keras", "keras-cudnn", "cudnn", "tf"]


# ---- small nets written in tmp_path ---------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    """One LSTM (or fork Lstm) between an Input layer and two InnerProducts (one TRAIN-only)."""

    inputs: int = 5
    hidden: int = 4
    steps: int = 6
    batch: int = 3
    static: int = 0
    peephole: bool = False
    num_proj: int = 0
    fork: bool = False


def small_prototxt(s: Spec) -> str:
    shapes = [(s.steps, s.batch, s.inputs), (s.steps, s.batch)] + ([(s.batch, s.static)]
                                                                   if s.static else [])
    blobs = ["x", "cont"] + (["xs"] if s.static else [])
    shape_text = " ".join("shape { " + " ".join(f"dim: {d}" for d in shape) + " }"
                          for shape in shapes)
    tops = " ".join(f'top: "{b}"' for b in blobs)
    bottoms = " ".join(f'bottom: "{b}"' for b in blobs)
    if s.fork:
        lstm = f'type: "Lstm" {bottoms} top: "h" lstm_param {{ num_output: {s.hidden} }}'
    else:
        extra = ("peephole: true " if s.peephole else "") + (
            f"num_proj: {s.num_proj}" if s.num_proj else "")
        lstm = (f'type: "LSTM" {bottoms} top: "h" '
                f"recurrent_param {{ num_output: {s.hidden} {extra} }}")
    return (f'name: "small"\n'
            f'layer {{ name: "input" type: "Input" {tops} input_param {{ {shape_text} }} }}\n'
            f'layer {{ name: "lstm1" {lstm} }}\n'
            'layer { name: "ip" type: "InnerProduct" bottom: "h" top: "y"\n'
            '        inner_product_param { num_output: 2 axis: 2 } }\n'
            'layer { name: "train_ip" type: "InnerProduct" bottom: "h" top: "z"\n'
            '        include { phase: TRAIN } inner_product_param { num_output: 3 axis: 2 } }\n')


def _variant_loads(field: str) -> bool:
    """Whether the LSTM op takes ``field`` with its extra blob (docs/recurrent-extensions.md)."""
    with tempfile.TemporaryDirectory() as tmp:
        net = Path(tmp) / "net.prototxt"
        spec = Spec(peephole=field == "peephole", num_proj=3 if field == "num_proj" else 0)
        net.write_text(small_prototxt(spec))
        try:
            node = load_net(net).graph.node("lstm1")
        except CaffeLstmError:
            return False
        return node is not None and len(node.weights) == 4


NEEDS_PEEPHOLE = pytest.mark.skipif(
    not _variant_loads("peephole"),
    reason="the LSTM op does not parse recurrent_param.peephole (the P blob) yet")
NEEDS_PROJECTION = pytest.mark.skipif(
    not _variant_loads("num_proj"),
    reason="the LSTM op does not parse recurrent_param.num_proj (the W_hr blob) yet")


@dataclass
class Case:
    """A net, its weights and inputs, and which LSTM layer to move (x and x_static its
    bottoms, top its output)."""

    net: Path
    weights: Path
    inputs: Path
    layer: str = "lstm1"
    x: str = "x"
    static: str | None = None
    top: str = "h"


def _fresh_cont(steps: int, batch: int) -> np.ndarray:
    """cont = 0 at t = 0 and 1 after: each stream starts from zero state, as other frameworks."""
    cont = np.ones((steps, batch), np.float32)
    cont[0] = 0
    return cont


def small_case(invoke, tmp_path: Path, spec: Spec, seed: int = 7) -> Case:
    """The net, weights from `weights init` with some -0.0 biases, and random inputs."""
    net, weights, inputs = tmp_path / "net.prototxt", tmp_path / "w.caffemodel", tmp_path / "in.npz"
    net.write_text(small_prototxt(spec))
    result = invoke("weights", "init", net, "-o", weights, "--seed", seed)
    assert result.exit_code == 0, result.stderr
    _put_negative_zeros(weights, bias_index=2 if spec.fork else 1)
    rng = np.random.default_rng(seed)
    feeds = {"x": rng.normal(size=(spec.steps, spec.batch, spec.inputs)).astype(np.float32),
             "cont": _fresh_cont(spec.steps, spec.batch)}
    if spec.static:
        feeds["xs"] = rng.normal(size=(spec.batch, spec.static)).astype(np.float32)
    np.savez(inputs, **feeds)
    return Case(net, weights, inputs, static="xs" if spec.static else None)


def _put_negative_zeros(weights: Path, bias_index: int) -> None:
    """Every third value of lstm1's bias becomes -0.0, so a round trip that loses the sign of a
    zero (b + 0.0) is caught by the bitwise comparison."""
    net = _parse(weights)
    layers = []
    for layer in net.layer:
        blobs = [_blob_array(blob) for blob in layer.blobs]
        if layer.name == "lstm1":
            blobs[bias_index][::3] = -0.0
        layers.append((layer.name, layer.type, blobs))
    write_caffemodel(weights, layers, net_name=net.name)


def sample_case(name: str, tmp_path: Path) -> Case:
    """seq_classifier's lstm1 (I = 8, H = 16), or captioner's lstm2 with its static input."""
    net, weights = sample(name)
    rng = np.random.default_rng(5)
    inputs = tmp_path / "in.npz"
    if name == "seq_classifier":
        np.savez(inputs, data=rng.normal(size=(12, 2, 8)).astype(np.float32),
                 cont=_fresh_cont(12, 2))
        return Case(net, weights, inputs, x="data", top="lstm1")
    np.savez(inputs, input_sentence=rng.integers(0, 50, size=(10, 2)).astype(np.float32),
             cont_sentence=_fresh_cont(10, 2),
             image_features=rng.normal(size=(2, 32)).astype(np.float32))
    return Case(net, weights, inputs, layer="lstm2", x="lstm1", static="image_features",
                top="lstm2")


PLAIN_CASES = ["seq_classifier", "captioner", "small", "small-static", "fork"]
VARIANT_SPECS = {
    "peephole": Spec(peephole=True),
    "projection": Spec(num_proj=3),
    "peephole-projection-static": Spec(peephole=True, num_proj=3, static=2),
}
VARIANT_MARKS = {"peephole": [NEEDS_PEEPHOLE], "projection": [NEEDS_PROJECTION],
                 "peephole-projection-static": [NEEDS_PEEPHOLE, NEEDS_PROJECTION]}


def make_case(name: str, invoke, tmp_path: Path) -> Case:
    if name in ("seq_classifier", "captioner"):
        return sample_case(name, tmp_path)
    specs = {"small": Spec(), "small-static": Spec(static=3), "fork": Spec(fork=True),
             **VARIANT_SPECS}
    return small_case(invoke, tmp_path, specs[name])


# ---- the CLI and the files --------------------------------------------------------------------


def export(invoke, tmp_path: Path, case: Case, layout: str, weights: Path | None = None
           ) -> dict[str, np.ndarray]:
    out = tmp_path / f"{layout}.npz"
    result = invoke("weights", "export", case.net, "-w", weights or case.weights,
                    "--layer", case.layer, "--layout", layout, "-o", out)
    assert result.exit_code == 0, result.stderr
    with np.load(out) as data:
        return {name: data[name] for name in data.files}


def caffe_outputs(invoke, tmp_path: Path, case: Case) -> tuple[np.ndarray, np.ndarray]:
    """`run --original` on the case: the layer's input sequence as other frameworks take it
    (x_static joined to every step), and the layer's top."""
    with np.load(case.inputs) as data:
        feeds = {name: data[name] for name in data.files}
    wanted = [case.top] + ([] if case.x in feeds else [case.x])
    out = tmp_path / "caffe.npz"
    result = invoke("run", case.net, "-w", case.weights, "--original", "--outputs",
                    ",".join(wanted), "--inputs", case.inputs, "-o", out)
    assert result.exit_code == 0, result.stderr
    with np.load(out) as data:
        outs = {name: data[name] for name in data.files}
    x = feeds[case.x] if case.x in feeds else outs[case.x]
    steps, batch = x.shape[:2]
    x = x.reshape(steps, batch, -1)
    if case.static:
        x_static = feeds[case.static].reshape(batch, -1)
        x = np.concatenate([x, np.broadcast_to(x_static, (steps,) + x_static.shape)], axis=-1)
    return x.astype(np.float64), outs[case.top]


def _parse(path: Path) -> caffe_pb2.NetParameter:
    return caffe_pb2.NetParameter.FromString(path.read_bytes())


def _blob_array(blob) -> np.ndarray:
    return np.array(blob.data, np.float32).reshape(tuple(blob.shape.dim))


def _layer(net: caffe_pb2.NetParameter, name: str):
    return next(layer for layer in net.layer if layer.name == name)


# ---- the frameworks ---------------------------------------------------------------------------


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def _f64(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {name: array.astype(np.float64) for name, array in arrays.items()}


def torch_lstm(arrays: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """torch.nn.LSTM(I, H, proj_size=P) loading the arrays as its state_dict, strictly."""
    hidden = arrays["weight_hh_l0"].shape[0] // 4
    proj = arrays["weight_hr_l0"].shape[0] if "weight_hr_l0" in arrays else 0
    lstm = torch.nn.LSTM(x.shape[-1], hidden, proj_size=proj, dtype=torch.float64)
    lstm.load_state_dict({name: torch.from_numpy(a) for name, a in arrays.items()}, strict=True)
    with torch.no_grad():
        y, _ = lstm(torch.from_numpy(x))
    return y.numpy()


def onnx_lstm(arrays: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """An ONNX LSTM node (opset 14) with the arrays as initializers, run by onnxruntime."""
    from onnx import TensorProto, helper, numpy_helper

    steps, batch, _ = x.shape
    hidden = arrays["R"].shape[-1]
    names = ["X", "W", "R", "B"] + (["", "", "", "P"] if "P" in arrays else [])
    node = helper.make_node("LSTM", names, ["Y"], hidden_size=hidden)
    graph = helper.make_graph(
        [node], "lstm", [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [steps, 1, batch, hidden])],
        initializer=[numpy_helper.from_array(a, name) for name, a in arrays.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)],
                              ir_version=8)  # what onnxruntime of any recent version reads
    onnx.checker.check_model(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {"X": x.astype(np.float32)})
    return y[:, 0]  # (T, num_directions, N, H)


def keras_lstm(arrays: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """keras.layers.LSTM: z = x·kernel + h·recurrent_kernel + bias, split i, f, c, o."""
    a = _f64(arrays)
    h = c = np.zeros((x.shape[1], a["recurrent_kernel"].shape[0]))
    ys = []
    for x_t in x:
        i, f, g, o = np.split(x_t @ a["kernel"] + h @ a["recurrent_kernel"] + a["bias"], 4, 1)
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
        ys.append(h)
    return np.stack(ys)


def keras_cudnn_lstm(arrays: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """What cuDNN computes from a legacy CuDNNLSTM's weights (peers.md §1.6): gate k's input
    matrix is kernel[:, kH:(k+1)H] read in C order as (H, I), a reshape, not a transpose; its
    recurrent matrix is recurrent_kernel[:, kH:(k+1)H] as (H_out, H_in); both bias halves add.
    Gates i, f, c, o."""
    a = _f64(arrays)
    hidden = a["recurrent_kernel"].shape[0]
    cols = [slice(k * hidden, (k + 1) * hidden) for k in range(4)]
    w = [a["kernel"][:, col].reshape(hidden, -1) for col in cols]
    r = [a["recurrent_kernel"][:, col] for col in cols]
    b = [a["bias"][col] + a["bias"][4 * hidden:][col] for col in cols]
    h = c = np.zeros((x.shape[1], hidden))
    ys = []
    for x_t in x:
        i, f, g, o = (x_t @ w[k].T + h @ r[k].T + b[k] for k in range(4))
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
        ys.append(h)
    return np.stack(ys)


def cudnn_lstm(arrays: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """cuDNN's CUDNN_LSTM (peers.md §1.3): i = σ(W_i·x + R_i·r + b_Wi + b_Ri), f and o alike,
    c' = tanh(W_c·x + R_c·r + b_Wc + b_Rc); c = f·c + i·c'; h = o·tanh(c); the recurrent output
    r = W_proj·h with a projection (linLayerID 8), else h."""
    a = _f64(arrays)
    hidden = a["b_Wi"].shape[0]
    r = np.zeros((x.shape[1], a["W_proj"].shape[0] if "W_proj" in a else hidden))
    c = np.zeros((x.shape[1], hidden))
    ys = []
    for x_t in x:
        pre = {g: x_t @ a[f"W_{g}"].T + r @ a[f"R_{g}"].T + a[f"b_W{g}"] + a[f"b_R{g}"]
               for g in "ifco"}
        c = _sigmoid(pre["f"]) * c + _sigmoid(pre["i"]) * np.tanh(pre["c"])
        h = _sigmoid(pre["o"]) * np.tanh(c)
        r = h @ a["W_proj"].T if "W_proj" in a else h
        ys.append(r)
    return np.stack(ys)


def tf_lstm_cell(arrays: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """tf.compat.v1 LSTMCell(forget_bias=0.0) (peers.md §1.8): [i, j, f, o] =
    [x, m_prev]·kernel + bias; peepholes: i and f see c_prev, o the new c; m = σ(o)·tanh(c),
    then m·projection/kernel with num_proj."""
    a = _f64(arrays)
    hidden, forget_bias = a["bias"].shape[0] // 4, 0.0
    proj = a.get("projection/kernel")
    w_i, w_f, w_o = (a.get(name, np.zeros(hidden)) for name in ("w_i_diag", "w_f_diag",
                                                                "w_o_diag"))
    m = np.zeros((x.shape[1], hidden if proj is None else proj.shape[1]))
    c = np.zeros((x.shape[1], hidden))
    ys = []
    for x_t in x:
        i, j, f, o = np.split(np.concatenate([x_t, m], axis=1) @ a["kernel"] + a["bias"], 4, 1)
        c = _sigmoid(f + forget_bias + w_f * c) * c + _sigmoid(i + w_i * c) * np.tanh(j)
        m = _sigmoid(o + w_o * c) * np.tanh(c)
        if proj is not None:
            m = m @ proj
        ys.append(m)
    return np.stack(ys)


FRAMEWORKS = {"pytorch": torch_lstm, "onnx": onnx_lstm, "keras": keras_lstm,
              "keras-cudnn": keras_cudnn_lstm, "cudnn": cudnn_lstm, "tf": tf_lstm_cell}


# ---- export: the target framework reproduces Caffe ----------------------------------------------


def _check_framework(invoke, tmp_path: Path, case: Case, layout: str) -> None:
    arrays = export(invoke, tmp_path, case, layout)
    x, expected = caffe_outputs(invoke, tmp_path, case)
    got = FRAMEWORKS[layout](arrays, x)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("layout", list(FRAMEWORKS))
@pytest.mark.parametrize("case_name", PLAIN_CASES)
def test_framework_reproduces_caffe(invoke, tmp_path, case_name, layout):
    _check_framework(invoke, tmp_path, make_case(case_name, invoke, tmp_path), layout)


VARIANT_FRAMEWORK_CASES = [
    pytest.param(name, layout, marks=VARIANT_MARKS[name], id=f"{name}-{layout}")
    for name, layouts in (("peephole", ["onnx", "tf"]), ("projection", ["pytorch", "cudnn", "tf"]),
                          ("peephole-projection-static", ["tf"]))
    for layout in layouts
]


@pytest.mark.parametrize("case_name,layout", VARIANT_FRAMEWORK_CASES)
def test_framework_reproduces_caffe_variant(invoke, tmp_path, case_name, layout):
    """Peepholes: ORT's P and TF's w_*_diag; projection: torch proj_size, cuDNN, TF num_proj."""
    _check_framework(invoke, tmp_path, make_case(case_name, invoke, tmp_path), layout)


CAFFE_BLOB_NAMES = {  # the spec's blob order, by layer variant
    "small": ["W_xc", "b_c", "W_hc"],
    "small-static": ["W_xc", "b_c", "W_xc_static", "W_hc"],
    "captioner": ["W_xc", "b_c", "W_xc_static", "W_hc"],
    "fork": ["W_xc", "W_hc", "b_c"],  # the fork stores W_x, W_h, b
    "peephole": ["W_xc", "b_c", "W_hc", "P"],
    "peephole-projection-static": ["W_xc", "b_c", "W_xc_static", "W_hc", "P", "W_hr"],
}


@pytest.mark.parametrize("case_name", [
    pytest.param(name, marks=VARIANT_MARKS.get(name, [])) for name in CAFFE_BLOB_NAMES])
def test_caffe_layout_is_the_stored_blobs(invoke, tmp_path, case_name):
    """Caffe is its own target: the arrays are the caffemodel's blobs, named in the spec."""
    case = make_case(case_name, invoke, tmp_path)
    arrays = export(invoke, tmp_path, case, "caffe")
    stored = _layer(_parse(case.weights), case.layer)
    names = CAFFE_BLOB_NAMES[case_name]
    assert sorted(arrays) == sorted(names)
    for name, blob in zip(names, stored.blobs):
        assert arrays[name].tobytes() == _blob_array(blob).tobytes(), name
        assert arrays[name].shape == tuple(blob.shape.dim), name


# ---- import(export(w)) == w, bit for bit -----------------------------------------------------


#: The layouts that hold peepholes / a projection (every layout holds the plain cell).
HOLDS = {"peephole": {"caffe", "onnx", "tf"}, "projection": {"caffe", "pytorch", "cudnn", "tf"}}


def _layouts_for(case_name: str) -> list[str]:
    spec = VARIANT_SPECS.get(case_name, Spec())
    able = set(ALL_LAYOUTS)
    if spec.peephole:
        able &= HOLDS["peephole"]
    if spec.num_proj:
        able &= HOLDS["projection"]
    return [layout for layout in ALL_LAYOUTS if layout in able]


ROUND_TRIPS = [
    pytest.param(name, layout, marks=VARIANT_MARKS.get(name, []), id=f"{name}-{layout}")
    for name in PLAIN_CASES + list(VARIANT_SPECS) for layout in _layouts_for(name)
]


@pytest.mark.parametrize("case_name,layout", ROUND_TRIPS)
def test_import_of_export_is_bitwise_identity(invoke, tmp_path, case_name, layout):
    case = make_case(case_name, invoke, tmp_path)
    export(invoke, tmp_path, case, layout)
    new = tmp_path / "new.caffemodel"
    result = invoke("weights", "import", case.net, "-w", case.weights, "--layer", case.layer,
                    "--layout", layout, "--from", tmp_path / f"{layout}.npz", "-o", new)
    assert result.exit_code == 0, result.stderr
    before, after = _parse(case.weights), _parse(new)
    assert [(l.name, l.type) for l in after.layer] == [(l.name, l.type) for l in before.layer]
    for old, back in zip(before.layer, after.layer):
        assert [tuple(b.shape.dim) for b in back.blobs] == [tuple(b.shape.dim) for b in old.blobs]
        for k, (b_old, b_back) in enumerate(zip(old.blobs, back.blobs)):
            assert _blob_array(b_back).tobytes() == _blob_array(b_old).tobytes(), (old.name, k)
    # and through the CLI once more: the caffe layout of the new file is the original's
    original = export(invoke, tmp_path, case, "caffe")
    again = export(invoke, tmp_path, case, "caffe", weights=new)
    assert {n: a.tobytes() for n, a in again.items()} == {n: a.tobytes()
                                                          for n, a in original.items()}


def test_small_nets_do_hold_negative_zeros(invoke, tmp_path):
    """The bitwise round trip above is only meaningful if the bias has -0.0 in it."""
    case = make_case("small", invoke, tmp_path)
    bias = _blob_array(_layer(_parse(case.weights), "lstm1").blobs[1])
    assert np.any((bias == 0) & np.signbit(bias))


# ---- import writes a faithful copy of the caffemodel ------------------------------------------


def _legacy_blob(array: np.ndarray) -> caffe_pb2.BlobProto:
    """A pre-2015 blob: num, channels, height, width instead of a shape."""
    dims = (1,) * (4 - array.ndim) + array.shape
    return caffe_pb2.BlobProto(num=dims[0], channels=dims[1], height=dims[2], width=dims[3],
                               data=array.ravel().tolist())


def test_import_replaces_one_layer_and_keeps_every_other(invoke, tmp_path):
    """Layers keep their order, names and types (a TRAIN-only layer's from the prototxt), legacy
    4-D blobs of the net's layers get the net's shapes, and a layer the net lacks stays as is."""
    spec = Spec()
    case = small_case(invoke, tmp_path, spec)
    rng = np.random.default_rng(3)
    h4, i = 4 * spec.hidden, spec.inputs
    old = {"lstm1": [rng.normal(size=s).astype(np.float32) for s in ((h4, i), (h4,),
                                                                      (h4, spec.hidden))],
           "ip": [rng.normal(size=s).astype(np.float32) for s in ((2, spec.hidden), (2,))],
           "train_ip": [rng.normal(size=s).astype(np.float32) for s in ((3, spec.hidden), (3,))],
           "orphan": [rng.normal(size=(2, 3)).astype(np.float32)]}
    original = caffe_pb2.NetParameter(name="small")
    original.layer.add(name="input", type="Input")
    original.layer.add(name="lstm1", type="LSTM").blobs.extend(map(_legacy_blob, old["lstm1"]))
    original.layer.add(name="ip", type="InnerProduct").blobs.extend(map(_legacy_blob, old["ip"]))
    for name, layer_type in (("train_ip", "InnerProduct"), ("orphan", "Convolution")):
        layer = original.layer.add(name=name, type=layer_type)
        for array in old[name]:
            layer.blobs.add(data=array.ravel().tolist()).shape.dim.extend(array.shape)
    weights = tmp_path / "legacy.caffemodel"
    weights.write_bytes(original.SerializeToString())

    export(invoke, tmp_path, case, "pytorch")  # lstm1 of the init'ed weights
    new = tmp_path / "new.caffemodel"
    result = invoke("weights", "import", case.net, "-w", weights, "--layer", "lstm1",
                    "--layout", "pytorch", "--from", tmp_path / "pytorch.npz", "-o", new)
    assert result.exit_code == 0, result.stderr
    net = _parse(new)
    assert [layer.name for layer in net.layer] == ["input", "lstm1", "ip", "train_ip", "orphan"]
    assert [layer.type for layer in net.layer][:4] == ["Input", "LSTM", "InnerProduct",
                                                       "InnerProduct"]
    wanted = _layer(_parse(case.weights), "lstm1").blobs
    assert [_blob_array(b).tobytes() for b in _layer(net, "lstm1").blobs] == [
        _blob_array(b).tobytes() for b in wanted]
    for name in ("ip", "train_ip", "orphan"):
        blobs = _layer(net, name).blobs
        assert [tuple(b.shape.dim) for b in blobs] == [a.shape for a in old[name]], name
        for blob, array in zip(blobs, old[name]):
            np.testing.assert_array_equal(_blob_array(blob), array)
    assert not any(b.HasField("num") for layer in net.layer for b in layer.blobs)
    result = invoke("run", case.net, "-w", new, "--inputs", case.inputs)
    assert result.exit_code == 0, result.stderr


def test_import_into_another_weights_file_changes_only_that_layer(invoke, tmp_path):
    """Weights from one file (seed 7) imported into another (seed 8): the layer's outputs follow
    the imported weights, the InnerProduct on top keeps its own."""
    case = small_case(invoke, tmp_path, Spec())
    other = tmp_path / "other"
    other.mkdir()
    target = small_case(invoke, other, Spec(), seed=8)
    export(invoke, tmp_path, case, "keras")
    new = tmp_path / "new.caffemodel"
    result = invoke("weights", "import", case.net, "-w", target.weights, "--layer", "lstm1",
                    "--layout", "keras", "--from", tmp_path / "keras.npz", "-o", new)
    assert result.exit_code == 0, result.stderr
    source, base, mixed = _parse(case.weights), _parse(target.weights), _parse(new)
    for name, expected in (("lstm1", source), ("ip", base)):
        got = [_blob_array(b).tobytes() for b in _layer(mixed, name).blobs]
        assert got == [_blob_array(b).tobytes() for b in _layer(expected, name).blobs], name
    assert _blob_array(_layer(source, "ip").blobs[0]).tobytes() != _blob_array(
        _layer(mixed, "ip").blobs[0]).tobytes()


def test_import_adds_the_layer_when_the_caffemodel_lacks_it(invoke, tmp_path):
    case = small_case(invoke, tmp_path, Spec())
    export(invoke, tmp_path, case, "onnx")
    only_ip = tmp_path / "ip_only.caffemodel"
    ip = _layer(_parse(case.weights), "ip")
    write_caffemodel(only_ip, [("ip", "InnerProduct", [_blob_array(b) for b in ip.blobs])])
    new = tmp_path / "new.caffemodel"
    result = invoke("weights", "import", case.net, "-w", only_ip, "--layer", "lstm1",
                    "--layout", "onnx", "--from", tmp_path / "onnx.npz", "-o", new)
    assert result.exit_code == 0, result.stderr
    assert [(layer.name, layer.type) for layer in _parse(new).layer] == [
        ("ip", "InnerProduct"), ("lstm1", "LSTM")]
    assert sorted(_shapes(new)) == sorted(_shapes(case.weights))
    result = invoke("run", case.net, "-w", new, "--inputs", case.inputs)
    assert result.exit_code == 0, result.stderr


# ---- errors: one line, exit 1, no output file -------------------------------------------------


def _assert_one_error(result, *needles: str) -> None:
    assert result.exit_code == 1, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_export_errors_name_the_layer(invoke, tmp_path):
    case = small_case(invoke, tmp_path, Spec())
    out = tmp_path / "out.npz"
    base = ("weights", "export", case.net, "-w", case.weights, "--layout", "pytorch", "-o", out)
    _assert_one_error(invoke(*base, "--layer", "nope"), "no LSTM layer named 'nope'",
                      "the LSTM layers of this net: lstm1")
    _assert_one_error(invoke(*base, "--layer", "ip"), "must name an LSTM layer",
                      "layer 'ip' (InnerProduct)", "lstm1")
    only_ip = tmp_path / "ip_only.caffemodel"
    ip = _layer(_parse(case.weights), "ip")
    write_caffemodel(only_ip, [("ip", "InnerProduct", [_blob_array(b) for b in ip.blobs])])
    result = invoke("weights", "export", case.net, "-w", only_ip, "--layout", "tf",
                    "--layer", "lstm1", "-o", out)
    _assert_one_error(result, "no weights for this layer", "layer 'lstm1' (LSTM)")
    assert not out.exists()


def _bad_arrays(arrays: dict[str, np.ndarray]) -> dict[str, tuple[dict, tuple[str, ...]]]:
    """name -> (arrays for --from, what the error must say), from a good pytorch export."""
    without = {k: v for k, v in arrays.items() if k != "bias_hh_l0"}
    transposed = {**arrays, "weight_ih_l0": arrays["weight_ih_l0"].T}
    return {
        "missing": (without, ("missing bias_hh_l0", "bias_hh_l0 (16,)")),
        "extra": ({**arrays, "weight_ih_l1": arrays["weight_ih_l0"]},
                  ("unexpected weight_ih_l1",)),
        "mis-shaped": (transposed, ("weight_ih_l0 has shape (5, 16), expected (16, 5)",)),
        "not numbers": ({**arrays, "bias_ih_l0": np.array(["a"] * 16)},
                        ("bias_ih_l0 holds <U1 values",)),
    }


@pytest.mark.parametrize("problem", ["missing", "extra", "mis-shaped", "not numbers"])
def test_import_rejects_arrays_that_do_not_fit(invoke, tmp_path, problem):
    case = small_case(invoke, tmp_path, Spec())
    arrays, needles = _bad_arrays(export(invoke, tmp_path, case, "pytorch"))[problem]
    bad, new = tmp_path / "bad.npz", tmp_path / "new.caffemodel"
    np.savez(bad, **arrays)
    result = invoke("weights", "import", case.net, "-w", case.weights, "--layer", "lstm1",
                    "--layout", "pytorch", "--from", bad, "-o", new)
    _assert_one_error(result, "layer 'lstm1' (LSTM)", "do not fit layout 'pytorch'", *needles)
    assert not new.exists()


def test_import_of_another_layouts_arrays_says_what_is_expected(invoke, tmp_path):
    """keras arrays given as keras-cudnn: same names, but CuDNNLSTM's bias is 8H."""
    case = small_case(invoke, tmp_path, Spec())
    export(invoke, tmp_path, case, "keras")
    result = invoke("weights", "import", case.net, "-w", case.weights, "--layer", "lstm1",
                    "--layout", "keras-cudnn", "--from", tmp_path / "keras.npz",
                    "-o", tmp_path / "new.caffemodel")
    _assert_one_error(result, "bias has shape (16,), expected (32,)")


@pytest.mark.parametrize("case_name,layout,needle,able", [
    pytest.param("peephole", "pytorch", "peephole connections", "caffe, onnx, tf",
                 marks=NEEDS_PEEPHOLE),
    pytest.param("peephole", "keras-cudnn", "peephole connections", "caffe, onnx, tf",
                 marks=NEEDS_PEEPHOLE),
    pytest.param("projection", "onnx", "recurrent projection", "caffe, pytorch, cudnn, tf",
                 marks=NEEDS_PROJECTION),
    pytest.param("projection", "keras", "recurrent projection", "caffe, pytorch, cudnn, tf",
                 marks=NEEDS_PROJECTION),
    pytest.param("peephole-projection-static", "cudnn", "peephole connections", "caffe, tf",
                 marks=[NEEDS_PEEPHOLE, NEEDS_PROJECTION]),
])
def test_variant_into_a_layout_without_it_is_refused(invoke, tmp_path, case_name, layout,
                                                     needle, able):
    """Both directions: export refuses, and import refuses (before reading the arrays)."""
    case = make_case(case_name, invoke, tmp_path)
    out = tmp_path / "out.npz"
    result = invoke("weights", "export", case.net, "-w", case.weights, "--layer", "lstm1",
                    "--layout", layout, "-o", out)
    _assert_one_error(result, f"layout '{layout}' has no place for the layer's {needle}",
                      "layer 'lstm1' (LSTM)", able)
    export(invoke, tmp_path, case, "caffe")
    result = invoke("weights", "import", case.net, "-w", case.weights, "--layer", "lstm1",
                    "--layout", layout, "--from", tmp_path / "caffe.npz", "-o", out)
    _assert_one_error(result, needle, "layer 'lstm1' (LSTM)")
    assert not out.exists()


def test_errors_print_no_traceback(tmp_path):
    net, weights = sample("seq_classifier")
    proc = subprocess.run(
        [sys.executable, "-m", "caffe_lstm", "weights", "export", net, "-w", weights,
         "--layer", "classifier", "--layout", "onnx", "-o", tmp_path / "o.npz"],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "layer 'classifier' (InnerProduct)" in proc.stderr


# ---- init -------------------------------------------------------------------------------------


def _shapes(path: Path) -> list[tuple[str, list[tuple[int, ...]]]]:
    return [(layer.name, [tuple(b.shape.dim) for b in layer.blobs]) for layer in _parse(path).layer
            if layer.blobs]


@pytest.mark.parametrize("name", ["seq_classifier", "captioner"])
def test_init_gives_weights_that_run_accepts(invoke, tmp_path, name):
    net, trained = sample(name)
    paths = [tmp_path / f"w{k}.caffemodel" for k in range(3)]
    for path, seed in zip(paths, (3, 3, 4)):
        result = invoke("weights", "init", net, "-o", path, "--seed", seed)
        assert result.exit_code == 0, result.stderr
    assert paths[0].read_bytes() == paths[1].read_bytes()
    assert paths[0].read_bytes() != paths[2].read_bytes()
    assert _shapes(paths[0]) == _shapes(trained)
    for flags in ((), ("--original",)):
        out = tmp_path / "out.npz"
        result = invoke("run", net, "-w", paths[0], "-o", out, *flags)
        assert result.exit_code == 0, result.stderr
        with np.load(out) as data:
            assert np.all(np.isfinite(data["probs"]))


@needs_corpus()
@pytest.mark.parametrize("relative", [
    "junhyukoh__caffe-lstm/examples__lstm_sequence__deep_lstm_short.prototxt",
    "jeffdonahue__caffe-1/examples__coco_caption__lstm_lm.deploy.prototxt",
])
def test_init_gives_weights_for_a_corpus_deploy_net(invoke, tmp_path, relative):
    net, weights = CORPUS / relative, tmp_path / "w.caffemodel"
    result = invoke("weights", "init", net, "-o", weights)
    assert result.exit_code == 0, result.stderr
    result = invoke("run", net, "-w", weights, "-o", tmp_path / "out.npz")
    assert result.exit_code == 0, result.stderr


def test_init_gives_weights_for_a_rewritten_net_with_loops(invoke, tmp_path):
    net, _ = sample("captioner")
    result = invoke("rewrite", net, "-o", tmp_path / "rw")
    assert result.exit_code == 0, result.stderr
    rewritten, weights = tmp_path / "rw" / "captioner.prototxt", tmp_path / "w.caffemodel"
    assert invoke("weights", "init", rewritten, "-o", weights).exit_code == 0
    result = invoke("run", rewritten, "-w", weights)
    assert result.exit_code == 0, result.stderr
