"""Nets as found in the wild: fields our schema does not know, train/test prototxts.

Tolerant reading, strict conversion: an unknown field, enum value or message anywhere reads
fine and is listed (``inspect --json``'s ``unknown``); it is an error only on a converted layer
where it could change the math. A train/test net is converted as its deploy graph: training
layers dropped with a note, data layers read as net inputs (shaped by their parameters or
``--shape``).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import caffe_lstm
from caffe_lstm.errors import CaffeLstmError, ModelLoadError, ShapeError, UnsupportedLayerError
from caffe_lstm.frontend.deploy import data_layer_shapes
from caffe_lstm.frontend.textscan import scan_prototxt
from caffe_lstm.proto import caffe_pb2
from google.protobuf import text_format

INPUT = ('layer { name: "input" type: "Input" top: "x" top: "cont"\n'
         '  input_param { shape { dim: 3 dim: 2 dim: 4 } shape { dim: 3 dim: 2 } } }\n')
LSTM = ('layer { name: "lstm1" type: "LSTM" bottom: "x" bottom: "cont" top: "h"\n'
        '  recurrent_param { num_output: 5 } }\n')
IP = ('layer { name: "ip" type: "InnerProduct" bottom: "h" top: "y"\n'
      '  inner_product_param { num_output: 3 axis: 2 } }\n')
DEPLOY = INPUT + LSTM + IP

# A train/test net of the same model: an HDF5 reader, a loss and an accuracy at TEST, a
# TRAIN-only data layer and dropout, a Silence of the reader's extra top.
TRAIN_TEST = """name: "tt"
layer { name: "data" type: "HDF5Data" top: "x" top: "cont" top: "label" top: "extra"
  include { phase: TRAIN } hdf5_data_param { source: "train.txt" batch_size: 2 } }
layer { name: "data" type: "HDF5Data" top: "x" top: "cont" top: "label" top: "extra"
  include { phase: TEST } hdf5_data_param { source: "test.txt" batch_size: 2 } }
layer { name: "silence" type: "Silence" bottom: "extra" }
layer { name: "lstm1" type: "LSTM" bottom: "x" bottom: "cont" top: "h"
  recurrent_param { num_output: 5 weight_filler { type: "uniform" min: -0.1 max: 0.1 } } }
layer { name: "drop" type: "Dropout" bottom: "h" top: "h" include { phase: TRAIN } }
layer { name: "ip" type: "InnerProduct" bottom: "h" top: "y"
  inner_product_param { num_output: 3 axis: 2 } }
