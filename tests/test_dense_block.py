"""caffe_ocr's DenseBlock: the direct computation against torch, the blob layout of the fork, and
the expansion against the same block written out as primitive layers, through the CLI."""

from __future__ import annotations

import numpy as np
import pytest

from caffe_lstm.errors import ShapeError
from caffe_lstm.frontend.caffe_writer import write_caffemodel
from caffe_lstm.frontend.loader import load_net
from caffe_lstm.frontend.params import to_params
from caffe_lstm.ops import get_op
from caffe_lstm.ops.conv import parse_conv_param
from caffe_lstm.ops.dense_block import EPS, _conv_attrs
from caffe_lstm.passes import run_passes
from caffe_lstm.proto import caffe_pb2
from tests.helpers import corpus_files, make_node, needs_corpus, run_op


def _attrs(n: int, growth: int, bottleneck: bool = False) -> dict:
    return {"numTransition": n, "initChannel": 16, "growthRate": growth, "use_BC": bottleneck,
            "use_dropout": False, "dropout_amount": 0.0}


def _blobs(n: int, growth: int, channels: int, bottleneck: bool, seed: int) -> list[np.ndarray]:
    """Random blobs in the fork's order and shapes (variances and γ > 0)."""
    node = make_node("DenseBlock", _attrs(n, growth, bottleneck), [(1, channels, 5, 5)])
    rng = np.random.default_rng(seed)
    blobs = get_op("DenseBlock").synthetic(node, rng, 0.5)
    # the factor as a GPU-trained model leaves it: 0 (unused at inference)
    return [np.asarray(b, np.float32) for b in blobs[:-1]] + [np.zeros(1, np.float32)]


# ---- the direct computation against torch -----------------------------------------------------


def _torch_block(x, blobs, n, bottleneck):
    """torch: batch_norm (eval) + relu + conv2d with the kernel flipped (the fork's
    CUDNN_CONVOLUTION is a true convolution; conv2d is a cross-correlation) + cat."""
    torch = pytest.importorskip("torch")
    f = torch.nn.functional
    t = [torch.from_numpy(np.asarray(b, np.float64)) for b in blobs]
    groups = 10 if bottleneck else 5
    w = {k: t[k * n:(k + 1) * n] for k in range(groups)}

    def bn_relu(y, base, i):
        scaler, bias, mean, var = (w[base + k][i].reshape(-1) for k in (1, 2, 3, 4))
        return f.relu(f.batch_norm(y, mean, var, scaler, bias, training=False, eps=EPS))

    features = torch.from_numpy(np.asarray(x, np.float64))
    for i in range(n):
        y = bn_relu(features, 0, i)
        if bottleneck:
            y = bn_relu(f.conv2d(y, torch.flip(w[5][i], (2, 3))), 5, i)
        features = torch.cat([features, f.conv2d(y, torch.flip(w[0][i], (2, 3)), padding=1)], 1)
    return features.numpy()


@pytest.mark.parametrize("bottleneck", [False, True], ids=["plain", "use_BC"])
def test_direct_computation_matches_torch(bottleneck):
    n, growth, channels = 3, 4, 5
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, channels, 6, 7)).astype(np.float32)
    blobs = _blobs(n, growth, channels, bottleneck, seed=3)
    (y,) = run_op("DenseBlock", _attrs(n, growth, bottleneck), [x], blobs)
    assert y.shape == (2, channels + n * growth, 6, 7)
    np.testing.assert_allclose(y, _torch_block(x, blobs, n, bottleneck), atol=1e-5, rtol=1e-5)
    np.testing.assert_array_equal(y[:, :channels], x)  # the block's input is passed on


