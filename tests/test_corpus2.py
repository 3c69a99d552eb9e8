"""The 21 nets of ../shared/corpus2 (its SOURCES.md says where each comes from) as a new user
meets them, through the CLI: every file reads; each net inspects whole, or stops with the one
line that names why (Caffe's stage rule with the --stage that selects it, a Python layer, a
layer whose source is not public); every deploy net that inspects whole gets synthetic weights,
builds an engine, exports to ONNX, and verify passes its three columns (numpy's rewritten graph,
the TensorRT network walked on the CPU, onnxruntime) at the prototxt's shapes or a smaller
--shape. docs/corpus.md keeps the same table. Skipped where ../shared is absent.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import caffe_lstm
from caffe_lstm.frontend.prototxt import read_prototxt
from tests.helpers import ROOT, assert_one_error_line, curve_text_convert

CORPUS2 = ROOT.parent / "shared" / "corpus2"

needs_corpus2 = pytest.mark.skipif(
    not CORPUS2.is_dir(), reason="../shared/corpus2 (public prototxts) is not beside this clone")

#: Curve-Text-Detector's Python proposal layer, cut off: the backbone's RPN outputs.
CTD_CUT = ("--outputs", "rpn_cls_prob_reshape,rpn_bbox_pred")

#: file (under corpus2/) -> the inspect runs: (options, "whole" or the text of the one error
#: line). 17 inspect whole without options.
INSPECT = {
    "Charleen777__caffecode/prototxt__vgg5_lstm1__test.prototxt": [((), "whole")],
    "MyCaffe__MyCaffe/MyCaffe.test__test_data__models__rnn__char_rnn__lstm_simple__train_val"
    ".prototxt": [((), "whole")],
    "MyCaffe__MyCaffe/models__rnn__char_rnn__train_val.prototxt": [((), "whole")],
    "MyCaffe__MyCaffe/models__rnn__char_rnn__train_val_cudnn.prototxt": [((), "whole")],
    "VisionLearningGroup__JEDDi-Net/experiments__denseCap_jeddiNet_end2end__test__test_lstm"
    ".prototxt": [((), ("LSTMTopic (lstm2_2: JEDDi-Net's LSTM with a topic-controller bottom, "
                      "whose layer source is not public)"))],
    "Yuliang-Liu__Curve-Text-Detector/models__ctd__test_ctd_tloc.prototxt": [
        ((), "unsupported layer types: Python (proposal)"), (CTD_CUT, "whole")],
    "christopher5106__last_caffe_with_stn/rnn.prototxt": [((), "whole")],
    "fanchenyou__deepdiary/examples__myexp__lstm_test_lifelog.prototxt": [((), "whole")],
    "hello-ad__stuff/lstm_deploy.prototxt": [((), "whole")],
    "jolibrain__deepdetect/examples__graph__recurrent.prototxt": [((), "whole")],
    "jolibrain__deepdetect/templates__caffe__crnn_resnet_18__deploy.prototxt": [((), "whole")],
    "kaidic__AFEW_Competition/video__alexnet_lstm_deploy.prototxt": [((), "whole")],
    "kaidic__AFEW_Competition/video__inception21k_lstm_deploy_sim.prototxt": [((), "whole")],
    "kimmo1019__LRCN/src__deploy_lstm.prototxt": [((), "whole")],
    "linjieyangsc__densecap/models__dense_cap__test_cap_pred_context.prototxt": [((), "whole")],
    "linjieyangsc__densecap/models__dense_cap__test_cap_pred_no_context.prototxt": [
        ((), "whole")],
    # the stage its error names selects its concat variant, which then stops only at
    # densecap's Python region layers (their modules are not in the corpus; Fast R-CNN's
    # ROIPooling is built in)
    "linjieyangsc__densecap/models__dense_cap__train_cap_late_fusion.prototxt": [
        ((), "select it with --stage concat"),
        (("--stage", "concat"), (("unsupported layer types: Python (proposal, roi-data, "
                                 "global_roi, id2sentence), "), "--python-path DIR"))],
    "sunsided__audiolearn/lstm.prototxt": [((), "whole")],
    "vsubhashini__noc/examples__noc__3loss_coco_fc7_voc72klabel.shared_glove72k.prototxt": [
        ((), "select it with --stage test-on-train"), (("--stage", "test-on-train"), "whole")],
    "vsubhashini__noc/examples__noc__deploy.3loss_coco_fc7_voc72klabel.shared_glove.prototxt": [
        ((), "whole")],
    "xiaolonw__lisa-caffe-lstm/video_script__rgb_zero_cls__test_lstm_RGB.prototxt": [
        ((), "whole")],
}

#: The deploy nets (SOURCES.md) but JEDDi-Net's -> the options of weights init, convert,
#: export and verify: CNN front ends at small images (the same layers and LSTMs, fc6 reading a
#: smaller pool5), Curve-Text-Detector cut before its Python layer, and NOC without its
#: 298M-parameter image predictor (a plain InnerProduct of mean_fc7, beside the LSTM's path).
DEPLOY = {
    "jolibrain__deepdetect/templates__caffe__crnn_resnet_18__deploy.prototxt":
        ("--shape", "data:1x3x32x64"),
    "linjieyangsc__densecap/models__dense_cap__test_cap_pred_context.prototxt": (),
    "linjieyangsc__densecap/models__dense_cap__test_cap_pred_no_context.prototxt": (),
    "Yuliang-Liu__Curve-Text-Detector/models__ctd__test_ctd_tloc.prototxt":
        (*CTD_CUT, "--shape", "data:1x3x64x64"),
    "vsubhashini__noc/examples__noc__deploy.3loss_coco_fc7_voc72klabel.shared_glove.prototxt":
        ("--outputs", "predict-lm"),
    "kaidic__AFEW_Competition/video__alexnet_lstm_deploy.prototxt":
        ("--shape", "data:15x3x67x67"),
    "kaidic__AFEW_Competition/video__inception21k_lstm_deploy_sim.prototxt":
        ("--shape", "data:15x3x64x64"),
    "hello-ad__stuff/lstm_deploy.prototxt": ("--shape", "data:8x3x32x32"),
    "kimmo1019__LRCN/src__deploy_lstm.prototxt": (),
}


def corpus2_path(name: str):
    return CORPUS2 / name


@needs_corpus2
def test_every_corpus2_file_is_listed_and_reads():
    found = sorted(p.relative_to(CORPUS2).as_posix() for p in CORPUS2.rglob("*.prototxt"))
    assert found == sorted(INSPECT) and len(found) == 21
    for name in found:
        assert read_prototxt(corpus2_path(name)).layers, name
    whole = [name for name, runs in INSPECT.items() if runs[0][1] == "whole"]
    assert len(whole) == 17


@needs_corpus2
@pytest.mark.parametrize("name", sorted(INSPECT))
def test_corpus2_net_inspects_whole_or_names_why(invoke, name):
    for options, outcome in INSPECT[name]:
        result = invoke("inspect", corpus2_path(name), *options)
        assert "Traceback" not in result.stderr
        if outcome == "whole":
            assert result.exit_code == 0, result.stderr
            assert re.search(r"^recurrent layers \(expanded by the rewrite\): ", result.stdout,
                             re.M), result.stdout
        else:  # one needle or several, all in the one line
            for needle in (outcome,) if isinstance(outcome, str) else outcome:
                assert_one_error_line(result, needle)


@needs_corpus2
def test_the_sourceless_layer_names_the_plugin_route(invoke):
    (name,) = [n for n in INSPECT if n.startswith("VisionLearningGroup")]
    line = assert_one_error_line(invoke("inspect", corpus2_path(name)))
    assert "--plugin" in line and "docs/plugins.md" in line


@needs_corpus2
@pytest.mark.parametrize("name", sorted(DEPLOY))
def test_corpus2_deploy_net_builds_exports_and_verifies(invoke, tmp_path, name):
    pytest.importorskip("tensorrt_rtx_bindings")
    pytest.importorskip("onnxruntime")
    net, options = corpus2_path(name), DEPLOY[name]
    weights, engine, model = (tmp_path / "w.caffemodel", tmp_path / "net.engine",
                              tmp_path / "net.onnx")
    for args in (("weights", "init", net, "-o", weights),
                 ("convert", net, "-w", weights, "-o", engine, "--runtime", "tensorrt-rtx"),
                 ("export", net, "-w", weights, "-o", model)):
        result = invoke(*args, *options)
        assert result.exit_code == 0, (args[0], result.stderr)
    assert engine.read_bytes()[:4] == b"vtrt" and model.stat().st_size > 0
    result = invoke("verify", net, "-w", weights, "--runtime", "tensorrt-rtx", "--onnxruntime",
                    *options, *VERIFY_TOLERANCES.get(name, ()))
    # weights init's default keeps every output's signal, the 69 BatchNorm/Scale blocks of
    # the Inception+LSTM included (BatchNorm measured on its input, Scale near 1 and 0)
    assert result.exit_code == 0, result.stdout + result.stderr
    assert " no signal" not in result.stdout, result.stdout
    columns = re.split(r"^original equations vs ", result.stdout, flags=re.M)[1:]
    assert [c.split("\n")[0].split(" (")[0].split(",")[0] for c in columns] == [
        "rewritten graph", "TensorRT network", "ONNX model"], result.stdout
    for column in columns:
        rows = [line for line in column.splitlines()[2:]
                if line.strip() and " is not checked: " not in line]  # the engine's line
        assert rows and all(line.endswith(" ok") for line in rows), result.stdout


#: Where float32 alone exceeds verify's default tolerances: with the signal alive through
#: Curve-Text-Detector's 100-odd ResNet layers (unit-scale values), orders of summation differ
#: by up to 2.4e-4 at its outputs (the first layer beyond 1e-5: res2c, 10 layers in).
VERIFY_TOLERANCES = {"Yuliang-Liu__Curve-Text-Detector/models__ctd__test_ctd_tloc.prototxt":
                     ("--atol", "1e-3", "--rtol", "1e-3")}


@needs_corpus2
def test_deepdiary_caption_net_verifies_at_a_given_batch(invoke, tmp_path):
    """The deepdiary test net (HDF5 data: the batch is the data's) with 2 images and their
    30-word sentences: CaptionInput and the hidden_size Lstm in numpy, TensorRT and ONNX."""
    pytest.importorskip("tensorrt_rtx_bindings")
    pytest.importorskip("onnxruntime")
    (name,) = [n for n in INSPECT if n.startswith("fanchenyou")]
    shapes = ("--shape", "img:2x4096", "--shape", "sent:2x30")
    weights = tmp_path / "w.caffemodel"
    result = invoke("weights", "init", corpus2_path(name), "-o", weights, *shapes)
    assert result.exit_code == 0, result.stderr
    # its 4539-word ip2 reads an LSTM of 30 steps: float32 differs by up to 2e-5 there
    result = invoke("verify", corpus2_path(name), "-w", weights, "--runtime", "tensorrt-rtx",
                    "--onnxruntime", *shapes, "--atol", "5e-5")
    assert result.exit_code == 0 and result.stdout.count(" ok\n") == 3, result.stdout


@needs_corpus2
def test_deepdiary_caption_net_exported_for_a_batch_range_runs_at_other_batches(invoke,
                                                                                 tmp_path):
    """CaptionInput's ONNX and TensorRT forms reshape with -1 for N (they baked OPT's N: the
    model exported with a batch range failed at every other batch). The model exported for
    batches 1-4 runs 4 images as numpy does, through the CLI; TensorRT's network for the same
    range, evaluated at 4 images, too."""
    pytest.importorskip("onnxruntime")
    (name,) = [n for n in INSPECT if n.startswith("fanchenyou")]
    net, weights, model = corpus2_path(name), tmp_path / "w.caffemodel", tmp_path / "m.onnx"
    opt = ("--shape", "img:2x4096", "--shape", "sent:2x30")  # the data layer leaves N open
    assert invoke("weights", "init", net, "-o", weights, *opt).exit_code == 0
    # the ranges alone shape the open inputs (at OPT)
    result = invoke("export", net, "-w", weights, "-o", model, "--shape",
                    "img:1x4096:2x4096:4x4096", "--shape", "sent:1x30:2x30:4x30")
    assert result.exit_code == 0, result.stderr
    rng = np.random.default_rng(5)
    feeds = {"img": rng.normal(size=(4, 4096)).astype(np.float32),
             "sent": rng.integers(-1, 4539, size=(4, 30)).astype(np.float32)}
    np.savez(tmp_path / "in.npz", **feeds)
    four = ("--shape", "img:4x4096", "--shape", "sent:4x30")
    outputs = {}
    for backend in ("numpy", "onnxruntime"):
        extra = ("--onnx", model) if backend == "onnxruntime" else ()
        result = invoke("run", net, "-w", weights, *four, "--inputs", tmp_path / "in.npz",
                        "-o", tmp_path / f"{backend}.npz", "--backend", backend, *extra)
        assert result.exit_code == 0, result.stderr
        with np.load(tmp_path / f"{backend}.npz") as out:
            outputs[backend] = out["ip2"]
    assert outputs["numpy"].shape == (31 * 4, 4539)
    # its 4539-word ip2 reads an LSTM of 30 steps: float32 differs by up to 2e-5 there
    np.testing.assert_allclose(outputs["onnxruntime"], outputs["numpy"], atol=5e-5, rtol=0)
    pytest.importorskip("tensorrt_rtx_bindings")
    from caffe_lstm.backends.tensorrt.build import BuildOptions, emit
    from caffe_lstm.backends.tensorrt.network_eval import evaluate_network
    from caffe_lstm.backends.tensorrt.runtime import load_runtime
    runtime = load_runtime("tensorrt-rtx")
    graph = caffe_lstm.load(net, weights, shapes={"img": (2, 4096), "sent": (2, 30)}
                            ).rewritten().graph
    ranges = {"img": ((1, 4096), (2, 4096), (4, 4096)), "sent": ((1, 30), (2, 30), (4, 30))}
    _, network, _ = emit(runtime, graph, BuildOptions(shapes=ranges))
    got = evaluate_network(runtime.trt, network, feeds)
    np.testing.assert_allclose(got["ip2"], outputs["numpy"], atol=5e-5, rtol=0)


#: A Caffe Python layer standing in for Curve-Text-Detector's rpn.proposal_layer (its module is
#: not in the corpus): three fixed regions (batch index, x1, y1, x2, y2) in image pixels.
FIXED_PROPOSALS = '''import caffe
import numpy as np


class ProposalLayer(caffe.Layer):
    def setup(self, bottom, top):
        self.rois = np.array([[0, 0, 0, 63, 63], [0, 8, 4, 40, 30], [0, 16, 16, 47, 60]],
                             np.float32)

    def reshape(self, bottom, top):
        top[0].reshape(*self.rois.shape)

    def forward(self, bottom, top):
        top[0].data[...] = self.rois
'''


@needs_corpus2
def test_curve_text_detector_convert_runs_on_its_net_as_the_fork(invoke, tmp_path):
    """Curve-Text-Detector's own Convert layer (conv_lstm_h: one bottom, two tops) run in its
    net past the Python proposal layer (given fixed regions through --python-path), after
    PSROIPooling and the Reshape: its tops equal the port of ConvertLayer::Forward_cpu of the
    blob the net fed it, and the LSTM reading them gives (W, S, 128)."""
    (name,) = [n for n in INSPECT if n.startswith("Yuliang-Liu")]
    package = tmp_path / "py" / "rpn"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "proposal_layer.py").write_text(FIXED_PROPOSALS)
    options = ("--outputs", "im2col_transpose_h,conv_lstm_h,cont_sentence_h,lstm1_h",
               "--shape", "data:1x3x64x64", "--python-path", tmp_path / "py")
    weights, out = tmp_path / "w.caffemodel", tmp_path / "out.npz"
    result = invoke("weights", "init", corpus2_path(name), "-o", weights, *options)
    assert result.exit_code == 0, result.stderr
    result = invoke("run", corpus2_path(name), "-w", weights, "-o", out, *options)
    assert result.exit_code == 0, result.stderr
    blobs = np.load(out)
    fed = blobs["im2col_transpose_h"]
    assert fed.shape == (3, 49, 1, 16)  # 3 regions, 7x7 bins, 16 steps of the curve
    sequence, cont = curve_text_convert(fed)
    np.testing.assert_array_equal(blobs["conv_lstm_h"], sequence)
    np.testing.assert_array_equal(blobs["cont_sentence_h"], cont)
    assert blobs["lstm1_h"].shape == (16, 3, 128) and np.isfinite(blobs["lstm1_h"]).all()
    assert np.abs(blobs["lstm1_h"]).max() > 0


@needs_corpus2
def test_charleen777_grid_is_shaped_through_at_its_image_size(invoke):
    """vgg5_lstm1's grid as the file writes it: ZerosData's (4096, 64) pins upsample/pool5 to
    64x64 pixels, which a 256x256 SiftFlow image gives; every layer of the grid (Transpose
    LSTMINPUT, GRIDLSTM x3, LSTMOUTPUT, the 18 LstmUnit cells) is then shaped, and any other
    size stops at the first LstmUnit naming its memory bottom. (Running it needs the VGG at
    256x256: ~36 s and float32 drift from conv4_1 on, beyond this suite's budget.)"""
    (name,) = [n for n in INSPECT if n.startswith("Charleen777")]
    result = invoke("inspect", corpus2_path(name), "--shape", "data:1x3x256x256")
    assert result.exit_code == 0, result.stderr
    layers = [line for line in result.stdout.splitlines() if re.match(r"^  \S+ \(\w+\): ", line)]
    assert layers and not [line for line in layers if "?" in line], result.stdout
    units = [line for line in layers if " (LstmUnit): " in line]
    assert len(units) == 18 and all("(4096, 64), (4096, 64)" in u for u in units), units
    assert "lstm_input (Transpose): upsample/pool5 -> lstm_input  (4096, 512)" in result.stdout
    assert "score1 (Transpose): lstm2/h/input -> score1  (1, 576, 64, 64)" in result.stdout
    small = invoke("inspect", corpus2_path(name), "--shape", "data:1x3x32x32")
    assert_one_error_line(small, "layer 'lstm0/0' (LstmUnit)")


#: MyCaffe's char-RNN nets (train_val: Input, Embed, two LSTMs, the loss) cut at their last LSTM
#: and shortened: LstmSimple reads T·N rows and a clip per row (the file's 75x1), Lstm by
#: recurrent_param (dropout_seed, the cuDNN fields) reads (T, N).
MYCAFFE_CUTS = {
    "MyCaffe__MyCaffe/MyCaffe.test__test_data__models__rnn__char_rnn__lstm_simple__train_val"
    ".prototxt": ("--outputs", "lstm2", "--shape", "data:12x1", "--shape", "clip:12x1"),
    "MyCaffe__MyCaffe/models__rnn__char_rnn__train_val.prototxt":
        ("--outputs", "lstm2", "--shape", "data:6x2", "--shape", "clip:6x2"),
    "MyCaffe__MyCaffe/models__rnn__char_rnn__train_val_cudnn.prototxt":
        ("--outputs", "lstm1", "--shape", "data:6x2", "--shape", "clip:6x2"),
}


@needs_corpus2
@pytest.mark.parametrize("name", sorted(MYCAFFE_CUTS))
def test_mycaffe_char_rnn_verifies_as_the_file_writes_it(invoke, tmp_path, name):
    """The forks' spellings (LstmSimple, Lstm with recurrent_param's dropout_seed and cuDNN
    fields) in MyCaffe's own files: numpy's rewrite, TensorRT's network and onnxruntime equal
    the fork's equations at a short sequence."""
    pytest.importorskip("tensorrt_rtx_bindings")
    pytest.importorskip("onnxruntime")
    weights, options = tmp_path / "w.caffemodel", MYCAFFE_CUTS[name]
    result = invoke("weights", "init", corpus2_path(name), "-o", weights, *options)
    assert result.exit_code == 0, result.stderr
    result = invoke("verify", corpus2_path(name), "-w", weights, "--runtime", "tensorrt-rtx",
                    "--onnxruntime", *options)
    assert result.exit_code == 0 and result.stdout.count(" ok\n") == 3, result.stdout
    assert " no signal" not in result.stdout, result.stdout
