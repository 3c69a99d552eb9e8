"""`caffe-lstm rewrite` on real files: the written prototxt + caffemodel, read back by `run`, give
the outputs of the original net run from the recurrent equations (`run --original`); `--unroll`
writes plain upstream Caffe that shares the recurrent weights by param name."""

from __future__ import annotations

import re
import shutil
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from caffe_lstm.frontend.caffe_writer import to_net_parameter, write_prototxt
from caffe_lstm.cli import cli
from caffe_lstm.errors import OutputError
from caffe_lstm.feeds import random_feeds
from caffe_lstm.frontend.caffemodel import read_caffemodel
from caffe_lstm.frontend.caffe_writer import write_caffemodel
from caffe_lstm.frontend.loader import load_net
from caffe_lstm.frontend.prototxt import read_prototxt
from caffe_lstm.frontend.upgrade import V1_TYPES
from caffe_lstm.ops import get_op, registered_types
from caffe_lstm.synthetic import synthetic_weights
from tests.helpers import (
    ROOT, assert_one_error_line, corpus_files, needs_corpus, sample, shape_options, small_shapes,
)

SAMPLE_NAMES = ["seq_classifier", "captioner"]
FORMS = {"loop": (), "unrolled": ("--unroll",)}

#: Layer types of upstream BVLC Caffe master: the V1 enum's types plus the V2-only ones. LSTM
#: and RNN are master types too, but an unrolled net must not contain them, so they are left out.
MASTER_TYPES = {t for t in V1_TYPES.values() if t} | {
    "Input", "Embed", "Reshape", "Scale", "Bias", "Tile", "Flatten", "Reduction", "Softmax",
    "DummyData", "Parameter", "BatchNorm", "ELU", "Crop", "Log", "PReLU", "SPP", "Swish", "Clip",
}
NOT_IN_UNROLLED = {"Loop", "LSTM", "RNN", "Lstm"}
#: Fork layer types a corpus net may keep in its unrolled form: they are not recurrent and
#: upstream Caffe has no equivalent (a Permute is an axis transpose, which master cannot express).
FORK_TYPES = {"Permute", "Transpose", "Reverse", "ContinuationIndicator", "CTCGreedyDecoder"}

#: Corpus nets cut to their LSTM part with --outputs, to keep each case to a few seconds: most
#: cut layers are vocabulary-sized (N·vocab outputs, or 72701×2048 weights).
CORPUS_CUTS = {
    "examples__coco_caption__lrcn_word_to_preds.deploy.prototxt": "lstm2",  # N = 1000
    "prototxt__scrc_word_to_preds_full.prototxt": "lstm1",  # T·N = 2000, H = 1000
    "examples__s2vt__s2vt.words_to_preds.deploy.prototxt": "lstm2",
    "examples__language_fusion__deploy_lm_deepfus_img512_s2vt_glove.words_to_preds.prototxt":
        "lstm_vidlm_textlm",
    # T = 320 unrolls to 4490 layers per LSTM: two of the three stacked LSTMs suffice.
    "examples__lstm_sequence__deep_lstm_short.prototxt": "lstm2",
}
def _loadable_corpus() -> list[Path]:
    """The corpus nets that `caffe-lstm inspect` accepts (the deploy nets)."""
    runner = CliRunner()
    return [path for path in corpus_files()
            if runner.invoke(cli, ["inspect", str(path)]).exit_code == 0]


LOADABLE_CORPUS = _loadable_corpus()


# ---- the reference: the original net, run from the recurrent equations ---------------------


class Reference:
    """A net, its weights, seeded inputs and the outputs of `run --original` on them."""

    def __init__(self, folder: Path, net: Path, weights: Path, outputs: str) -> None:
        self.net, self.weights = net, weights
        shapes = small_shapes(net)
        self.selection = (["--outputs", outputs] if outputs else []) + shape_options(shapes)
        graph = load_net(net, outputs=outputs.split(",") if outputs else (), shapes=shapes).graph
        self.feeds = random_feeds(graph, seed=3)
        self.inputs = folder / "in.npz"
        np.savez(self.inputs, **self.feeds)
        out = folder / "reference.npz"
        result = _invoke("run", net, "-w", weights, "--original", "--inputs", self.inputs,
                         "-o", out, *self.selection)
        assert result.exit_code == 0, result.stderr
        self.outputs = dict(np.load(out))


