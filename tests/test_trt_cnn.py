"""The tensorrt facets of the CNN and fork layers: real engine builds (fp32 and fp16) with
TensorRT for RTX, and the emitted networks evaluated on the CPU (``network_eval``) against the
numpy executor on the same Caffe graph (1e-5 in fp32, 1e-2 in fp16).

Each op family is one small net; the cases pick the geometry that needs care in TensorRT:
Caffe's rounded-up pooling and its divisor, 1-D and N-D convolution, a channel axis other
than 1, the LRN window outside ILRNLayer's range, a Reverse along a dynamic axis.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tensorrt_rtx_bindings")

from caffe_lstm.backends.tensorrt.build import BuildOptions, build_engine, emit
from caffe_lstm.backends.tensorrt.runtime import load_runtime
from caffe_lstm.frontend.caffe_writer import write_caffemodel
from caffe_lstm.frontend.loader import load_net
from caffe_lstm.ir.graph import Graph
from caffe_lstm.synthetic import synthetic_weights
from tests.helpers import assert_network_matches_numpy, assert_plan, random_feeds

CONV_NET = """
name: "conv"
layer { name: "input" type: "Input" top: "x" top: "seq" top: "vol"
        input_param { shape { dim: 2 dim: 4 dim: 11 dim: 10 } shape { dim: 3 dim: 2 dim: 4 dim: 9 }
                      shape { dim: 1 dim: 2 dim: 4 dim: 5 dim: 6 } } }
layer { name: "conv" type: "Convolution" bottom: "x" top: "conv"
        convolution_param { num_output: 6 group: 2 kernel_h: 3 kernel_w: 2 stride_h: 2
                            stride_w: 1 pad_h: 1 pad_w: 0 dilation: 2 dilation: 1 } }
layer { name: "conv_plain" type: "Convolution" bottom: "x" top: "conv_plain"
        convolution_param { num_output: 3 kernel_size: 1 bias_term: false } }
layer { name: "conv_steps" type: "Convolution" bottom: "seq" top: "conv_steps"
        convolution_param { num_output: 5 kernel_size: 3 pad: 1 axis: 2 } }
layer { name: "conv_vol" type: "Convolution" bottom: "vol" top: "conv_vol"
        convolution_param { num_output: 3 kernel_size: 3 pad: 1 stride: 2 stride: 1 stride: 1 } }
layer { name: "deconv" type: "Deconvolution" bottom: "conv" top: "deconv"
        convolution_param { num_output: 4 group: 2 kernel_size: 3 stride: 2 pad: 1 } }
layer { name: "upsample" type: "Deconvolution" bottom: "x" top: "upsample"
        convolution_param { num_output: 2 kernel_size: 4 kernel_size: 2 stride: 2 pad: 1
                            dilation: 2 bias_term: false } }
layer { name: "im2col" type: "Im2col" bottom: "x" top: "im2col"
        convolution_param { kernel_size: 3 pad: 1 stride: 2 } }
"""

POOL_NET = """
name: "pool"
layer { name: "input" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 dim: 7 dim: 9 } } }
layer { name: "max_ceil" type: "Pooling" bottom: "x" top: "max_ceil"
        pooling_param { pool: MAX kernel_size: 3 stride: 2 pad: 1 } }
layer { name: "ave_ceil" type: "Pooling" bottom: "x" top: "ave_ceil"
        pooling_param { pool: AVE kernel_size: 3 stride: 2 pad: 1 } }
layer { name: "max_clip" type: "Pooling" bottom: "x" top: "max_clip"
        pooling_param { pool: MAX kernel_size: 2 stride: 2 pad: 1 } }
layer { name: "ave_clip" type: "Pooling" bottom: "x" top: "ave_clip"
        pooling_param { pool: AVE kernel_size: 2 stride: 2 pad: 1 } }
layer { name: "ave_mixed" type: "Pooling" bottom: "x" top: "ave_mixed"
        pooling_param { pool: AVE kernel_h: 2 kernel_w: 3 stride_h: 2 stride_w: 2
                        pad_h: 0 pad_w: 1 } }
layer { name: "ave_floor" type: "Pooling" bottom: "x" top: "ave_floor"
        pooling_param { pool: AVE kernel_size: 3 stride: 2 pad: 1 round_mode: FLOOR } }
layer { name: "ave_plain" type: "Pooling" bottom: "x" top: "ave_plain"
        pooling_param { pool: AVE kernel_h: 7 kernel_w: 1 } }
layer { name: "global_max" type: "Pooling" bottom: "x" top: "global_max"
        pooling_param { pool: MAX global_pooling: true } }
layer { name: "global_ave" type: "Pooling" bottom: "x" top: "global_ave"
        pooling_param { pool: AVE global_pooling: true } }
layer { name: "lrn" type: "LRN" bottom: "x" top: "lrn"
        lrn_param { local_size: 3 alpha: 0.5 beta: 0.75 } }
layer { name: "lrn_wide" type: "LRN" bottom: "x" top: "lrn_wide"
        lrn_param { local_size: 17 alpha: 0.5 beta: 0.75 k: 2 } }