def test_the_factor_blob_is_not_used():
    """The fork's GPU inference reads μ, σ² as stored, whatever the factor."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(1, 3, 4, 4)).astype(np.float32)
    blobs = _blobs(2, 2, 3, False, seed=5)
    (zero,) = run_op("DenseBlock", _attrs(2, 2), [x], blobs[:-1] + [np.array([0.0])])
    (seven,) = run_op("DenseBlock", _attrs(2, 2), [x], blobs[:-1] + [np.array([7.0])])
    np.testing.assert_array_equal(zero, seven)


def test_blob_layout_is_the_forks():
    # n = 2, G = 3, C_0 = 4, use_BC: filters (G, 4G, 3, 3), then γ, β, μ, σ² of C_i = 4, 7,
    # then the 1×1 filters (4G, C_i, 1, 1), γ', β', μ', σ'² of 4G, then the factor
    node = make_node("DenseBlock", _attrs(2, 3, True), [(1, 4, 5, 5)])
    blobs = get_op("DenseBlock").blobs(None, node, (1, 4, 5, 5))
    quad = (1, 12, 1, 1)
    assert blobs == (
        ("filter_0", (3, 12, 3, 3)), ("filter_1", (3, 12, 3, 3)),
        ("scaler_0", (1, 4, 1, 1)), ("scaler_1", (1, 7, 1, 1)),
        ("bias_0", (1, 4, 1, 1)), ("bias_1", (1, 7, 1, 1)),
        ("mean_0", (1, 4, 1, 1)), ("mean_1", (1, 7, 1, 1)),
        ("variance_0", (1, 4, 1, 1)), ("variance_1", (1, 7, 1, 1)),
        ("bc_filter_0", (12, 4, 1, 1)), ("bc_filter_1", (12, 7, 1, 1)),
        ("bc_scaler_0", quad), ("bc_scaler_1", quad), ("bc_bias_0", quad), ("bc_bias_1", quad),
        ("bc_mean_0", quad), ("bc_mean_1", quad), ("bc_variance_0", quad),
        ("bc_variance_1", quad), ("factor", (1,)))
    plain = get_op("DenseBlock").blobs(None, make_node("DenseBlock", _attrs(2, 3), [(1, 4, 5, 5)]),
                                       (1, 4, 5, 5))
    assert [name for name, _ in plain][:2] == ["filter_0", "filter_1"]
    assert plain[1][1] == (3, 7, 3, 3) and len(plain) == 5 * 2 + 1


@pytest.mark.parametrize("attrs, shape, message", [
    (_attrs(2, 3), (1, 4, 5), r"must be \(N, C, H, W\)"),
    (_attrs(0, 3), (1, 4, 5, 5), "numTransition 0"),
])
def test_bad_blocks_are_refused(attrs, shape, message):
    with pytest.raises(ShapeError, match=message):
        get_op("DenseBlock").infer(None, make_node("DenseBlock", attrs, [shape]), shape)


def test_conv_attrs_are_what_parse_conv_param_makes():
    written = caffe_pb2.ConvolutionParameter(num_output=8, bias_term=False, kernel_size=[3],
                                             pad=[1], stride=[1], dilation=[1])
    assert _conv_attrs(8, 3) == parse_conv_param(None, to_params(written))


# ---- the expansion against the block written out as primitive layers ------------------------

BLOCK_NET = """
input: "x" input_shape {{ dim: 2 dim: {channels} dim: 6 dim: 7 }}
layer {{ name: "block" type: "DenseBlock" bottom: "x" top: "y"
         denseblock_param {{ numTransition: {n} growthRate: {growth} use_BC: {bc}
                             use_dropout: true dropout_amount: 0.2 }} }}
