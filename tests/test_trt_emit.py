"""The tensorrt facets build real engines with TensorRT for RTX (on the CPU, nothing runs).

Every op family is a small Caffe net with synthetic weights, built in fp32 and fp16; the two
sample nets are built after the recurrent rewrite (Loop nodes) with static and dynamic shapes,
and once unrolled. A build that TensorRT refuses raises EngineBuildError, so each test fails
when a facet emits a network TensorRT rejects.

What the networks compute is checked without a GPU: ``network_eval`` evaluates the emitted
INetworkDefinition with numpy, through TensorRT's own API, and the result must match the numpy
executor on the same Caffe graph (1e-5 in fp32, 1e-2 in fp16).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tensorrt_rtx_bindings")

from caffe_lstm.analysis.shapes import infer_shapes
from caffe_lstm.backends.tensorrt.build import BuildOptions, build_engine, emit
from caffe_lstm.backends.tensorrt.runtime import load_runtime
from caffe_lstm.errors import ShapeError, UnsupportedLayerError
from caffe_lstm.frontend.loader import load_net
from caffe_lstm.ops.builder import NodeBuilder
from caffe_lstm.ir.graph import Graph, Value
from caffe_lstm.passes import run_passes
from tests.helpers import (
    assert_network_matches_numpy, assert_plan, net_with_weights, random_feeds, sample,
)

ELEMENTWISE_NET = """
name: "elementwise"
layer { name: "input" type: "Input" top: "x" top: "y" top: "s" top: "z"
        input_param { shape { dim: 2 dim: 3 dim: 4 } shape { dim: 2 dim: 3 dim: 4 }
                      shape { dim: 2 dim: 3 } shape { dim: 2 dim: 3 dim: 4 } } }
layer { name: "sum" type: "Eltwise" bottom: "x" bottom: "y" top: "sum"
        eltwise_param { operation: SUM coeff: 0.5 coeff: -2 } }
layer { name: "prod" type: "Eltwise" bottom: "x" bottom: "y" top: "prod"
        eltwise_param { operation: PROD } }
layer { name: "max" type: "Eltwise" bottom: "x" bottom: "y" bottom: "z" top: "max"
        eltwise_param { operation: MAX } }
layer { name: "scale_by" type: "Scale" bottom: "x" bottom: "s" top: "scale_by"
        scale_param { axis: 0 bias_term: true } }
layer { name: "scale_learned" type: "Scale" bottom: "x" top: "scale_learned"
        scale_param { axis: 1 num_axes: 2 bias_term: true } }
layer { name: "scale_scalar" type: "Scale" bottom: "y" top: "scale_scalar"
        scale_param { num_axes: 0 } }
layer { name: "bias_learned" type: "Bias" bottom: "x" top: "bias_learned"
        bias_param { axis: 1 num_axes: 1 } }
layer { name: "bias_by" type: "Bias" bottom: "y" bottom: "s" top: "bias_by"
        bias_param { axis: 0 } }
layer { name: "square" type: "Power" bottom: "x" top: "square"
        power_param { power: 2 scale: 0.5 shift: 1 } }
layer { name: "root" type: "Power" bottom: "z" top: "root"
        power_param { power: 0.5 shift: 3 } }
layer { name: "same" type: "Power" bottom: "y" top: "same" }
"""

ACTIVATION_NET = """
name: "activation"
layer { name: "input" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 dim: 4 } } }
layer { name: "sigmoid" type: "Sigmoid" bottom: "x" top: "sigmoid" }
layer { name: "tanh" type: "TanH" bottom: "x" top: "tanh" }
layer { name: "fan" type: "Split" bottom: "tanh" top: "tanh1" top: "tanh2" }
layer { name: "relu" type: "ReLU" bottom: "x" top: "relu" }
layer { name: "leaky" type: "ReLU" bottom: "x" top: "leaky" relu_param { negative_slope: 0.1 } }
layer { name: "drop" type: "Dropout" bottom: "leaky" top: "drop" }
layer { name: "softmax" type: "Softmax" bottom: "drop" top: "softmax" }
layer { name: "softmax_last" type: "Softmax" bottom: "x" top: "softmax_last"
        softmax_param { axis: -1 } }
