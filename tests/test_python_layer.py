"""Caffe's Python layer run with numpy through the pycaffe shim: samples/python_layer (an LSTM
tagger ending in layers/softmax_argmax.py) runs and verifies with --python-path and equals
torch; TensorRT and ONNX refuse the layer naming plugins and --outputs, and the same net
converts with --outputs cutting it off; user code is imported only when asked; a failing
Python layer is one line naming its class, file and line."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import caffe_lstm
from caffe_lstm.frontend.caffemodel import read_caffemodel
from tests.helpers import SAMPLES, assert_one_error_line, run_cli, torch_lstm

FOLDER = SAMPLES / "python_layer"
NET, WEIGHTS, LAYERS = (FOLDER / "python_layer.prototxt", FOLDER / "python_layer.caffemodel",
                        FOLDER / "layers")


def inputs(path: Path, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    cont = np.ones((5, 2), np.float32)
    cont[0] = 0
    arrays = {"data": rng.standard_normal((5, 2, 4)).astype(np.float32), "cont": cont}
    np.savez(path, **arrays)
    return arrays


def reference(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """torch.nn.LSTM, the InnerProduct, then softmax(scores / 0.5) and argmax over the
    classes (the param_str's temperature and axis) in torch."""
    torch = pytest.importorskip("torch")
    layers = {layer.name: [b.data.reshape(b.shape) for b in layer.blobs]
              for layer in read_caffemodel(WEIGHTS)}
    hidden, _, _ = torch_lstm(arrays["data"], *layers["lstm1"])
    weight, bias = layers["scores"]
    scores = torch.from_numpy(hidden @ weight.T.astype(np.float64) + bias) / 0.5
    return {"probs": torch.softmax(scores, dim=2).numpy(),
            "labels": scores.argmax(dim=2).double().numpy()}


def test_run_with_python_path_equals_torch(tmp_path):
    arrays, out = inputs(tmp_path / "in.npz"), tmp_path / "out.npz"
    done = run_cli("run", NET, "-w", WEIGHTS, "--python-path", LAYERS,
                   "--inputs", tmp_path / "in.npz", "-o", out)
    assert done.returncode == 0, done.stderr
    want = reference(arrays)
    with np.load(out) as got:
        np.testing.assert_allclose(got["probs"], want["probs"], rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(got["labels"], want["labels"])


def test_verify_checks_numpy_and_notes_why_not_tensorrt(tmp_path):
    inputs(tmp_path / "in.npz", seed=1)
    done = run_cli("verify", NET, "-w", WEIGHTS, "--python-path", LAYERS,
                   "--inputs", tmp_path / "in.npz")
    assert done.returncode == 0, done.stderr
    assert "original equations vs rewritten graph (numpy)" in done.stdout
    assert "MISMATCH" not in done.stdout and "labels" in done.stdout
    if "TensorRT network is not checked" in done.stdout:  # with TensorRT installed
        assert "--plugin FILE.py|MODULE" in done.stdout and "--outputs" in done.stdout


def test_tensorrt_and_onnx_refuse_it_naming_plugins_and_outputs(tmp_path):
    pytest.importorskip("tensorrt_rtx_bindings")
    engine, model = tmp_path / "t.engine", tmp_path / "t.onnx"
    for command, target in (("convert", engine), ("export", model)):
        extra = ("--runtime", "tensorrt-rtx") if command == "convert" else ()
        line = assert_one_error_line(run_cli(command, NET, "-w", WEIGHTS, "--python-path", LAYERS,
                                             "-o", target, *extra))
        assert "Python (decode): a Python layer runs Python code" in line
        assert "--plugin FILE.py|MODULE" in line and "--outputs NAME[,NAME...]" in line
        assert not target.exists()
    done = run_cli("convert", NET, "-w", WEIGHTS, "--outputs", "scores", "-o", engine,
                   "--runtime", "tensorrt-rtx")
    assert done.returncode == 0 and engine.stat().st_size > 0, done.stderr


def test_user_code_is_imported_only_when_asked(tmp_path):
    """Without --python-path the module is never imported (it would leave a marker file)."""
    marker = tmp_path / "imported"
    (tmp_path / "marking.py").write_text(
        f"import caffe\nopen({str(marker)!r}, 'w').close()\n"
        "class Layer(caffe.Layer):\n"
        "    def reshape(self, bottom, top):\n        top[0].reshape(*bottom[0].shape)\n")
    net = tmp_path / "net.prototxt"
    net.write_text(NET.read_text().replace('module: "softmax_argmax"', 'module: "marking"')
                   .replace('layer: "SoftmaxArgmax"', 'layer: "Layer"')
                   .replace('top: "labels"\n', ""))
    line = assert_one_error_line(run_cli("inspect", net))
    assert "unsupported layer types: Python (decode)" in line and "--python-path DIR" in line
    assert not marker.exists()
    done = run_cli("inspect", net, "--python-path", tmp_path)
    assert done.returncode == 0 and marker.exists(), done.stderr


FAILING = '''import caffe


class Broken(caffe.Layer):
    def reshape(self, bottom, top):
        top[0].reshape(*bottom[0].shape)

    def forward(self, bottom, top):
        top[0].data[...] = bottom[0].data[:, :, 99]
'''


@pytest.mark.parametrize("module, layer, expected", [
    ("broken", "Broken", "the Python layer class broken.Broken failed in forward: IndexError"),
    ("broken", "Absent", "module broken ({dir}/broken.py) has no class Absent"),
    ("nowhere", "Layer", "cannot import the Python layer's module nowhere: ModuleNotFoundError"),
])
def test_a_failing_python_layer_is_one_line(tmp_path, module, layer, expected):
    (tmp_path / "broken.py").write_text(FAILING)
    net = tmp_path / "net.prototxt"
    net.write_text(NET.read_text().replace('module: "softmax_argmax"', f'module: "{module}"')
                   .replace('layer: "SoftmaxArgmax"', f'layer: "{layer}"')
                   .replace('top: "labels"\n', ""))
    out = tmp_path / "out.npz"
    line = assert_one_error_line(run_cli("run", net, "-w", WEIGHTS, "--python-path", tmp_path,
                                         "-o", out))
    assert expected.format(dir=tmp_path) in line, line
    assert "layer 'decode' (Python)" in line and not out.exists()
    if layer == "Broken":
        assert f"{tmp_path}/broken.py:9, in forward" in line


def test_the_api_runs_it_and_leaves_caffe_unshimmed():
    before = sys.modules.get("caffe")
    net = caffe_lstm.load(NET, WEIGHTS, python_path=LAYERS)
    got = net.run(seed=3)
    assert got["probs"].shape == (5, 2, 3) and got["labels"].shape == (5, 2)
    np.testing.assert_allclose(got["probs"].sum(axis=2), 1, rtol=1e-6)
    np.testing.assert_array_equal(got["labels"], got["probs"].argmax(axis=2))
    assert sys.modules.get("caffe") is before


def test_rewrite_writes_the_python_layer_back(tmp_path):
    done = run_cli("rewrite", NET, "-w", WEIGHTS, "--python-path", LAYERS, "-o", tmp_path)
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "python_layer.prototxt").read_text()
    assert 'module: "softmax_argmax"' in text and 'layer: "SoftmaxArgmax"' in text
    assert "temperature" in text and "python_path" not in text
    done = run_cli("run", tmp_path / "python_layer.prototxt", "-w",
                   tmp_path / "python_layer.caffemodel", "--python-path", LAYERS)
    assert done.returncode == 0, done.stderr