def _invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def reference(module_scratch):
    """Reference of a sample (its own caffemodel) or a corpus net (seeded synthetic weights),
    made once per net for both forms."""
    cache: dict[Path, Reference] = {}

    def _get(net: Path, weights: Path | None = None, outputs: str = "") -> Reference:
        if net not in cache:
            folder = module_scratch.mktemp(net.stem[:40])
            if weights is None:
                weights = folder / "synthetic.caffemodel"
                graph = load_net(net, outputs=outputs.split(",") if outputs else (),
                                 shapes=small_shapes(net)).graph
                # Small weights keep the 1000-wide LSTMs out of saturation, where every output
                # would be ±1 whatever the wiring.
                write_caffemodel(weights, synthetic_weights(graph, seed=7, scale=0.05))
            cache[net] = Reference(folder, net, weights, outputs)
        return cache[net]

    return _get


def _rewrite(invoke, ref: Reference, outdir: Path, form: str) -> tuple[Path, Path]:
    result = invoke("rewrite", ref.net, "-w", ref.weights, "-o", outdir, *FORMS[form],
                    *ref.selection)
    assert result.exit_code == 0, result.stderr
    written = outdir / f"{ref.net.stem}.prototxt", outdir / f"{ref.net.stem}.caffemodel"
    assert sorted(outdir.iterdir()) == sorted(written)  # no temporary files left
    return written


def _check_round_trip(invoke, ref: Reference, tmp_path: Path, form: str) -> None:
    """The written net declares the original inputs and, run on the reference inputs without
    --outputs, gives the reference outputs (its unconsumed blobs are exactly those)."""
    net, weights = _rewrite(invoke, ref, tmp_path / "out" / form, form)
    layers = read_prototxt(net)[0].layer
    declared = [top for layer in layers if layer.type == "Input" for top in layer.top]
    assert sorted(declared) == sorted(ref.feeds)
    out = tmp_path / "written_out.npz"
    result = invoke("run", net, "-w", weights, "--inputs", ref.inputs, "-o", out)
    assert result.exit_code == 0, result.stderr
    got = dict(np.load(out))
    assert sorted(got) == sorted(ref.outputs)
    for name, want in ref.outputs.items():
        np.testing.assert_allclose(got[name], want, rtol=0, atol=1e-5, err_msg=name)
    if form == "unrolled":
        original = {layer.type for layer in read_prototxt(ref.net)[0].layer}
        _check_plain_caffe(layers, weights, allowed=original & FORK_TYPES)


# ---- --unroll: plain Caffe ---------------------------------------------------------------------


def _check_plain_caffe(layers, weights: Path, allowed: set[str] = frozenset()) -> None:
    """Master layer types only (plus ``allowed`` fork types the original net had); every layer
    with params has its own blobs in the caffemodel; the copies of one step layer
    (`__<layer>/t<k>/<name>`) share their param names and data."""
    types = {layer.type for layer in layers}
    assert types <= MASTER_TYPES | allowed and not types & NOT_IN_UNROLLED, types - MASTER_TYPES
    stored = {entry.name: entry.blobs for entry in read_caffemodel(weights)}
    for layer in layers:
        if layer.param:
            assert layer.name in stored, layer.name
            assert len(stored[layer.name]) == len(layer.param), layer.name
    steps = defaultdict(list)  # (layer, step layer name) -> its copies, one per time step
    for layer in layers:
        match = re.fullmatch(r"__(.+)/t\d+/(.+)", layer.name)
        if match and layer.param:
            steps[match.groups()].append(layer)
    for copies in steps.values():
        names = [[p.name for p in copy.param] for copy in copies]
        assert all(n == names[0] for n in names), names
        for index in range(len(names[0])):
            first = stored[copies[0].name][index].data
            assert all(np.array_equal(stored[c.name][index].data, first) for c in copies)


# ---- the tests -----------------------------------------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_rewritten_sample_runs_like_the_original(invoke, reference, tmp_path, name, form):
    _check_round_trip(invoke, reference(*sample(name)), tmp_path, form)


@needs_corpus()
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("path", LOADABLE_CORPUS, ids=lambda p: p.name)
def test_rewritten_corpus_net_runs_like_the_original(invoke, reference, tmp_path, path, form):
    # LRCN_evaluate's inputs are DummyData constants (zeros): there it checks the wiring and
    # the biases only.
    _check_round_trip(invoke, reference(path, outputs=CORPUS_CUTS.get(path.name, "")),
                      tmp_path, form)