layer { name: "reshape_label" type: "Reshape" bottom: "label" top: "label3"
  reshape_param { shape { dim: 3 dim: 2 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "y" bottom: "label3" top: "loss"
  softmax_param { axis: 2 } }
layer { name: "accuracy" type: "Accuracy" bottom: "y" bottom: "label3" top: "acc"
  include { phase: TEST } accuracy_param { axis: 2 } }
"""
SHAPES = {"x": (3, 2, 4), "cont": (3, 2)}
SHAPE_OPTIONS = ("--shape", "x:3x2x4", "--shape", "cont:3x2")


def write(tmp_path, text: str, name: str = "net.prototxt"):
    path = tmp_path / name
    path.write_text(text)
    return path


def line_of(text: str, needle: str) -> int:
    return text[:text.index(needle)].count("\n") + 1


# ---- the scanner ----------------------------------------------------------------------------


def test_scanner_blanks_unknown_entries_and_keeps_positions():
    text = ('layer { name: "a" type: "TanH" zz_field: 3 zz_msg { b: 1 c { d: "}" } }\n'
            '  include { phase: RUN } }\n')
    scan = scan_prototxt(text, caffe_pb2.NetParameter.DESCRIPTOR)
    assert len(scan.text) == len(text) and scan.text.count("\n") == text.count("\n")
    net = text_format.Parse(scan.text, caffe_pb2.NetParameter())
    assert net.layer[0].name == "a" and len(net.layer[0].include) == 1
    (entry,) = scan.layer_entries()
    found = [(u.path, u.kind, u.line, u.column, u.value, u.rule) for u in entry.unknown]
    assert found == [("zz_field", "field", 1, text.index("zz_field") + 1, "", None),
                     ("zz_msg", "message", 1, text.index("zz_msg") + 1, "", None),
                     ("include.phase", "value", 2, 13, "RUN", ("include", 0))]


@pytest.mark.parametrize("text", [
    'layer { name: "a" ', 'layer { name: }', 'layer { name: "a" } }', 'a: [1, 2', 'layer {{',
    '@', 'layer { zz { ', "layer { name: 'unterminated\n}", "zz: -", "layer < name: 'a' }",
])
def test_scanner_never_raises_on_broken_text(text):
    scan_prototxt(text, caffe_pb2.NetParameter.DESCRIPTOR)


def test_syntax_errors_keep_their_line_and_column(tmp_path):
    """A syntax error after an unknown field is where it is in the file as written."""
    text = INPUT + 'layer { name: "t" zz_unknown { a: 1 } type: "TanH" bottom: "x" top: y }\n'
    with pytest.raises(ModelLoadError) as info:
        caffe_lstm.load(write(tmp_path, text))
    column = text.splitlines()[2].index("y }") + 1
    assert info.value.where.endswith(f"net.prototxt:3:{column}"), info.value.where


# ---- unknown fields: where they are harmless, where not -----------------------------------


# An ImageData reader of 6 grey 1x4 images, reshaped to 3 steps x 2 streams, and a cont input.
IMAGE_NET = (
    'layer { name: "data" type: "ImageData" top: "img" top: "label"\n'
    '  image_data_param { source: "l.txt" batch_size: 6 new_height: 1 new_width: 4\n'
    '    is_color: false color_aug: true } }\n'
    'layer { name: "input" type: "Input" top: "cont" input_param { shape { dim: 3 dim: 2 } } }\n'
    'layer { name: "r" type: "Reshape" bottom: "img" top: "x"\n'
    '  reshape_param { shape { dim: 3 dim: 2 dim: -1 } } }\n' + LSTM + IP)
LOSS = ('layer { name: "loss" type: "SoftmaxWithLoss" bottom: "y" bottom: "label" top: "loss"\n'
        '  softmax_param { axis: 2 smooth_label: 0.1 } }\n')
# ROIAlign (Detectron-era forks) is a type and a message our schema does not know.
POST = ('layer { name: "post" type: "ROIAlign" bottom: "y" top: "z"\n'
        '  roi_align_param { spatial_scale: 0.0625 pooled_h: 7 } }\n')


@pytest.mark.parametrize("text, args, layer, field", [
    pytest.param(IMAGE_NET, (), "data", "image_data_param.color_aug", id="dropped-data-layer"),
    pytest.param(DEPLOY.replace('top: "cont"', 'top: "cont" top: "label"').replace(
        "shape { dim: 3 dim: 2 } }", "shape { dim: 3 dim: 2 } shape { dim: 3 dim: 2 } }") + LOSS,
        (), "loss", "softmax_param.smooth_label", id="loss-layer"),
    pytest.param(DEPLOY + POST, ("--outputs", "y"), "post", "roi_align_param",
                 id="cut-off-layer"),
])
def test_unknown_fields_on_layers_not_converted_are_listed(tmp_path, invoke, text, args, layer,
                                                            field):
    path = write(tmp_path, text)
    result = invoke("inspect", path, "--json", *args)
    assert result.exit_code == 0, result.stderr
    (entry,) = json.loads(result.stdout)["unknown"]
    assert (entry["layer"], entry["field"], entry["reason"]) == (
        layer, field, "the layer is not converted")
    assert entry["line"] == line_of(text, field.split(".")[-1] + (" {" if "." not in field
                                                                  else ":"))
    verbose = invoke("-v", "inspect", path, *args)
    assert verbose.exit_code == 0
    assert "warning: skipped the unknown" in verbose.stderr
    assert f"'{field}' of layer '{layer}'" in verbose.stderr


def test_a_fork_message_unknown_as_a_whole_is_one_entry(tmp_path):
    text = DEPLOY + POST
    net = caffe_lstm.load(write(tmp_path, text), outputs=["y"])
    (skipped,) = net.unknown_fields
    assert (skipped.layer, skipped.type, skipped.field, skipped.kind, skipped.line) == (
        "post", "ROIAlign", "roi_align_param", "message", 8)


@pytest.mark.parametrize("layer, field, found", [
    (LSTM.replace("num_output: 5", "num_output: 5 zoneout_ratio: 0.1"), "lstm1",
     "the unknown field 'recurrent_param.zoneout_ratio'"),
    (LSTM.replace("num_output: 5 }", "num_output: 5 } layer_norm { eps: 0.001 }"), "lstm1",
     "the unknown message 'layer_norm'"),
])
def test_unknown_field_on_a_converted_lstm_is_one_error_line(tmp_path, layer, field, found):
    text = INPUT + layer + IP
    with pytest.raises(ModelLoadError) as info:
        caffe_lstm.load(write(tmp_path, text))
    line = info.value.line()
    assert "\n" not in line
    assert f"layer '{field}' (LSTM) has {found}" in line
    assert f"net.prototxt:{line_of(text, found.split(chr(39))[1].split('.')[-1])}:" in line
    assert "remove it if it only tunes training" in line and "outputs=[NAME, ...]" in line


def test_unknown_field_and_enum_value_on_a_convolution(tmp_path, invoke):
    text = ('layer { name: "input" type: "Input" top: "img"\n'
            '  input_param { shape { dim: 1 dim: 3 dim: 8 dim: 8 } } }\n'
            'layer { name: "conv" type: "Convolution" bottom: "img" top: "c"\n'
            '  convolution_param { num_output: 4 kernel_size: 3\n'
            '    deformable_group: 2 } }\n'
            'layer { name: "pool" type: "Pooling" bottom: "c" top: "p"\n'
            '  pooling_param { pool: FANCY kernel_size: 2 } }\n')
    result = invoke("inspect", write(tmp_path, text))
    assert result.exit_code == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: layer 'conv' (Convolution) has the unknown field "
                           "'convolution_param.deformable_group'")
    assert "net.prototxt:5:5" in line and "(and 1 more: 'pooling_param.pool' of 'pool')" in line
    # Cut off behind the convolution, the pooling layer's unknown value no longer matters.
    fixed = write(tmp_path, text.replace("deformable_group: 2", ""), "fixed.prototxt")
    assert invoke("inspect", fixed, "--outputs", "c").exit_code == 0
    result = invoke("inspect", fixed)
    assert "the unknown value 'FANCY' of 'pooling_param.pool'" in result.stderr


@pytest.mark.parametrize("harmless", [
    'weight_filler { type: "uniform" min: -0.1 max: 0.1 zz_seed: 3 }',
    "peephole_filler { type: 'constant' }",
    "engine: CUDNN",
    "num_layers: 1",
])
def test_harmless_unknown_fields_on_converted_layers_load(tmp_path, harmless):
    layer = LSTM.replace("num_output: 5", f"num_output: 5 {harmless}")
    layer = layer.replace('top: "h"', 'top: "h" param { lr_mult: 1 zz_lr_scale: 2 }')
    net = caffe_lstm.load(write(tmp_path, INPUT + layer + IP))
    assert net.outputs == {"y": (3, 2, 3)}
    assert all(s.reason == "it cannot change an inference result" for s in net.unknown_fields)


def test_dummy_data_fillers_are_not_harmless(tmp_path):
    text = ('layer { name: "d" type: "DummyData" top: "x"\n'
            '  dummy_data_param { shape { dim: 2 } data_filler { value: 1 zz_scale: 2 } } }\n'
            'layer { name: "t" type: "TanH" bottom: "x" top: "y" }\n')
    with pytest.raises(ModelLoadError, match="dummy_data_param.data_filler.zz_scale"):
        caffe_lstm.load(write(tmp_path, text))


# ---- unknown phases and fork fields ------------------------------------------------------------


def test_an_unknown_phase_matches_no_selection(tmp_path):
    text = DEPLOY + ('layer { name: "run_only" type: "TanH" bottom: "y" top: "z"\n'
                     '  include { phase: RUN } }\n'
                     'layer { name: "kept" type: "Sigmoid" bottom: "y" top: "s"\n'
                     '  exclude { phase: RUN } }\n')
    path = write(tmp_path, text)
    for phase in ("TEST", "TRAIN"):
        net = caffe_lstm.load(path, phase=phase)
        assert [n.name for n in net.graph.nodes] == ["lstm1", "ip", "kept"]
    reasons = {s.layer: s.reason for s in caffe_lstm.load(path).unknown_fields}
    assert reasons == {"run_only": "the include rule holding it matches no phase or stage",
                       "kept": "the exclude rule holding it matches no phase or stage"}


def test_a_stack_of_recurrent_layers_reads_as_the_stack(tmp_path):
    """recurrent_param.num_layers: 2 is the same stack written out (tests/test_fork_recurrent.py
    checks its numbers); here only that such a net now reads."""
    text = INPUT + LSTM.replace("num_output: 5", "num_output: 5 num_layers: 2") + IP
    net = caffe_lstm.load(write(tmp_path, text))
    assert list(net.outputs) == ["y"]


@pytest.mark.parametrize("axis, ok", [(0, True), (1, False)])
def test_continuation_indicator_axis(tmp_path, axis, ok):
    text = ('layer { name: "input" type: "Input" top: "x"\n'
            '  input_param { shape { dim: 4 dim: 1 dim: 3 } } }\n'
            'layer { name: "ci" type: "ContinuationIndicator" top: "cont"\n'
            f'  continuation_indicator_param {{ time_step: 4 batch_size: 1 axis: {axis} }} }}\n'
            + LSTM + IP)
    if ok:
        assert caffe_lstm.load(write(tmp_path, text)).outputs == {"y": (4, 1, 3)}
    else:
        with pytest.raises(UnsupportedLayerError, match="continuation_indicator_param.axis is 1"):
            caffe_lstm.load(write(tmp_path, text))


# ---- train/test nets ----------------------------------------------------------------------------


def test_a_train_test_net_is_its_deploy_graph(tmp_path):
    """The kept graph is exactly the TEST-phase graph minus the training layers: the deploy
    net's layers, inputs and outputs."""
    deploy = caffe_lstm.load(write(tmp_path, DEPLOY, "deploy.prototxt"))
    net = caffe_lstm.load(write(tmp_path, TRAIN_TEST), shapes=SHAPES)
    assert [(n.name, n.op) for n in net.graph.nodes] == \
        [(n.name, n.op) for n in deploy.graph.nodes]
    assert net.inputs == deploy.inputs and net.outputs == deploy.outputs
    assert net.notes == [
        ("converted as the deploy graph, without the layers only training needs: silence "
        "(Silence), reshape_label (Reshape), loss (SoftmaxWithLoss), accuracy (Accuracy)"),
        ("data layers read as net inputs: data (HDF5Data) -> x (3, 2, 4), cont (3, 2); unused "
        "tops dropped: label, extra")]


def test_a_train_test_net_runs_like_its_deploy_net(tmp_path, invoke):
    weights = tmp_path / "w.caffemodel"
    deploy = write(tmp_path, DEPLOY, "deploy.prototxt")
    train = write(tmp_path, TRAIN_TEST)
    assert invoke("weights", "init", deploy, "-o", weights).exit_code == 0
    outs = []
    for net, extra in ((deploy, ()), (train, SHAPE_OPTIONS)):
        out = tmp_path / f"{net.stem}.npz"
        result = invoke("run", net, "-w", weights, "-o", out, *extra)
        assert result.exit_code == 0, result.stderr
        outs.append(dict(np.load(out)))
    assert outs[0].keys() == outs[1].keys() == {"y"}
    np.testing.assert_array_equal(outs[0]["y"], outs[1]["y"])
    assert "note: converted as the deploy graph" in result.stderr


def test_train_phase_drops_the_same_layers(tmp_path):
    net = caffe_lstm.load(write(tmp_path, TRAIN_TEST), phase="TRAIN", shapes=SHAPES)
    assert [n.name for n in net.graph.nodes] == ["lstm1", "drop", "ip"]


def test_inspect_shows_unknown_shapes_and_other_commands_name_the_input(tmp_path, invoke):
    path = write(tmp_path, TRAIN_TEST)
    result = invoke("inspect", path, "--json")
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["inputs"] == {"x": None, "cont": None}
    assert summary["outputs"] == {"y": None} and summary["notes"][0].startswith("converted")
    assert [layer["shapes"] for layer in summary["layers"]] == [[None], [None]]
    result = invoke("weights", "init", path, "-o", tmp_path / "w.caffemodel")
    assert result.exit_code == 1 and not (tmp_path / "w.caffemodel").exists()
    (line,) = result.stderr.strip().splitlines()
    assert "net input(s) 'x', 'cont'" in line and "layer 'data' (HDF5Data) at" in line
    assert "--shape x:DIMS --shape cont:DIMS" in line
    partial = invoke("inspect", path, "--shape", "x:3x2x4")
    assert "x  (3, 2, 4)" in partial.stdout and "cont  ?" in partial.stdout


@pytest.mark.parametrize("layer, shapes", [
    (('type: "MemoryData" top: "d" top: "l" memory_data_param '
      '{ batch_size: 4 channels: 3 height: 5 width: 6 }'), [(4, 3, 5, 6), (4,)]),
    (('type: "ImageData" top: "d" top: "l" transform_param { crop_size: 7 } '
      'image_data_param { batch_size: 2 new_height: 9 new_width: 9 }'), [(2, 3, 7, 7), (2,)]),
    (('type: "ImageData" top: "d" image_data_param { batch_size: 2 new_height: 9 new_width: 8 '
      'is_color: false }'), [(2, 1, 9, 8)]),
    ('type: "ImageData" top: "d" image_data_param { batch_size: 2 }', [None]),
    (('type: "Data" top: "d" top: "l" transform_param { crop_size: 5 } '
      'data_param { batch_size: 3 }'), [(3, 3, 5, 5), (3,)]),
    ('type: "Data" top: "d" data_param { batch_size: 3 }', [None]),
    (('type: "WindowData" top: "d" top: "l" transform_param { crop_size: 5 } '
      'window_data_param { batch_size: 8 }'), [(8, 3, 5, 5), (8,)]),
    ('type: "HDF5Data" top: "d" hdf5_data_param { batch_size: 8 }', [None]),
])
def test_data_layer_shapes_come_from_their_parameters(layer, shapes):
    message = text_format.Parse(f'name: "data" {layer}', caffe_pb2.LayerParameter())
    assert data_layer_shapes(message) == shapes


def test_shape_option_for_a_data_layer_and_its_errors(tmp_path, invoke):
    text = ('layer { name: "data" type: "Data" top: "img" top: "label"\n'
            '  transform_param { crop_size: 4 } data_param { source: "db" batch_size: 2 } }\n'
            'layer { name: "conv" type: "Convolution" bottom: "img" top: "c"\n'
            '  convolution_param { num_output: 2 kernel_size: 3 } }\n'
            'layer { name: "loss" type: "SoftmaxWithLoss" bottom: "c" bottom: "label" }\n')
    path = write(tmp_path, text)
    assert caffe_lstm.load(path).inputs == {"img": (2, 3, 4, 4)}
    assert caffe_lstm.load(path, shapes={"img": (5, 1, 6, 6)}).outputs == {"c": (5, 2, 4, 4)}
    with pytest.raises(ShapeError, match="shapes= names 'label', which is not a net input"):
        caffe_lstm.load(path, shapes={"label": (2,)})
    with pytest.raises(ShapeError, match=r"shapes\['img'\] has 2 dims, the input has 4"):
        caffe_lstm.load(path, shapes={"img": (2, 3)})
    result = invoke("inspect", path, "--shape", "img:1x3x5x5")
    assert result.exit_code == 0 and "c  (1, 2, 3, 3)" in result.stdout
    assert invoke("inspect", path, "--shape", "img:1xx3").exit_code == 2


def test_a_stage_gated_reader_names_the_stage(tmp_path):
    text = TRAIN_TEST.replace("include { phase: TEST }", 'include { phase: TEST stage: "val" }')
    with pytest.raises(CaffeLstmError) as info:
        caffe_lstm.load(write(tmp_path, text))
    assert "produced only by layer 'data' (HDF5Data)" in info.value.what
    assert info.value.hint == "select it with stages=['val']"
    assert caffe_lstm.load(write(tmp_path, text), stages=["val"], shapes=SHAPES).outputs


def test_silence_of_a_computed_blob_is_dropped_without_changing_the_outputs(tmp_path):
    text = TRAIN_TEST.replace('layer { name: "silence" type: "Silence" bottom: "extra" }',
                              'layer { name: "silence" type: "Silence" bottom: "extra" '
                              'bottom: "h" }')
    net = caffe_lstm.load(write(tmp_path, text), shapes=SHAPES)
    assert list(net.outputs) == ["y"] and "silence (Silence)" in net.notes[0]


def test_a_deploy_net_with_silence_is_unchanged(tmp_path):
    text = INPUT.replace('top: "cont"', 'top: "cont" top: "label"').replace(
        "shape { dim: 3 dim: 2 } }", "shape { dim: 3 dim: 2 } shape { dim: 3 dim: 2 } }") \
        + 'layer { name: "silence" type: "Silence" bottom: "label" }\n' + LSTM + IP
    net = caffe_lstm.load(write(tmp_path, text))
    assert [n.op for n in net.graph.nodes] == ["Silence", "LSTM", "InnerProduct"]
    assert net.notes == [] and "label" in net.inputs


def test_a_prediction_computed_on_is_not_an_output(tmp_path):
    """A Softmax beside the loss (as deploy nets end) makes the probabilities the output."""
    text = TRAIN_TEST + ('layer { name: "prob" type: "Softmax" bottom: "y" top: "prob"\n'
                         '  softmax_param { axis: 2 } }\n')
    net = caffe_lstm.load(write(tmp_path, text), shapes=SHAPES)
    assert list(net.outputs) == ["prob"]


def test_a_sourceless_fork_layer_is_refused_naming_its_fork(tmp_path):
    """JEDDi-Net's LSTMController: public prototxts, no public layer source."""
    text = INPUT + ('layer { name: "ctrl" type: "LSTMController" bottom: "x" bottom: "cont"\n'
                    '  top: "h" }\n') + IP
    with pytest.raises(UnsupportedLayerError) as info:
        caffe_lstm.load(write(tmp_path, text))
    assert "LSTMController (ctrl: JEDDi-Net's LSTM with a controller bottom" in info.value.what
    assert "plugins=[...]" in info.value.hint