layer { name: "lrn_within" type: "LRN" bottom: "x" top: "lrn_within"
        lrn_param { local_size: 3 alpha: 0.5 beta: 0.75 norm_region: WITHIN_CHANNEL } }
"""

NORM_NET = """
name: "norm"
layer { name: "input" type: "Input" top: "x" top: "v"
        input_param { shape { dim: 2 dim: 4 dim: 3 dim: 5 } shape { dim: 3 dim: 4 } } }
layer { name: "bn" type: "BatchNorm" bottom: "x" top: "bn" batch_norm_param { eps: 0.001 } }
layer { name: "bn_zero" type: "BatchNorm" bottom: "x" top: "bn_zero" }
layer { name: "bn_batch" type: "BatchNorm" bottom: "x" top: "bn_batch"
        batch_norm_param { use_global_stats: false } }
layer { name: "bn_rows" type: "BatchNorm" bottom: "v" top: "bn_rows" }
layer { name: "scale" type: "Scale" bottom: "bn" top: "scale" scale_param { bias_term: true } }
layer { name: "prelu" type: "PReLU" bottom: "x" top: "prelu" }
layer { name: "prelu_shared" type: "PReLU" bottom: "v" top: "prelu_shared"
        prelu_param { channel_shared: true } }
"""

ACTIVATION_NET = """
name: "pointwise"
layer { name: "input" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 dim: 4 } } }
layer { name: "elu" type: "ELU" bottom: "x" top: "elu" elu_param { alpha: 0.7 } }
layer { name: "abs" type: "AbsVal" bottom: "x" top: "abs" }
layer { name: "bnll" type: "BNLL" bottom: "x" top: "bnll" }
layer { name: "exp" type: "Exp" bottom: "x" top: "exp" }
layer { name: "exp2" type: "Exp" bottom: "x" top: "exp2"
        exp_param { base: 2 scale: 0.3 shift: 0.5 } }
layer { name: "log" type: "Log" bottom: "exp" top: "log" }
layer { name: "log10" type: "Log" bottom: "abs" top: "log10"
        log_param { base: 10 scale: 2 shift: 1 } }
layer { name: "clip" type: "Clip" bottom: "x" top: "clip" clip_param { min: -0.3 max: 0.4 } }
layer { name: "softmax" type: "Softmax" bottom: "x" top: "softmax" softmax_param { axis: 1 } }
"""

SELECT_NET = """
name: "select"
layer { name: "input" type: "Input" top: "x" top: "like"
        input_param { shape { dim: 2 dim: 4 dim: 6 dim: 5 }
                      shape { dim: 2 dim: 2 dim: 3 dim: 4 } } }
layer { name: "crop" type: "Crop" bottom: "x" bottom: "like" top: "crop"
        crop_param { axis: 2 offset: 1 offset: 0 } }
layer { name: "crop_all" type: "Crop" bottom: "x" bottom: "like" top: "crop_all"
        crop_param { axis: 1 offset: 1 } }
layer { name: "argmax" type: "ArgMax" bottom: "x" top: "argmax"
        argmax_param { axis: 1 top_k: 2 } }
layer { name: "maxval" type: "ArgMax" bottom: "x" top: "maxval"
        argmax_param { axis: -1 top_k: 3 out_max_val: true } }
layer { name: "argmax_flat" type: "ArgMax" bottom: "x" top: "argmax_flat" }
layer { name: "argmax_both" type: "ArgMax" bottom: "x" top: "argmax_both"
        argmax_param { top_k: 3 out_max_val: true } }
"""

FORK_NET = """
name: "fork"
layer { name: "input" type: "Input" top: "x" top: "seq"
        input_param { shape { dim: 2 dim: 3 dim: 4 dim: 5 } shape { dim: 5 dim: 2 dim: 3 } } }
layer { name: "permute" type: "Permute" bottom: "x" top: "permute"
        permute_param { order: 3 order: 0 } }
layer { name: "same" type: "Permute" bottom: "seq" top: "same" }
layer { name: "transpose" type: "Transpose" bottom: "x" top: "transpose"
        transpose_param { dim: 3 dim: 2 dim: 0 dim: 1 } }
layer { name: "reverse_time" type: "Reverse" bottom: "seq" top: "reverse_time" }
layer { name: "reverse_h" type: "Reverse" bottom: "x" top: "reverse_h" reverse_param { axis: 2 } }
"""
# The indicator fixes seq's time axis (Scale needs equal dims): not in the dynamic build.
INDICATOR = """
layer { name: "indicator" type: "ContinuationIndicator" top: "indicator"
        continuation_indicator_param { time_step: 5 batch_size: 2 } }
layer { name: "mask" type: "Scale" bottom: "seq" bottom: "indicator" top: "mask"
        scale_param { axis: 0 } }