@needs_corpus()
def test_the_corpus_has_nets_to_rewrite():
    assert len(LOADABLE_CORPUS) >= 7  # the deploy nets without convolutions


@pytest.mark.parametrize("name, steps", [("seq_classifier", 12), ("captioner", 10)])
def test_unrolled_steps_share_w_hc_by_name_and_store_it(invoke, tmp_path, name, steps):
    net, weights = sample(name)
    result = invoke("rewrite", net, "-w", weights, "-o", tmp_path, "--unroll")
    assert result.exit_code == 0, result.stderr
    layers = read_prototxt(tmp_path / f"{name}.prototxt")[0].layer
    sharing = [layer.name for layer in layers if [p.name for p in layer.param] == ["lstm1/W_hc"]]
    assert sharing == [f"__lstm1/t{t}/transform" for t in range(1, steps + 1)]
    w_hc = {e.name: e.blobs for e in read_caffemodel(weights)}["lstm1"][2]  # W_xc, b_c, W_hc
    stored = {e.name: e.blobs for e in read_caffemodel(tmp_path / f"{name}.caffemodel")}
    for layer in sharing:
        np.testing.assert_array_equal(stored[layer][0].data, w_hc.data)


def test_loop_form_keeps_one_loop_per_recurrent_layer(invoke, tmp_path):
    net, weights = sample("captioner")
    assert invoke("rewrite", net, "-w", weights, "-o", tmp_path).exit_code == 0
    layers = read_prototxt(tmp_path / "captioner.prototxt")[0].layer
    loops = [layer for layer in layers if layer.type == "Loop"]
    assert [loop.name for loop in loops] == ["__lstm1/loop", "__lstm2/loop"]
    body = loops[0].loop_param
    assert (body.num_iterated, body.num_sequence_outputs) == (2, 1)
    assert [(s.name, s.size, s.has_initial) for s in body.state] == [("h", 24, False),
                                                                     ("c", 24, False)]
    assert all(layer.name.startswith("__lstm1/") for layer in body.layer)
    stored = {e.name for e in read_caffemodel(tmp_path / "captioner.caffemodel")}
    assert "__lstm1/transform" in stored  # the body's W_hc, under the body layer's name


def test_without_weights_only_the_prototxt_is_written(invoke, tmp_path):
    net, _ = sample("seq_classifier")
    outdir = tmp_path / "a" / "b"  # made, parents too
    result = invoke("rewrite", net, "-o", outdir)
    assert result.exit_code == 0, result.stderr
    assert list(outdir.iterdir()) == [outdir / "seq_classifier.prototxt"]


# ---- errors: one line, exit 1, nothing left behind --------------------------------------------


def test_unwritable_outdir_leaves_nothing(invoke, tmp_path):
    net, weights = sample("captioner")
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = invoke("rewrite", net, "-w", weights, "-o", blocker / "out", "--unroll")
    assert_one_error_line(result, "cannot create the output directory")
    assert list(tmp_path.iterdir()) == [blocker]


def test_failing_caffemodel_removes_the_prototxt_again(invoke, tmp_path):
    net, weights = sample("captioner")
    (tmp_path / "captioner.caffemodel").mkdir()  # a directory where the caffemodel must go
    result = invoke("rewrite", net, "-w", weights, "-o", tmp_path)
    assert_one_error_line(result, "cannot write the output")
    assert list(tmp_path.iterdir()) == [tmp_path / "captioner.caffemodel"]


def test_created_outdirs_are_removed_when_the_caffemodel_fails(invoke, tmp_path, monkeypatch):
    def fail(path, *args, **kwargs):
        raise OutputError("cannot write the output (No space left on device)", str(path))

    monkeypatch.setattr("caffe_lstm.frontend.caffe_writer.write_caffemodel", fail)
    net, weights = sample("captioner")
    result = invoke("rewrite", net, "-w", weights, "-o", tmp_path / "new" / "deeper")
    assert_one_error_line(result, "No space left on device")
    assert list(tmp_path.iterdir()) == []