"""


def _layer(name, kind, bottoms, top, param=""):
    wiring = " ".join(f'bottom: "{b}"' for b in bottoms)
    return f'layer {{ name: "{name}" type: "{kind}" {wiring} top: "{top}" {param} }}'


def _bn_relu_layers(tag, i, bottom):
    return [_layer(f"{tag}bn_{i}", "BatchNorm", [bottom], f"{tag}bn_{i}",
                   "batch_norm_param { use_global_stats: true eps: 1e-5 }"),
            _layer(f"{tag}scale_{i}", "Scale", [f"{tag}bn_{i}"], f"{tag}scale_{i}",
                   "scale_param { bias_term: true }"),
            _layer(f"{tag}relu_{i}", "ReLU", [f"{tag}scale_{i}"], f"{tag}relu_{i}")]


def _primitive_net(channels, n, growth, bottleneck):
    """The same block as BatchNorm, Scale, ReLU, Convolution and Concat layers, by hand."""
    lines = [f'input: "x" input_shape {{ dim: 2 dim: {channels} dim: 6 dim: 7 }}']
    features = "x"
    for i in range(n):
        lines += _bn_relu_layers("", i, features)
        y = f"relu_{i}"
        if bottleneck:
            lines.append(_layer(f"bc_conv_{i}", "Convolution", [y], f"bc_conv_{i}",
                                f"convolution_param {{ num_output: {4 * growth} kernel_size: 1 "
                                "bias_term: false }"))
            lines += _bn_relu_layers("bc_", i, f"bc_conv_{i}")
            y = f"bc_relu_{i}"
        lines.append(_layer(f"conv_{i}", "Convolution", [y], f"conv_{i}",
                            f"convolution_param {{ num_output: {growth} kernel_size: 3 pad: 1 "
                            "bias_term: false }"))
        top = "y" if i == n - 1 else f"concat_{i}"
        lines.append(_layer(f"concat_{i}", "Concat", [features, f"conv_{i}"], top))
        features = top
    return "\n".join(lines) + "\n"


def _primitive_weights(blobs, n, bottleneck):
    """The block's blobs as the primitive layers' (flipped kernels, (C,) statistics)."""
    groups = 10 if bottleneck else 5
    w = {k: blobs[k * n:(k + 1) * n] for k in range(groups)}

    def bn_scale(tag, base, i):
        flat = [w[base + k][i].reshape(-1) for k in (3, 4, 1, 2)]  # μ, σ², γ, β
        return [(f"{tag}bn_{i}", "BatchNorm", [flat[0], flat[1], np.ones(1, np.float32)]),
                (f"{tag}scale_{i}", "Scale", [flat[2], flat[3]])]

    layers = []
    for i in range(n):
        layers += bn_scale("", 0, i)
        if bottleneck:
            layers.append((f"bc_conv_{i}", "Convolution", [w[5][i][:, :, ::-1, ::-1].copy()]))
            layers += bn_scale("bc_", 5, i)
        layers.append((f"conv_{i}", "Convolution", [w[0][i][:, :, ::-1, ::-1].copy()]))
    return layers


@pytest.fixture(params=[False, True], ids=["plain", "use_BC"])
def block_case(request, tmp_path):
    bottleneck, channels, n, growth = request.param, 5, 3, 4
    blobs = _blobs(n, growth, channels, bottleneck, seed=11)
    block = tmp_path / "block.prototxt"
    block.write_text(BLOCK_NET.format(channels=channels, n=n, growth=growth,
                                      bc=str(bottleneck).lower()))
    write_caffemodel(tmp_path / "block.caffemodel", [("block", "DenseBlock", blobs)])
    primitive = tmp_path / "primitive.prototxt"
    primitive.write_text(_primitive_net(channels, n, growth, bottleneck))
    write_caffemodel(tmp_path / "primitive.caffemodel", _primitive_weights(blobs, n, bottleneck))
    x = np.random.default_rng(12).normal(size=(2, channels, 6, 7)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    return tmp_path, block, primitive


def _run(invoke, net, weights, inputs, out, *flags):
    result = invoke("run", net, "-w", weights, "--inputs", inputs, "-o", out, *flags)
    assert result.exit_code == 0, result.stderr
    with np.load(out) as data:
        return data["y"]


def test_expanded_block_equals_the_block_written_as_primitive_layers(invoke, block_case):
    folder, block, primitive = block_case
    inputs = folder / "in.npz"
    expanded = _run(invoke, block, folder / "block.caffemodel", inputs, folder / "e.npz")
    direct = _run(invoke, block, folder / "block.caffemodel", inputs, folder / "d.npz",
                  "--original")
    by_hand = _run(invoke, primitive, folder / "primitive.caffemodel", inputs, folder / "p.npz")
    np.testing.assert_allclose(expanded, by_hand, atol=1e-6, rtol=0)
    np.testing.assert_allclose(expanded, direct, atol=1e-5, rtol=1e-5)


def test_the_rewrite_leaves_only_primitive_layers(block_case):
    folder, block, _ = block_case
    graph = run_passes(load_net(block, folder / "block.caffemodel").graph)
    assert {node.op for node in graph.nodes} <= {"BatchNorm", "Scale", "ReLU", "Convolution",
                                                 "Concat"}
    assert all(node.origin == "block" and node.name.startswith("__block/") for node in graph)


def test_block_converts_and_verifies(invoke, block_case):
    pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT for RTX is not installed")
    folder, block, _ = block_case
    weights = folder / "block.caffemodel"
    result = invoke("convert", block, "-w", weights, "-o", folder / "block.engine")
    assert result.exit_code == 0, result.stderr
    result = invoke("verify", block, "-w", weights, "--inputs", folder / "in.npz")
    assert result.exit_code == 0, result.stdout + result.stderr


@needs_corpus()
def test_corpus_densenet_backbone_verifies(invoke, tmp_path):
    """Corpus #18 with synthetic weights: its three DenseBlocks computed directly against their
    expansion in numpy, in the TensorRT network and in ONNX (verify up to the backbone)."""
    pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT for RTX is not installed")
    net = next(p for p in corpus_files()
               if p.name == "examples__ocr__densenet__densenet-res-blstm_deploy.prototxt")
    weights = tmp_path / "w.caffemodel"
    assert invoke("weights", "init", net, "-o", weights).exit_code == 0
    result = invoke("verify", net, "-w", weights, "--outputs", "BatchNorm3")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert result.stdout.count(" ok") >= 2