"""

FAMILIES = {"conv": CONV_NET, "pool": POOL_NET, "norm": NORM_NET, "pointwise": ACTIVATION_NET,
            "select": SELECT_NET, "fork": FORK_NET + INDICATOR}

#: Dynamic builds: axis 0 varies (for the fork net it is seq's time axis, which Reverse flips).
DYNAMIC = {
    "conv": {"x": ((1, 4, 11, 10), (2, 4, 11, 10), (4, 4, 11, 10)),
             "seq": ((3, 2, 4, 9),) * 3, "vol": ((1, 2, 4, 5, 6),) * 3},
    "pool": {"x": ((1, 3, 7, 9), (2, 3, 7, 9), (4, 3, 7, 9))},
    "select": {"x": ((1, 4, 6, 5), (2, 4, 6, 5), (4, 4, 6, 5)),
               "like": ((1, 2, 3, 4), (2, 2, 3, 4), (4, 2, 3, 4))},
    "fork": {"x": ((1, 3, 4, 5), (2, 3, 4, 5), (4, 3, 4, 5)),
             "seq": ((1, 2, 3), (5, 2, 3), (9, 2, 3))},
}


@pytest.fixture(scope="module")
def runtime():
    return load_runtime("tensorrt-rtx")


def net_with_weights(tmp_path, text: str, seed: int = 0) -> Graph:
    """The net with seeded synthetic weights; BatchNorm gets a positive variance and a scale
    factor of 2 (uniform synthetic values would give negative variances), and layer
    ``bn_zero`` the factor 0 (statistics taken as 0)."""
    prototxt, weights = tmp_path / "net.prototxt", tmp_path / "net.caffemodel"
    prototxt.write_text(text)
    layers = synthetic_weights(load_net(prototxt).graph, seed)
    for name, op, blobs in layers:
        if op == "BatchNorm":
            blobs[1] = np.abs(blobs[1]) + np.float32(0.2)
            blobs[2] = np.full(1, 0 if name == "bn_zero" else 2, np.float32)
    write_caffemodel(weights, layers)
    loaded = load_net(prototxt, weights)
    assert loaded.missing_weights == []
    return loaded.graph


@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_builds(runtime, tmp_path, family, fp16):
    graph = net_with_weights(tmp_path, FAMILIES[family])
    assert_plan(build_engine(runtime, graph, BuildOptions(fp16=fp16)))


@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_computes_like_numpy(runtime, tmp_path, family, fp16):
    graph = net_with_weights(tmp_path, FAMILIES[family], seed=3)
    assert_network_matches_numpy(runtime, graph, BuildOptions(fp16=fp16), random_feeds(graph, 4))


@pytest.mark.parametrize("family", sorted(DYNAMIC))
def test_family_with_a_dynamic_axis(runtime, tmp_path, family):
    text = FORK_NET if family == "fork" else FAMILIES[family]
    graph = net_with_weights(tmp_path, text, seed=5)
    options = BuildOptions(shapes=DYNAMIC[family])
    assert_plan(build_engine(runtime, graph, options))
    other = {name: ranges[2] for name, ranges in DYNAMIC[family].items()}
    assert_network_matches_numpy(runtime, graph, options, random_feeds(graph, 6, other))


def test_static_shapes_match_the_graph(runtime, tmp_path):
    for text in FAMILIES.values():
        graph = net_with_weights(tmp_path, text)
        _, network, _ = emit(runtime, graph, BuildOptions())
        shapes = {network.get_output(i).name: tuple(network.get_output(i).shape)
                  for i in range(network.num_outputs)}
        assert shapes == {v.name: tuple(v.shape) for v in graph.outputs}


def test_lrn_uses_ilrnlayer_only_within_its_range(runtime, tmp_path):
    graph = net_with_weights(tmp_path, POOL_NET)
    _, network, _ = emit(runtime, graph, BuildOptions())
    kinds = {network.get_layer(i).name: network.get_layer(i).type.name
             for i in range(network.num_layers)}
    assert kinds["lrn"] == "LRN"
    assert "LRN" not in {kind for name, kind in kinds.items() if name.startswith("lrn_wide")}
    assert kinds["lrn_wide/mean"] == kinds["lrn_within/mean"] == "POOLING"


def test_pooling_multiplies_by_caffes_divisor_only_where_it_differs(runtime, tmp_path):
    graph = net_with_weights(tmp_path, POOL_NET)
    _, network, _ = emit(runtime, graph, BuildOptions())
    names = {network.get_layer(i).name for i in range(network.num_layers)}
    assert {"ave_ceil/divisor", "ave_clip/divisor", "ave_floor/divisor"} <= names
    assert "ave_plain/divisor" not in names and "max_ceil/divisor" not in names


def test_pooling_with_dynamic_spatial_dims_is_refused(runtime, tmp_path):
    from caffe_lstm.errors import ShapeError

    graph = net_with_weights(tmp_path, POOL_NET)
    shapes = {"x": ((2, 3, 7, 9), (2, 3, 8, 9), (2, 3, 9, 9))}
    with pytest.raises(ShapeError, match="H or W is dynamic"):
        emit(runtime, graph, BuildOptions(shapes=shapes))