def test_outdir_of_the_net_itself_is_refused(invoke, tmp_path):
    net, weights = sample("seq_classifier")
    shutil.copy(net, tmp_path / net.name)
    shutil.copy(weights, tmp_path / weights.name)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    result = invoke("rewrite", tmp_path / net.name, "-w", tmp_path / weights.name, "-o", tmp_path)
    assert_one_error_line(result, "would overwrite an input file")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


# ---- the writer is the inverse of the ops' parse -------------------------------------------------


def test_every_registered_op_has_a_writer():
    assert all(callable(get_op(op_type).caffe) for op_type in registered_types())


ALL_PARAMS_NET = """
layer { name: "input" type: "Input" top: "x" top: "cont" top: "ids" top: "seq"
        input_param { shape { dim: 3 dim: 2 dim: 4 } shape { dim: 3 dim: 2 }
                      shape { dim: 3 dim: 2 } shape { dim: 6 dim: 4 } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "ip"
        inner_product_param { num_output: 4 bias_term: false axis: -1 transpose: true } }
layer { name: "emb" type: "Embed" bottom: "ids" top: "emb"
        embed_param { num_output: 4 input_dim: 7 bias_term: false } }
layer { name: "sum" type: "Eltwise" bottom: "ip" bottom: "emb" top: "sum"
        eltwise_param { operation: SUM coeff: 0.5 coeff: -2 } }
layer { name: "max" type: "Eltwise" bottom: "sum" bottom: "x" top: "max"
        eltwise_param { operation: MAX } }
layer { name: "scale" type: "Scale" bottom: "max" top: "scale"
        scale_param { axis: 1 num_axes: 2 bias_term: true } }
layer { name: "bias" type: "Bias" bottom: "scale" top: "bias" bias_param { axis: 2 num_axes: -1 } }
layer { name: "pow" type: "Power" bottom: "bias" top: "pow"
        power_param { power: 2 scale: 0.5 shift: 1.5 } }
layer { name: "relu" type: "ReLU" bottom: "pow" top: "pow" relu_param { negative_slope: 0.1 } }
layer { name: "drop" type: "Dropout" bottom: "pow" top: "pow" dropout_param { dropout_ratio: 0.3 } }
layer { name: "sig" type: "Sigmoid" bottom: "pow" top: "sig" }
layer { name: "tanh" type: "TanH" bottom: "sig" top: "tanh" }
layer { name: "clip" type: "Clip" bottom: "tanh" top: "clip" clip_param { min: -0.5 max: 0.75 } }
layer { name: "slice" type: "Slice" bottom: "tanh" top: "s1" top: "s2"
        slice_param { axis: 2 slice_point: 1 } }
layer { name: "slice_dim" type: "Slice" bottom: "tanh" top: "d1" top: "d2"
        slice_param { slice_dim: 2 } }
layer { name: "concat" type: "Concat" bottom: "s1" bottom: "s2" top: "cat"
        concat_param { concat_dim: 2 } }
layer { name: "concat_axis" type: "Concat" bottom: "d1" bottom: "d2" top: "cat2"
        concat_param { axis: -1 } }
layer { name: "split" type: "Split" bottom: "cat" top: "a" top: "b" }
layer { name: "tile" type: "Tile" bottom: "a" top: "tile" tile_param { axis: 0 tiles: 2 } }
layer { name: "flat" type: "Flatten" bottom: "tile" top: "flatten"
        flatten_param { axis: 0 end_axis: 1 } }
layer { name: "reshape" type: "Reshape" bottom: "b" top: "reshape"
        reshape_param { shape { dim: 0 dim: -1 } axis: 1 num_axes: 2 } }
layer { name: "red" type: "Reduction" bottom: "reshape" top: "red"
        reduction_param { operation: MEAN axis: 1 coeff: 3 } }
layer { name: "soft" type: "Softmax" bottom: "cat2" top: "soft" softmax_param { axis: 1 } }
layer { name: "dummy" type: "DummyData" top: "k1" top: "k2"
        dummy_data_param { shape { dim: 3 dim: 2 } data_filler { value: 1.5 }
                           data_filler { value: -1 } } }
layer { name: "lstm" type: "LSTM" bottom: "x" bottom: "cont" top: "h"
        recurrent_param { num_output: 5 expose_hidden: false } }
layer { name: "rnn" type: "RNN" bottom: "x" bottom: "cont" top: "o"
        recurrent_param { num_output: 3 } }
layer { name: "gru" type: "GRU" bottom: "x" bottom: "cont" top: "gru_h"
        recurrent_param { num_output: 3 linear_before_reset: 1 activations: "Sigmoid"
                          activations: "TanH" } }
layer { name: "fork" type: "Lstm" bottom: "seq" top: "fork"
        lstm_param { num_output: 2 batch_size: 2 } }
layer { name: "unit_in" type: "Input" top: "c_prev" top: "gates" top: "unit_cont"
        input_param { shape { dim: 1 dim: 2 dim: 3 } shape { dim: 1 dim: 2 dim: 12 }
                      shape { dim: 1 dim: 2 } } }
layer { name: "unit" type: "LSTMUnit" bottom: "c_prev" bottom: "gates" bottom: "unit_cont"
        top: "c_next" top: "h_next" }
layer { name: "ctc" type: "CTCGreedyDecoder" bottom: "h" top: "decoded"
        ctc_decoder_param { blank_index: 2 ctc_merge_repeated: false } }
layer { name: "silence" type: "Silence" bottom: "k1" bottom: "k2" }
layer { name: "simple" type: "LSTMSimple" bottom: "seq" top: "simple"
        lstm_simple_param { num_output: 2 batch_size: 3 } }
layer { name: "apollo" type: "LstmUnit" bottom: "simple" bottom: "simple" top: "a_h" top: "a_c"
        lstm_unit_param { num_cells: 2 } }
layer { name: "stack" type: "LSTM" bottom: "x" bottom: "cont" top: "stacked"
        recurrent_param { num_output: 2 num_layers: 2 dropout_ratio: 0.5 } }
"""


