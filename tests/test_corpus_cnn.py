"""The corpus nets with CNN front ends and fork layers go through: shapes, post-processing cut
off with --outputs, and the two small OCR nets run with numpy and emitted for TensorRT."""

from __future__ import annotations

import json

import numpy as np
import pytest

from caffe_lstm.frontend.caffe_writer import write_caffemodel
from caffe_lstm.frontend.loader import load_net
from caffe_lstm.passes import run_passes
from caffe_lstm.synthetic import synthetic_weights
from tests.helpers import corpus_files, needs_corpus, random_feeds

pytestmark = needs_corpus()


def corpus(name: str):
    return next(p for p in corpus_files() if p.name == name)


@pytest.mark.parametrize("name, outputs, expected", [
    ("examples__crnn__deploy.prototxt", None, {"probs": [13, 1, 11]}),
    ("examples__warpctc_captcha__deploy.prototxt", None, {"premuted_fc": [1, 80, 11]}),
    ("examples__LRCN_activity_recognition__deploy_lstm.prototxt", None, {"probs": [16, 10, 101]}),
    ("examples__ocr__inception-bn__deploy.prototxt", "fc1x5990", {"fc1x5990": [35, 1, 5990]}),
    # the CTCGreedyDecoder's top: per image the decoded labels, padded with -1
    ("examples__ocr__inception-bn__deploy.prototxt", None, {"result": [1, 35, 1, 1]}),
    ("examples__ocr__densenet__densenet-res-blstm_deploy.prototxt", None,
     {"result": [1, 35, 1, 1]}),
    ("models__deploy.prototxt", "rpn_cls_prob_reshape,rpn_bbox_pred",
     {"rpn_cls_prob_reshape": [1, 20, 38, 57], "rpn_bbox_pred": [1, 20, 38, 57]}),
])
def test_cnn_corpus_shapes(invoke, name, outputs, expected):
    args = ["inspect", corpus(name), "--json"] + (["--outputs", outputs] if outputs else [])
    result = invoke(*args)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["outputs"] == expected


def test_densenet_blocks_are_expanded_into_primitive_layers(invoke):
    densenet = corpus("examples__ocr__densenet__densenet-res-blstm_deploy.prototxt")
    result = invoke("inspect", densenet, "--outputs", "fc1x", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["outputs"] == {"fc1x": [35, 1, 5990]}
    graph = run_passes(load_net(densenet, outputs=["fc1x"]).graph)
    assert "DenseBlock" not in {node.op for node in graph.nodes}
    # 3 blocks of 8 transitions: BatchNorm, Scale, ReLU, Convolution, Concat each
    assert sum(node.name.startswith("__DenseBlock") for node in graph.nodes) == 3 * 8 * 5


def weighted(tmp_path, name: str):
    """The corpus net with synthetic weights; BatchNorm variances made positive (uniform
    synthetic values would include negative variances, which give NaN as in Caffe)."""
    path, weights = corpus(name), tmp_path / "net.caffemodel"
    layers = synthetic_weights(load_net(path).graph, seed=1)
    for _, op, blobs in layers:
        if op == "BatchNorm":
            blobs[1] = np.abs(blobs[1]) + np.float32(0.5)
            blobs[2] = np.ones(1, np.float32)
    write_caffemodel(weights, layers)
    return path, weights


@pytest.mark.parametrize("name", ["examples__crnn__deploy.prototxt",
                                  "examples__warpctc_captcha__deploy.prototxt"])
def test_ocr_net_runs_and_its_tensorrt_network_matches(tmp_path, invoke, name):
    path, weights = weighted(tmp_path, name)
    out = tmp_path / "out.npz"
    result = invoke("run", path, "-w", weights, "-o", out)
    assert result.exit_code == 0, result.stderr
    with np.load(out) as data:
        assert all(np.isfinite(a).all() for a in data.values())
    pytest.importorskip("tensorrt_rtx_bindings")
    from caffe_lstm.backends.numpy_exec import NumpyExecutor
    from caffe_lstm.backends.tensorrt.build import BuildOptions, emit
    from caffe_lstm.backends.tensorrt.network_eval import evaluate_network
    from caffe_lstm.backends.tensorrt.runtime import load_runtime
    from caffe_lstm.passes import run_passes
    runtime = load_runtime("tensorrt-rtx")
    graph = run_passes(load_net(path, weights).graph)
    feeds = random_feeds(graph, 2)
    _, network, _ = emit(runtime, graph, BuildOptions())
    got, expected = evaluate_network(runtime.trt, network, feeds), NumpyExecutor(graph).run(feeds)
    # a whole float32 CNN + LSTM stack: the two walks sum each convolution in another order
    # (up to 4608 terms), hence 1e-4 rather than the 1e-5 of the one-layer family nets
    for name, want in expected.items():
        np.testing.assert_allclose(got[name], want, rtol=1e-4, atol=1e-4, err_msg=name)
