"""The frontend: legacy upgrade, input upgrade, phase/stage filtering, in-place renaming."""

from __future__ import annotations

import numpy as np
import pytest

from caffe_lstm.errors import GraphError, ModelLoadError
from caffe_lstm.frontend.caffe_writer import write_caffemodel
from caffe_lstm.frontend.loader import load_net
from caffe_lstm.frontend.netstate import LayerSelection
from caffe_lstm.frontend.prototxt import layer_lines
from caffe_lstm.backends.numpy_exec import NumpyExecutor


def net_file(tmp_path, text, name="net.prototxt"):
    path = tmp_path / name
    path.write_text(text)
    return path


V1_NET = """
name: "v1net"
input: "data"
input_dim: 2 input_dim: 3 input_dim: 1 input_dim: 1
layers { name: "ip1" type: INNER_PRODUCT bottom: "data" top: "ip1"
         blobs_lr: 1 blobs_lr: 2 inner_product_param { num_output: 4 } }
layers { name: "relu1" type: RELU bottom: "ip1" top: "ip1" }
layers { name: "prob" type: SOFTMAX bottom: "ip1" top: "prob" }
"""


def test_v1_layers_and_input_dim_are_upgraded(tmp_path):
    graph = load_net(net_file(tmp_path, V1_NET)).graph
    assert [(n.name, n.op) for n in graph.nodes] == [
        ("ip1", "InnerProduct"), ("relu1", "ReLU"), ("prob", "Softmax")]
    assert [(v.name, v.shape) for v in graph.inputs] == [("data", (2, 3, 1, 1))]
    assert graph.outputs[0].shape == (2, 4)


def test_v1_caffemodel_with_legacy_dims_runs(tmp_path):
    """Legacy 4-D blobs (1, 1, out, in) load into a (out, in) InnerProduct weight."""
    net = net_file(tmp_path, V1_NET)
    weight = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    bias = np.array([0.5, -0.5, 0.0, 1.0], np.float32)
    model = tmp_path / "w.caffemodel"
    _write_v1_caffemodel(model, "ip1", [weight.reshape(1, 1, 4, 3), bias.reshape(1, 1, 1, 4)])
    graph = load_net(net, model).graph
    data = np.array([1.0, 2.0, -1.0, 0.0, 1.0, 3.0], np.float32).reshape(2, 3, 1, 1)
    prob = NumpyExecutor(graph).run({"data": data})["prob"]
    # ip = relu(W·x + b), worked out by hand for the first row: W·[1, 2, -1] + b
    # = [0·1+0.1·2-0.2, 0.3+0.8-0.5, 0.6+1.4-0.8, 0.9+2.0-1.1] + b = [0.5, 0.1, 1.2, 2.8]
    logits = np.array([0.5, 0.1, 1.2, 2.8])
    np.testing.assert_allclose(prob[0], np.exp(logits) / np.exp(logits).sum(), atol=1e-6)


def _write_v1_caffemodel(path, name, blobs):
    from caffe_lstm.proto import caffe_pb2

    net = caffe_pb2.NetParameter()
    layer = net.layers.add(name=name, type=caffe_pb2.V1LayerParameter.INNER_PRODUCT)
    for array in blobs:
        blob = layer.blobs.add(num=array.shape[0], channels=array.shape[1],
                               height=array.shape[2], width=array.shape[3])
        blob.data.extend(array.ravel().tolist())
    path.write_bytes(net.SerializeToString())


def test_v0_net_is_upgraded_with_padding_folded(tmp_path):
    text = """
    input: "data" input_dim: 1 input_dim: 2 input_dim: 1 input_dim: 1
    layers { layer { name: "fc" type: "innerproduct" num_output: 3 biasterm: false }
             bottom: "data" top: "fc" }
    layers { layer { name: "act" type: "tanh" } bottom: "fc" top: "act" }
    """
    graph = load_net(net_file(tmp_path, text)).graph
    fc = graph.node("fc")
    assert fc.op == "InnerProduct" and fc.attrs["num_output"] == 3
    assert fc.attrs["bias_term"] is False and [v.shape for v in fc.weights] == [(3, 2)]
    assert graph.node("act").op == "TanH"


def test_input_shape_upgrade(tmp_path):
    text = """
    input: "a" input_shape { dim: 3 dim: 2 }
    input: "b" input_shape { dim: 3 dim: 2 }
    layer { name: "sum" type: "Eltwise" bottom: "a" bottom: "b" top: "s" }
    """
    graph = load_net(net_file(tmp_path, text)).graph
    assert [(v.name, v.shape) for v in graph.inputs] == [("a", (3, 2)), ("b", (3, 2))]