ALL_CNN_PARAMS_NET = """
layer { name: "input" type: "Input" top: "img"
        input_param { shape { dim: 1 dim: 4 dim: 9 dim: 8 } } }
layer { name: "conv" type: "Convolution" bottom: "img" top: "conv"
        convolution_param { num_output: 4 kernel_h: 3 kernel_w: 2 pad_h: 1 stride_h: 1
                            stride_w: 2 group: 2
                            dilation: 1 bias_term: false } }
layer { name: "deconv" type: "Deconvolution" bottom: "conv" top: "deconv"
        convolution_param { num_output: 2 kernel_size: 2 stride: 2 } }
layer { name: "im2col" type: "Im2col" bottom: "img" top: "cols"
        convolution_param { kernel_size: 3 pad: 1 } }
layer { name: "pool" type: "Pooling" bottom: "conv" top: "pool"
        pooling_param { pool: AVE kernel_size: 3 stride: 2 pad: 1 } }
layer { name: "gpool" type: "Pooling" bottom: "conv" top: "gpool"
        pooling_param { pool: MAX global_pooling: true } }
layer { name: "lrn" type: "LRN" bottom: "pool" top: "lrn"
        lrn_param { local_size: 3 alpha: 0.5 beta: 0.6 k: 2 norm_region: WITHIN_CHANNEL } }
layer { name: "bn" type: "BatchNorm" bottom: "lrn" top: "bn" batch_norm_param { eps: 0.001 } }
layer { name: "prelu" type: "PReLU" bottom: "bn" top: "prelu" prelu_param { channel_shared: true } }
layer { name: "elu" type: "ELU" bottom: "prelu" top: "elu" elu_param { alpha: 0.5 } }
layer { name: "abs" type: "AbsVal" bottom: "elu" top: "abs" }
layer { name: "bnll" type: "BNLL" bottom: "abs" top: "bnll" }
layer { name: "exp" type: "Exp" bottom: "bnll" top: "exp"
        exp_param { base: 2 scale: 0.5 shift: 0.1 } }
layer { name: "log" type: "Log" bottom: "exp" top: "log" log_param { scale: 2 shift: 1 } }
layer { name: "crop" type: "Crop" bottom: "deconv" bottom: "conv" top: "crop"
        crop_param { axis: 2 offset: 1 } }
layer { name: "argmax" type: "ArgMax" bottom: "log" top: "argmax"
        argmax_param { out_max_val: true top_k: 2 axis: 1 } }
layer { name: "permute" type: "Permute" bottom: "crop" top: "permute"
        permute_param { order: 0 order: 2 } }
layer { name: "transpose" type: "Transpose" bottom: "permute" top: "transpose"
        transpose_param { dim: 0 dim: 1 dim: 3 dim: 2 } }
layer { name: "reverse" type: "Reverse" bottom: "transpose" top: "reverse"
        reverse_param { axis: 2 } }
layer { name: "indicator" type: "ContinuationIndicator" top: "cont"
        continuation_indicator_param { time_step: 5 batch_size: 2 } }
layer { name: "indicator2" type: "ContinuationIndicator" bottom: "img" top: "cont2"
        continuation_indicator_param { time_step: 3 axis: -1 } }
layer { name: "rows" type: "Transpose" bottom: "img" top: "rows"
        transpose_param { transposetype: LSTMINPUT } }
layer { name: "rows8" type: "Concat" bottom: "rows" bottom: "rows" top: "rows8" }
layer { name: "grid" type: "Transpose" bottom: "rows8" top: "grid"
        transpose_param { transposetype: GRIDLSTM batch_size: 1 local_connected_num: 8
                          height: 9 } }
layer { name: "maps" type: "Transpose" bottom: "grid" top: "maps"
        transpose_param { transposetype: LSTMOUTPUT batch_size: 1 height: 9 } }
layer { name: "zeros" type: "ZerosData" top: "zeros" zeros_data_param { shape: 2 shape: 3 } }
layer { name: "strips" type: "Reshape" bottom: "img" top: "strips"
        reshape_param { shape { dim: 4 dim: 9 dim: 1 dim: 8 } } }
layer { name: "convert" type: "Convert" bottom: "strips" top: "seq" top: "seq_cont" }
layer { name: "flat" type: "Reshape" bottom: "img" top: "flat"
        reshape_param { shape { dim: 4 dim: 72 } } }
layer { name: "caption" type: "CaptionInput" bottom: "flat" bottom: "flat" top: "caption"
        caption_input_param { hidden_size: 3 image_size: 72 vocabulary_size: 5
                              sequence_len: 72 } }
layer { name: "boxes" type: "Input" top: "boxes" input_param { shape { dim: 3 dim: 5 } } }
layer { name: "roipool" type: "ROIPooling" bottom: "conv" bottom: "boxes" top: "roipool"
        roi_pooling_param { pooled_h: 2 pooled_w: 3 spatial_scale: 0.25 } }
layer { name: "dense" type: "DenseBlock" bottom: "conv" top: "dense"
        denseblock_param { numTransition: 2 initChannel: 4 growthRate: 3 use_BC: true
                           use_dropout: true dropout_amount: 0.2 } }
"""


