"""The second route to an engine (``convert --via onnx``: TensorRT's OnnxParser reads our ONNX
export) and the parser cross-check on the samples."""

from __future__ import annotations

import numpy as np
import pytest

import caffe_lstm
from tests.helpers import assert_parser_matches_onnxruntime, run_cli, sample

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("tensorrt_rtx_bindings")

SAMPLES = ["captioner", "deepspeech_relu", "seq_classifier"]


@pytest.mark.parametrize("name", SAMPLES)
def test_convert_via_onnx_builds_an_engine(tmp_path, name):
    net, weights = sample(name)
    engine = tmp_path / f"{name}.engine"
    result = run_cli("convert", net, "-w", weights, "-o", engine, "--via", "onnx",
                     "--state", "zero")
    assert result.returncode == 0, result.stderr
    assert engine.stat().st_size > 0
    assert "tensorrt-rtx" in result.stdout


def test_convert_via_onnx_with_dynamic_time_and_batch(tmp_path):
    net, weights = sample("seq_classifier")
    loaded = caffe_lstm.load(net, weights)
    shapes = [f"--shape={name}:" + ":".join("x".join(str(d) for d in dims)
                                             for dims in _range(shape))
              for name, shape in loaded.inputs.items()]
    engine = tmp_path / "dynamic.engine"
    result = run_cli("convert", net, "-w", weights, "-o", engine, "--via", "onnx",
                     "--state", "zero", *shapes)
    assert result.returncode == 0, result.stderr
    assert engine.stat().st_size > 0


def _range(shape):
    """T and N from 1 to twice the prototxt's."""
    low = (1, 1) + tuple(shape[2:])
    high = (2 * shape[0], 2 * shape[1]) + tuple(shape[2:])
    return low, tuple(shape), high


def test_fp16_via_onnx_is_refused_in_one_line(tmp_path):
    net, weights = sample("seq_classifier")
    engine = tmp_path / "x.engine"
    result = run_cli("convert", net, "-w", weights, "-o", engine, "--via", "onnx", "--fp16")
    assert result.returncode == 1
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert "--via caffe-lstm" in result.stderr
    assert not engine.exists()


@pytest.mark.parametrize("name", SAMPLES)
@pytest.mark.parametrize("state", ["zero", "io"])
def test_parser_network_matches_onnxruntime(name, state):
    """TensorRT's parser builds each sample's exported network; our evaluator on it equals
    onnxruntime."""
    net = caffe_lstm.load(*sample(name))
    exported = net.export_onnx(None, state=state)
    stated = net.with_state_io() if state == "io" else net
    feeds = stated.random_inputs(seed=5)
    for key in [k for k in feeds if k.endswith(("/h_0", "/c_0"))]:
        feeds[key] = np.random.default_rng(6).standard_normal(feeds[key].shape) \
            .astype(np.float32)
    assert_parser_matches_onnxruntime(exported.model, feeds)