PHASED = """
layer { name: "input" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "drop" type: "Dropout" bottom: "x" top: "y" include { stage: "dropout" } }
layer { name: "drop" type: "TanH" bottom: "x" top: "y" exclude { stage: "dropout" } }
layer { name: "train_only" type: "Sigmoid" bottom: "y" top: "z" include { phase: TRAIN } }
"""


@pytest.mark.parametrize("state,expected", [
    (LayerSelection(), ["TanH"]),
    (LayerSelection(stages=frozenset({"dropout"})), ["Dropout"]),
    (LayerSelection(phase="TRAIN"), ["TanH", "Sigmoid"]),
])
def test_phase_and_stage_filtering(tmp_path, state, expected):
    graph = load_net(net_file(tmp_path, PHASED), selection=state).graph
    assert [n.op for n in graph.nodes] == expected


def test_in_place_tops_get_one_producer_each(tmp_path):
    text = """
    layer { name: "input" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
    layer { name: "fc" type: "InnerProduct" bottom: "x" top: "fc"
            inner_product_param { num_output: 2 } }
    layer { name: "relu" type: "ReLU" bottom: "fc" top: "fc" }
    layer { name: "drop" type: "Dropout" bottom: "fc" top: "fc" }
    """
    graph = load_net(net_file(tmp_path, text)).graph
    names = [(n.name, [v.name for v in n.inputs], [v.name for v in n.outputs]) for n in graph]
    assert names == [("fc", ["x"], ["fc@fc"]), ("relu", ["fc@fc"], ["fc@relu"]),
                     ("drop", ["fc@relu"], ["fc"])]
    producers = {}
    for value in graph.values():
        assert value.name not in producers, f"{value.name} produced twice"
        producers[value.name] = value.producer
    assert [v.name for v in graph.outputs] == ["fc"]


def test_outputs_cut_the_net_and_drop_unneeded_layers(tmp_path):
    text = """
    layer { name: "input" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
    layer { name: "a" type: "TanH" bottom: "x" top: "a" }
    layer { name: "post" type: "MyCustomDecoder" bottom: "a" top: "decoded" }
    """
    graph = load_net(net_file(tmp_path, text), outputs=["a"]).graph
    assert [n.name for n in graph.nodes] == ["a"] and [v.name for v in graph.outputs] == ["a"]


DUMMY = """
layer { name: "dummy" type: "DummyData" top: "x" top: "y"
        dummy_data_param { shape { dim: 4 dim: 1 } shape { dim: 4 dim: 1 }
                           data_filler { value: 2 } data_filler { value: 3 } } }
layer { name: "sum" type: "Eltwise" bottom: "x" bottom: "y" top: "s" }
"""


def test_dummy_data_tops_are_constants(tmp_path):
    graph = load_net(net_file(tmp_path, DUMMY)).graph
    assert graph.inputs == []
    np.testing.assert_array_equal(NumpyExecutor(graph).run({})["s"], np.full((4, 1), 5.0))


def test_a_fed_dummy_data_top_replaces_the_constant(tmp_path):
    from caffe_lstm.feeds import apply_feeds

    graph = load_net(net_file(tmp_path, DUMMY)).graph
    feeds = apply_feeds(graph, {"y": np.arange(4, dtype=np.float32).reshape(4, 1)}, "test")
    assert [v.name for v in graph.inputs] == ["y"]
    np.testing.assert_array_equal(NumpyExecutor(graph).run(feeds)["s"].ravel(), [2, 3, 4, 5])


def test_layer_lines_skip_comments_and_strings():
    text = ('# layer { not this }\nname: "layer {"\nlayer {\n  name: "a"\n}\n'
            "layer { name: 'b' }\n")
    assert layer_lines(text) == [3, 6]


def test_unknown_bottom_names_the_layer_and_line(tmp_path):
    text = ('layer { name: "input" type: "Input" top: "x" input_param { shape { dim: 1 } } }\n'
            'layer { name: "t" type: "TanH" bottom: "nope" top: "y" }\n')
    with pytest.raises(GraphError, match=r"bottom 'nope'.*layer 't' \(TanH\) at .*net.prototxt:2"):
        load_net(net_file(tmp_path, text))


def test_mixed_layer_and_layers_is_rejected(tmp_path):
    text = 'layer { name: "a" type: "TanH" }\nlayers { name: "b" type: TANH }\n'
    with pytest.raises(ModelLoadError, match="mixes"):
        load_net(net_file(tmp_path, text))


def test_weights_with_wrong_blob_count_are_rejected(tmp_path):
    net = net_file(tmp_path, V1_NET)
    model = tmp_path / "w.caffemodel"
    write_caffemodel(model, [("ip1", "InnerProduct", [np.zeros((4, 3), np.float32)])])
    with pytest.raises(ModelLoadError, match="1 blobs for this layer, the net needs 2"):
        load_net(net, model)