# The forks' layers and Caffe's Python layer are covered by their samples.
SAMPLE_NETS = {"fork_vision": "samples/fork_vision/fork_vision.prototxt",
               "python_layer": "samples/python_layer/python_layer.prototxt"}
PYTHON_PATH = ROOT / "samples/python_layer/layers"


def writer_nets(tmp_path) -> list[Path]:
    """The nets whose layers together hold every registered op type (the Loop aside)."""
    paths = []
    for index, text in enumerate((ALL_PARAMS_NET, ALL_CNN_PARAMS_NET)):
        paths.append(tmp_path / f"all{index}.prototxt")
        paths[-1].write_text(text)
    return paths + [ROOT / path for path in SAMPLE_NETS.values()]


@pytest.mark.parametrize("which", ["lstm", "cnn", *SAMPLE_NETS])
def test_written_layers_parse_back_to_the_same_attrs(tmp_path, which):
    """Every op type's writer, through a prototxt: load, write, load again, compare attrs."""
    net = dict(zip(["lstm", "cnn", *SAMPLE_NETS], writer_nets(tmp_path)))[which]
    graph = load_net(net, python_path=PYTHON_PATH).graph
    written = tmp_path / "written.prototxt"
    write_prototxt(written, to_net_parameter(graph)[0])
    again = load_net(written, python_path=PYTHON_PATH).graph
    assert [(n.name, n.op) for n in again.nodes] == [(n.name, n.op) for n in graph.nodes]
    for before, after in zip(graph.nodes, again.nodes):
        assert after.attrs == before.attrs, before.name


def test_the_writer_nets_cover_every_writer(tmp_path):
    ops = set()
    for net in writer_nets(tmp_path):
        ops |= {n.op for n in load_net(net, python_path=PYTHON_PATH).graph.nodes}
    assert ops >= set(registered_types()) - {"Loop"}