"""

# Axis 0 is the batch: the dynamic builds let it vary, so no layer slices along it.
SHAPE_NET = """
name: "shape"
layer { name: "input" type: "Input" top: "x" top: "w"
        input_param { shape { dim: 2 dim: 3 dim: 5 } shape { dim: 2 dim: 3 dim: 2 } } }
layer { name: "cut" type: "Slice" bottom: "x" top: "a" top: "b" top: "c"
        slice_param { axis: 2 slice_point: 1 slice_point: 3 } }
layer { name: "halves" type: "Slice" bottom: "w" top: "w1" top: "w2"
        slice_param { axis: -1 } }
layer { name: "join" type: "Concat" bottom: "a" bottom: "c" bottom: "w" top: "join"
        concat_param { axis: 2 } }
layer { name: "fan" type: "Split" bottom: "join" top: "fan1" top: "fan2" }
layer { name: "merge" type: "Reshape" bottom: "fan1" top: "merge"
        reshape_param { shape { dim: -1 } axis: 1 num_axes: 2 } }
layer { name: "regroup" type: "Reshape" bottom: "fan2" top: "regroup"
        reshape_param { shape { dim: 0 dim: 5 dim: -1 } } }
layer { name: "flat" type: "Flatten" bottom: "b" top: "flat" }
layer { name: "flat_all" type: "Flatten" bottom: "x" top: "flat_all" flatten_param { axis: 0 } }
layer { name: "tile_mid" type: "Tile" bottom: "w1" top: "tile_mid" tile_param { axis: 1 tiles: 3 } }
layer { name: "tile_batch" type: "Tile" bottom: "w2" top: "tile_batch"
        tile_param { axis: 0 tiles: 2 } }
layer { name: "mute" type: "Silence" bottom: "merge" }
layer { name: "total" type: "Reduction" bottom: "x" top: "total" }
layer { name: "asum" type: "Reduction" bottom: "x" top: "asum"
        reduction_param { operation: ASUM axis: 1 } }
layer { name: "sumsq" type: "Reduction" bottom: "x" top: "sumsq"
        reduction_param { operation: SUMSQ axis: 2 coeff: 0.5 } }
layer { name: "mean" type: "Reduction" bottom: "x" top: "mean"
        reduction_param { operation: MEAN axis: -1 coeff: -3 } }
"""
SHAPE_BATCH = {"x": ((1, 3, 5), (2, 3, 5), (6, 3, 5)), "w": ((1, 3, 2), (2, 3, 2), (6, 3, 2))}

LINEAR_NET = """
name: "linear"
layer { name: "input" type: "Input" top: "ids" top: "x"
        input_param { shape { dim: 4 dim: 2 } shape { dim: 4 dim: 2 dim: 3 } } }
layer { name: "embed" type: "Embed" bottom: "ids" top: "embed"
        embed_param { input_dim: 7 num_output: 3 } }
layer { name: "embed_plain" type: "Embed" bottom: "ids" top: "embed_plain"
        embed_param { input_dim: 7 num_output: 5 bias_term: false } }
layer { name: "ip_steps" type: "InnerProduct" bottom: "embed" top: "ip_steps"
        inner_product_param { num_output: 4 axis: 2 } }
layer { name: "ip_rows" type: "InnerProduct" bottom: "x" top: "ip_rows"
        inner_product_param { num_output: 3 transpose: true bias_term: false } }
layer { name: "ip_all" type: "InnerProduct" bottom: "x" top: "ip_all"
        inner_product_param { num_output: 2 axis: 0 } }
"""

FAMILIES = {"elementwise": ELEMENTWISE_NET, "activation": ACTIVATION_NET, "shape": SHAPE_NET,
            "linear": LINEAR_NET}

CLASSIFIER_DYNAMIC_T = {"data": ((1, 2, 8), (12, 2, 8), (64, 2, 8)),
                        "cont": ((1, 2), (12, 2), (64, 2))}
CLASSIFIER_DYNAMIC_TN = {"data": ((1, 1, 8), (12, 2, 8), (64, 16, 8)),
                         "cont": ((1, 1), (12, 2), (64, 16))}
CAPTIONER_DYNAMIC_N = {"cont_sentence": ((10, 1), (10, 2), (10, 16)),
                       "input_sentence": ((10, 1), (10, 2), (10, 16)),
                       "image_features": ((1, 32), (2, 32), (16, 32))}

# fp16 holds whole numbers exactly only up to 2048: ids above must reach Embed as float32
BIG_EMBED_NET = """
name: "big_embed"
layer { name: "input" type: "Input" top: "ids" input_param { shape { dim: 3 dim: 2 } } }
layer { name: "embed" type: "Embed" bottom: "ids" top: "embed"
        embed_param { input_dim: 3000 num_output: 4 } }
"""

@pytest.fixture(scope="module")
def runtime():
    return load_runtime("tensorrt-rtx")


def sample_graph(name: str, passes=None) -> Graph:
    graph = load_net(*sample(name)).graph
    return run_passes(graph, passes) if passes else run_passes(graph)


def layer_names(network) -> list[str]:
    return [network.get_layer(i).name for i in range(network.num_layers)]


# ---- op families ------------------------------------------------------------------------------


@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_op_family_builds(runtime, tmp_path, family, fp16):
    graph = net_with_weights(tmp_path, FAMILIES[family])
    assert_plan(build_engine(runtime, graph, BuildOptions(fp16=fp16)))


@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
def test_shape_family_builds_with_a_dynamic_batch(runtime, tmp_path, fp16):
    # Reshape, Flatten and Tile then read the batch dim at run time
    graph = net_with_weights(tmp_path, SHAPE_NET)
    assert_plan(build_engine(runtime, graph, BuildOptions(fp16=fp16, shapes=SHAPE_BATCH)))


def test_dynamic_dims_reach_the_network(runtime, tmp_path):
    graph = net_with_weights(tmp_path, SHAPE_NET)
    _, network, _ = emit(runtime, graph, BuildOptions(shapes=SHAPE_BATCH))
    outputs = {network.get_output(i).name: tuple(network.get_output(i).shape)
               for i in range(network.num_outputs)}
    assert outputs["regroup"] == (-1, 5, 3)      # 0 copies the dynamic batch
    assert outputs["flat_all"] == (-1,)          # the batch merged into one inferred dim
    assert outputs["tile_batch"] == (-1, 3, 1)   # tiles x a run-time dim
    assert outputs["tile_mid"] == (-1, 9, 1)
    assert outputs["total"] == ()                # Reduction over every axis: a scalar
    assert outputs["mean"] == (-1, 3)


def test_static_shapes_match_the_graph(runtime, tmp_path):
    for text in FAMILIES.values():
        graph = net_with_weights(tmp_path, text)
        _, network, _ = emit(runtime, graph, BuildOptions())
        shapes = {network.get_output(i).name: tuple(network.get_output(i).shape)
                  for i in range(network.num_outputs)}
        assert shapes == {v.name: tuple(v.shape) for v in graph.outputs}


@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
def test_dummy_data_builds_as_constants(runtime, fp16):
    # the importer turns DummyData into net inputs: only rewrites make DummyData nodes
    graph = Graph("dummy", inputs=[Value("x", (1, 2, 3))])
    b = NodeBuilder(graph, "net")
    zero, half = b.add("DummyData", "fill", [],
                       {"shapes": [[1, 2, 3]], "values": [0.0, 0.5]}, tops=["zero", "half"])
    graph.outputs = [b.eltwise("sum", "SUM", graph.inputs[0], zero, half)]
    infer_shapes(graph)
    assert_plan(build_engine(runtime, graph, BuildOptions(fp16=fp16)))


def test_slice_along_a_dynamic_axis_is_refused(runtime, tmp_path):
    graph = net_with_weights(tmp_path, SHAPE_NET)
    shapes = {"x": ((2, 3, 1), (2, 3, 5), (2, 3, 9)), "w": SHAPE_BATCH["w"]}
    with pytest.raises(ShapeError, match="axis 2 is dynamic"):
        emit(runtime, graph, BuildOptions(shapes=shapes))


def test_recurrent_layers_must_be_rewritten_first(runtime):
    graph = load_net(*sample("seq_classifier")).graph  # no rewrite: an LSTM node
    with pytest.raises(UnsupportedLayerError, match="LSTM .*expanded by the recurrent rewrite"):
        emit(runtime, graph, BuildOptions())


# ---- the sample nets --------------------------------------------------------------------------


@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
@pytest.mark.parametrize("name", ["seq_classifier", "captioner"])
def test_rewritten_sample_builds(runtime, name, fp16):
    graph = sample_graph(name)
    assert any(node.op == "Loop" for node in graph.nodes)
    assert_plan(build_engine(runtime, graph, BuildOptions(fp16=fp16)))


@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
@pytest.mark.parametrize("shapes", [CLASSIFIER_DYNAMIC_T, CLASSIFIER_DYNAMIC_TN],
                         ids=["dynamic-T", "dynamic-T-N"])
def test_classifier_builds_with_dynamic_shapes(runtime, shapes, fp16):
    graph = sample_graph("seq_classifier")
    assert_plan(build_engine(runtime, graph, BuildOptions(fp16=fp16, shapes=shapes)))


@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
def test_captioner_builds_with_a_dynamic_batch(runtime, fp16):
    graph = sample_graph("captioner")
    options = BuildOptions(fp16=fp16, shapes=CAPTIONER_DYNAMIC_N)
    assert_plan(build_engine(runtime, graph, options))


@pytest.mark.parametrize("name", ["seq_classifier", "captioner"])
def test_unrolled_sample_builds(runtime, name):
    graph = sample_graph(name, ["expand-recurrent", "unroll"])
    assert not any(node.op == "Loop" for node in graph.nodes)
    assert any(node.op == "DummyData" for node in graph.nodes)  # the zero h_0, c_0
    assert_plan(build_engine(runtime, graph, BuildOptions()))


def test_layers_are_named_after_the_caffe_layers(runtime):
    _, network, _ = emit(runtime, sample_graph("seq_classifier"), BuildOptions())
    names = layer_names(network)
    assert len(set(names)) == len(names)  # TensorRT refuses a name twice
    assert not [n for n in names if n.startswith("(Unnamed")]
    for expected in ["lstm1/x_transform", "lstm1/loop/trip_limit", "lstm1/gate_input",
                     "lstm1/gate/i", "lstm1/gate/g", "lstm1/h_conted", "lstm1/c", "lstm1/h",
                     "classifier", "probs"]:
        assert expected in names


def test_fp16_network_is_half_inside_and_float_at_the_edges(runtime):
    trt = runtime.trt
    _, network, _ = emit(runtime, sample_graph("captioner"), BuildOptions(fp16=True))
    edges = [network.get_input(i) for i in range(network.num_inputs)] + [
        network.get_output(i) for i in range(network.num_outputs)]
    assert {t.dtype for t in edges} == {trt.DataType.FLOAT}
    softmax = next(network.get_layer(i) for i in range(network.num_layers)
                   if network.get_layer(i).name == "probs")
    assert softmax.get_output(0).dtype == trt.DataType.HALF


def test_fp16_embed_reads_the_float32_ids(runtime):
    # word ids above 2048 are not exact in fp16: Embed takes the FLOAT input, not its HALF cast
    trt = runtime.trt
    _, network, _ = emit(runtime, sample_graph("captioner"), BuildOptions(fp16=True))
    abs_layer = next(network.get_layer(i) for i in range(network.num_layers)
                     if network.get_layer(i).name == "embedding/abs")
    ids = abs_layer.get_input(0)
    assert ids.dtype == trt.DataType.FLOAT and ids.name == "input_sentence"


def test_weights_are_converted_to_the_compute_type(runtime, tmp_path):
    trt = runtime.trt
    graph = net_with_weights(tmp_path, LINEAR_NET)
    for fp16, dtype in [(False, trt.DataType.FLOAT), (True, trt.DataType.HALF)]:
        _, network, ctx = emit(runtime, graph, BuildOptions(fp16=fp16))
        weight = next(network.get_layer(i) for i in range(network.num_layers)
                      if network.get_layer(i).name == "embed/weight")
        assert weight.get_output(0).dtype == dtype
        assert any(a.dtype == (np.float16 if fp16 else np.float32) for a in ctx.keep_alive)


# ---- what the networks compute (numpy evaluation of the INetworkDefinition) --------------------


@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_op_family_computes_like_numpy(runtime, tmp_path, family, fp16):
    graph = net_with_weights(tmp_path, FAMILIES[family], seed=3)
    assert_network_matches_numpy(runtime, graph, BuildOptions(fp16=fp16), random_feeds(graph, 4))


def test_shape_family_computes_like_numpy_at_another_batch(runtime, tmp_path):
    graph = net_with_weights(tmp_path, SHAPE_NET)
    feeds = random_feeds(graph, 5, {"x": (4, 3, 5), "w": (4, 3, 2)})
    assert_network_matches_numpy(runtime, graph, BuildOptions(shapes=SHAPE_BATCH), feeds)


@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
def test_embed_ids_above_2048_stay_exact_in_fp16(runtime, tmp_path, fp16):
    graph = net_with_weights(tmp_path, BIG_EMBED_NET)
    ids = np.array([[2049, 2051], [2999.5, 0], [1, 2047]], np.float32)
    assert_network_matches_numpy(runtime, graph, BuildOptions(fp16=fp16), {"ids": ids})


def test_dummy_data_computes_like_numpy(runtime):
    graph = Graph("dummy", inputs=[Value("x", (1, 2, 3))])
    b = NodeBuilder(graph, "net")
    (half,) = b.add("DummyData", "fill", [], {"shapes": [[1, 2, 3]], "values": [0.5]})
    graph.outputs = [b.eltwise("prod", "PROD", graph.inputs[0], half)]
    infer_shapes(graph)
    assert_network_matches_numpy(runtime, graph, BuildOptions(), random_feeds(graph, 6))


@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
@pytest.mark.parametrize("passes", [None, ["expand-recurrent", "unroll"]], ids=["loop", "unrolled"])
@pytest.mark.parametrize("name", ["seq_classifier", "captioner"])
def test_sample_computes_like_numpy(runtime, name, passes, fp16):
    graph = sample_graph(name, passes)
    assert_network_matches_numpy(runtime, graph, BuildOptions(fp16=fp16), random_feeds(graph, 7))


@pytest.mark.parametrize("steps, batch", [(5, 3), (30, 2), (1, 16)])
def test_classifier_computes_like_numpy_at_other_lengths(runtime, steps, batch):
    graph = sample_graph("seq_classifier")
    feeds = random_feeds(graph, 8, {"data": (steps, batch, 8), "cont": (steps, batch)})
    options = BuildOptions(shapes=CLASSIFIER_DYNAMIC_TN)
    assert_network_matches_numpy(runtime, graph, options, feeds)


def test_captioner_computes_like_numpy_at_another_batch(runtime):
    graph = sample_graph("captioner")
    feeds = random_feeds(graph, 9, {"cont_sentence": (10, 5), "input_sentence": (10, 5),
                                    "image_features": (5, 32)})
    assert_network_matches_numpy(runtime, graph, BuildOptions(shapes=CAPTIONER_DYNAMIC_N), feeds)


def test_captioner_with_a_dynamic_sequence_length(runtime):
    """x_static is a loop invariant, so a run-time T longer than the prototxt's works."""
    graph = sample_graph("captioner")
    shapes = {"cont_sentence": ((1, 2), (10, 2), (20, 2)),
              "input_sentence": ((1, 2), (10, 2), (20, 2))}
    feeds = random_feeds(graph, 10, {"cont_sentence": (15, 2), "input_sentence": (15, 2)})
    assert_network_matches_numpy(runtime, graph, BuildOptions(shapes=shapes), feeds)
