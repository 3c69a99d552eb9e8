"""The fork layers the nets of ../shared/corpus2 use, read as their forks read them: each op
against a port of its fork's forward (tests/helpers.py: scalar loops written from the fork's
C++ or C#), on hand-worked and random cases; then one net holding all of them, whose TensorRT
network (walked on the CPU) and ONNX model (onnxruntime) ``verify`` compares with numpy to
1e-5; ContinuationIndicator's N symbolic in ONNX; and MyCaffe's type spellings.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from caffe_lstm.errors import ShapeError
from tests.helpers import (assert_one_error_line, charleen_transpose, curve_text_convert,
                           deepdiary_caption_input, jolibrain_continuation_indicator,
                           junhyukoh_lstm, rand, run_cli, run_onnx_facet, run_op,
                           synthetic_files, torch_lstm)

RNG = np.random.default_rng(22)


# ---- ContinuationIndicator with a bottom (jolibrain/caffe) ------------------------------------


def test_continuation_indicator_takes_n_from_its_bottom_by_hand():
    (cont,) = run_op("ContinuationIndicator", {"time_step": 3, "batch_size": 0, "axis": 1},
                     [np.zeros((7, 2, 5), np.float32)])
    np.testing.assert_array_equal(cont, [[0, 0], [1, 1], [1, 1]])


@pytest.mark.parametrize("shape, axis, steps", [((4, 3, 2), 0, 5), ((2, 6), -1, 1),
                                                ((1, 2, 3, 4), 2, 7), ((3, 5, 2), -2, 4)])
def test_continuation_indicator_equals_the_fork(shape, axis, steps):
    (cont,) = run_op("ContinuationIndicator", {"time_step": steps, "batch_size": 9, "axis": axis},
                     [rand(*shape, rng=RNG)])
    np.testing.assert_array_equal(cont, jolibrain_continuation_indicator(shape, steps, axis))


# ---- Convert (Curve-Text-Detector) -------------------------------------------------------------


def test_convert_by_hand():
    # x (S = 2, D = 3, 1, W = 2): sample s's D values at position w become step w of stream s
    x = np.arange(12, dtype=np.float32).reshape(2, 3, 1, 2)
    sequence, cont = run_op("Convert", {}, [x], n_tops=2)
    np.testing.assert_array_equal(sequence, [[[0, 2, 4], [6, 8, 10]], [[1, 3, 5], [7, 9, 11]]])
    np.testing.assert_array_equal(cont, [[0, 0], [1, 1]])


@pytest.mark.parametrize("shape", [(3, 4, 1, 5), (1, 2, 1, 1, 6), (5, 1, 3)])
def test_convert_equals_the_fork(shape):
    x = rand(*shape, rng=RNG)
    for got, want in zip(run_op("Convert", {}, [x], n_tops=2), curve_text_convert(x)):
        np.testing.assert_array_equal(got, want)


def test_convert_refuses_axes_the_fork_would_not_read():
    with pytest.raises(ShapeError, match=r"expected \(S, D, 1, ..., W\)"):
        run_op("Convert", {}, [np.zeros((2, 3, 2, 4), np.float32)], n_tops=2)


# ---- Transpose with transposetype and ZerosData (Charleen777/caffecode) -----------------------


def grid(kind: str, **fields) -> dict:
    return {"transposetype": kind, "batch_size": 1, "local_connected_num": 8, "height": 77,
            **fields}


def test_lstminput_rows_are_pixels_by_hand():
    x = np.arange(8, dtype=np.float32).reshape(1, 2, 2, 2)  # channel 0: 0..3, channel 1: 4..7
    (rows,) = run_op("Transpose", grid("LSTMINPUT"), [x])
    np.testing.assert_array_equal(rows, [[0, 4], [1, 5], [2, 6], [3, 7]])


def test_gridlstm_gathers_the_opposite_neighbour_block_by_hand():
    # S = 5 rows of 8 one-channel blocks, height 1: offsets (-2, -1, 0, -1, 1, 0, 1, 2);
    # y[i, k] = x[i + off[k], 7 - k] where 0 < i + off[k] < 5 (row 0 is never a source)
    x = (10 * np.arange(5)[:, None] + np.arange(8)[None, :]).astype(np.float32)
    (y,) = run_op("Transpose", grid("GRIDLSTM", height=1), [x])
    np.testing.assert_array_equal(y[2], [0, 16, 25, 14, 33, 22, 31, 40])  # i - 2 = 0: excluded
    np.testing.assert_array_equal(y[0], [0, 0, 0, 0, 13, 0, 11, 20])
    np.testing.assert_array_equal(y[1], [0, 0, 15, 0, 23, 12, 21, 30])


@pytest.mark.parametrize("kind, shape, fields", [
    ("LSTMINPUT", (2, 3, 4, 5), {}), ("LSTMINPUT", (3, 4, 6), {}),
    ("LSTMOUTPUT", (24, 3), {"batch_size": 2, "height": 3}),
    ("GRIDLSTM", (30, 16), {"height": 5}), ("GRIDLSTM", (24, 8), {"batch_size": 2, "height": 4}),
    ("GRIDLSTM", (12, 24), {"batch_size": 3, "height": 2})])
def test_fork_transpose_equals_the_fork(kind, shape, fields):
    x = rand(*shape, rng=RNG)
    (got,) = run_op("Transpose", grid(kind, **fields), [x])
    np.testing.assert_array_equal(got, charleen_transpose(x, kind, **fields))


def test_lstmoutput_undoes_lstminput():
    x = rand(2, 5, 3, 4, rng=RNG)
    (rows,) = run_op("Transpose", grid("LSTMINPUT"), [x])
    (maps,) = run_op("Transpose", grid("LSTMOUTPUT", batch_size=2, height=3), [rows])
    np.testing.assert_array_equal(maps, x)


@pytest.mark.parametrize("shape, top", [([4, 3], (4, 3)), ([1, 2, 3, 4], (1, 2, 3, 4)),
                                        ([1, 2, 3, 4, 9], (1, 2, 3, 4))])
def test_zeros_data(shape, top):
    (zeros,) = run_op("ZerosData", {"shape": shape}, [])
    assert zeros.shape == top and not zeros.any()


def test_zeros_data_refuses_what_the_fork_reads_past():
    with pytest.raises(ShapeError, match="reads 2"):
        run_op("ZerosData", {"shape": [2, 3, 4]}, [])


# ---- CaptionInput (deepdiary) --------------------------------------------------------------------


def caption_attrs(hidden=2, image=2, vocabulary=3, sequence_len=2) -> dict:
    return {"hidden_size": hidden, "image_size": image, "vocabulary_size": vocabulary,
            "sequence_len": sequence_len}


def test_caption_input_by_hand():
    img = np.array([[1, 2]], np.float32)
    sent = np.array([[2, -0.5, -1]], np.float32)  # -0.5 truncates to word 0, -1 is no word
    w_e = np.array([[1, 0], [1, 1]], np.float32)
    b_e = np.array([0.5, -1], np.float32)
    w_s = np.array([[1, 2], [3, 4], [5, 6]], np.float32)
    (rows,) = run_op("CaptionInput", caption_attrs(sequence_len=3), [img, sent],
                     [w_e, b_e, w_s])
    np.testing.assert_array_equal(rows, [[1.5, 2], [5, 6], [1, 2], [0, 0]])


@pytest.mark.parametrize("batch, image, hidden, vocabulary, sequence_len",
                         [(3, 5, 4, 7, 4), (1, 8, 6, 3, 1), (4, 2, 3, 10, 6)])
def test_caption_input_equals_the_fork(batch, image, hidden, vocabulary, sequence_len):
    img = rand(batch, image, rng=RNG)
    sent = RNG.uniform(-2, vocabulary, (batch, sequence_len)).astype(np.float32)
    blobs = [rand(hidden, image, rng=RNG), rand(hidden, rng=RNG),
             rand(vocabulary, hidden, rng=RNG)]
    (rows,) = run_op("CaptionInput", caption_attrs(hidden, image, vocabulary, sequence_len),
                     [img, sent], blobs)
    want = deepdiary_caption_input(img, sent, *blobs, sequence_len)
    np.testing.assert_allclose(rows, want, rtol=1e-6, atol=1e-6)


def _refused_on_both_routes(tmp_path, text: str, varying: str, fixed: str, what: str,
                            layer: str) -> None:
    """``convert`` and ``export`` of the net ``text`` with the range ``varying`` are one error
    line naming ``what`` and ``layer``, writing nothing; with the range ``fixed`` both write."""
    pytest.importorskip("tensorrt_rtx_bindings")
    net, weights = synthetic_files(tmp_path, text)
    out = tmp_path / "out"
    for command, message in (("convert", "dynamic (-1) in the TensorRT network"),
                             ("export", "is not fixed in the ONNX export")):
        line = assert_one_error_line(run_cli(command, net, "-w", weights, "-o", out, "--shape",
                                             varying), message)
        assert what in line and layer in line and not out.exists(), line
        built = run_cli(command, net, "-w", weights, "-o", out, "--shape", fixed)
        assert built.returncode == 0 and out.exists(), built.stderr
        out.unlink()


def test_convert_with_a_varying_width_is_one_line_on_both_routes(tmp_path):
    """Curve-Text-Detector's Convert reshapes to its bottom's D and W: an engine or a model
    whose W varies is refused in one line (both baked the W they were built at); S may vary."""
    _refused_on_both_routes(tmp_path, (
        'layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 '
        'dim: 1 dim: 5 } } }\n'
        'layer { name: "conv" type: "Convert" bottom: "x" top: "seq" top: "cont" }\n'),
        "x:2x3x1x4:2x3x1x5:2x3x1x6", "x:1x3x1x5:2x3x1x5:4x3x1x5", "an axis after the first",
        "layer 'conv' (Convert)")


def test_lstminput_with_a_varying_height_is_one_line_on_both_routes(tmp_path):
    """Charleen777's LSTMINPUT reshapes to its maps' C, H and W: an engine or a model whose H
    varies is refused in one line (both baked the H they were built at); N may vary."""
    _refused_on_both_routes(tmp_path, (
        'layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 dim: 2 '
        'dim: 3 dim: 4 } } }\n'
        'layer { name: "rows" type: "Transpose" bottom: "x" top: "rows" '
        'transpose_param { transposetype: LSTMINPUT } }\n'),
        "x:1x2x2x4:1x2x3x4:1x2x5x4", "x:1x2x3x4:2x2x3x4:4x2x3x4", "C, H or W",
        "layer 'rows' (Transpose)")


@pytest.mark.parametrize("op_type, attrs, shape, axis, what", [
    ("Convert", {}, (3, 4, 1, 5), 3, "an axis after the first"),
    ("Transpose", grid("LSTMINPUT"), (2, 3, 4, 5), 2, "C, H or W"),
    ("Transpose", grid("LSTMOUTPUT", batch_size=2, height=3), (24, 3), 0, "the rows R"),
    ("Transpose", grid("GRIDLSTM", height=5), (30, 16), 0, "the rows R"),
    ("Repeat", {"num_repeats": 2, "axis": 1}, (4, 2, 3), 2, "an axis after the first"),
])
def test_onnx_forms_built_for_one_size_refuse_a_symbolic_dim(op_type, attrs, shape, axis,
                                                              what):
    """A form that reshapes to its bottom's dims or gathers by a table of them is one line
    naming the layer when the export leaves one of those dims symbolic, not a model that
    fails (or reads the wrong rows) at other sizes."""
    x = rand(*shape, rng=RNG)
    weights = [rand(12, 6, rng=RNG)] if op_type == "Repeat" else []  # (N·K, K), K = 2·3
    tops = 2 if op_type == "Convert" else 1
    with pytest.raises(ShapeError, match=f"{re.escape(what)}.* is not fixed in the ONNX export"):
        run_onnx_facet(op_type, attrs, [x], weights, n_tops=tops, dynamic=[(0, axis)])
    run_onnx_facet(op_type, attrs, [x], weights, n_tops=tops, dynamic=[(0, 0)] * (
        op_type != "Transpose" or attrs["transposetype"] == "LSTMINPUT"))


# ---- all of them in one net: numpy, the TensorRT walk and onnxruntime agree ----------------------

FORK_NET = """
name: "corpus2_forks"
input: "maps"
input_shape { dim: 2 dim: 8 dim: 2 dim: 3 }
input: "seq"
input_shape { dim: 3 dim: 4 dim: 1 dim: 5 }
input: "img"
input_shape { dim: 2 dim: 6 }
input: "sent"
input_shape { dim: 2 dim: 3 }
layer { name: "rows" type: "Transpose" bottom: "maps" top: "rows"
  transpose_param { transposetype: LSTMINPUT } }
layer { name: "seed" type: "ZerosData" top: "seed" zeros_data_param { shape: 12 shape: 8 } }
layer { name: "seeded" type: "Eltwise" bottom: "rows" bottom: "seed" top: "seeded" }
layer { name: "grid" type: "Transpose" bottom: "seeded" top: "grid"
  transpose_param { transposetype: GRIDLSTM batch_size: 2 local_connected_num: 8 height: 2 } }
layer { name: "back" type: "Transpose" bottom: "grid" top: "back"
  transpose_param { transposetype: LSTMOUTPUT batch_size: 2 height: 2 } }
layer { name: "convert" type: "Convert" bottom: "seq" top: "x" top: "cont" }
layer { name: "lstm1" type: "LSTM" bottom: "x" bottom: "cont" top: "lstm1"
  recurrent_param { num_output: 4 } }
layer { name: "indicator" type: "ContinuationIndicator" bottom: "x" top: "indicator"
  continuation_indicator_param { time_step: 5 axis: 1 } }
layer { name: "lstm2" type: "LSTM" bottom: "lstm1" bottom: "indicator" top: "lstm2"
  recurrent_param { num_output: 3 } }
layer { name: "caption" type: "CaptionInput" bottom: "img" bottom: "sent" top: "caption"
  caption_input_param { hidden_size: 5 image_size: 6 vocabulary_size: 10 sequence_len: 3 } }
layer { name: "lstm3" type: "Lstm" bottom: "caption" top: "lstm3"
  lstm_param { hidden_size: 5 sequence_len: 3 } }
"""

OUTPUTS = ("back", "lstm2", "lstm3")


@pytest.fixture(scope="module")
def fork_net(module_scratch):
    return synthetic_files(module_scratch.mktemp("forks"), FORK_NET, seed=5)


def test_verify_checks_numpy_tensorrt_and_onnxruntime(fork_net):
    pytest.importorskip("tensorrt_rtx_bindings")
    pytest.importorskip("onnxruntime")
    net, weights = fork_net
    done = run_cli("verify", net, "-w", weights, "--runtime", "tensorrt-rtx", "--onnxruntime",
                   "--atol", "1e-5", "--rtol", "1e-5")
    assert done.returncode == 0, done.stderr
    for name in OUTPUTS:
        assert len(re.findall(rf"^{name} .* ok$", done.stdout, re.M)) == 3, done.stdout
    assert "MISMATCH" not in done.stdout


def test_convert_and_export_the_fork_layers(fork_net, tmp_path):
    pytest.importorskip("tensorrt_rtx_bindings")
    net, weights = fork_net
    for command, out in (("convert", tmp_path / "net.engine"), ("export", tmp_path / "net.onnx")):
        done = run_cli(command, net, "-w", weights, "-o", out)
        assert done.returncode == 0 and out.stat().st_size > 0, done.stderr


INDICATOR_NET = """
input: "x"
input_shape { dim: 4 dim: 2 dim: 3 }
layer { name: "indicator" type: "ContinuationIndicator" bottom: "x" top: "cont"
  continuation_indicator_param { time_step: 4 axis: 1 } }
layer { name: "lstm" type: "LSTM" bottom: "x" bottom: "cont" top: "h"
  recurrent_param { num_output: 3 } }
"""


def test_continuation_indicator_follows_a_symbolic_n(tmp_path, invoke):
    """Exported with N dynamic, the indicator is (T, N) at every N: onnxruntime equals numpy at
    N = 1 and 5; the engine builds with the same profile."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("tensorrt_rtx_bindings")
    net, weights = synthetic_files(tmp_path, INDICATOR_NET, seed=1)
    profile = ("--shape", "x:4x1x3:4x2x3:4x5x3")
    model, engine = tmp_path / "net.onnx", tmp_path / "net.engine"
    for command, out in (("export", model), ("convert", engine)):
        done = invoke(command, net, "-w", weights, "-o", out, *profile)
        assert done.exit_code == 0, done.stderr
    for batch in (1, 5):
        np.savez(tmp_path / "in.npz", x=rand(4, batch, 3, rng=RNG))
        runs = []
        for backend in (("--original",), ("--backend", "onnxruntime", "--onnx", model)):
            out = tmp_path / f"out{len(runs)}.npz"
            done = invoke("run", net, "-w", weights, "--inputs", tmp_path / "in.npz", "-o", out,
                          *backend)
            assert done.exit_code == 0, done.stderr
            runs.append(np.load(out)["h"])
        assert runs[0].shape == (4, batch, 3)
        np.testing.assert_allclose(runs[1], runs[0], atol=1e-5, rtol=0)


def test_state_auto_sees_the_indicator_as_a_constant(tmp_path, invoke):
    """cont from jolibrain's indicator is 0 at t = 0 whatever its bottom holds: --state auto
    exposes no state (nothing leaks in from a previous call)."""
    net, weights = synthetic_files(tmp_path, INDICATOR_NET)
    done = invoke("export", net, "-w", weights, "-o", tmp_path / "net.onnx")
    assert done.exit_code == 0 and "h_0" not in done.stdout, done.stdout


# ---- MyCaffe's type names (LayerParameter.parseLayerType) --------------------------------------

MYCAFFE_NET = """
name: "mycaffe"
layer { name: "input" type: "Input" top: "x" top: "clip" top: "rows" top: "row_clip"
  input_param { shape { dim: 5 dim: 2 dim: 3 } shape { dim: 5 dim: 2 }
                shape { dim: 6 dim: 3 } shape { dim: 6 dim: 1 } } }
layer { name: "lstm" type: "Lstm" bottom: "x" bottom: "clip" top: "lstm"
  recurrent_param { num_output: 4 debug_info: False expose_hidden: False } }
layer { name: "cudnn" type: "lstm" bottom: "x" bottom: "clip" top: "cudnn"
  recurrent_param { engine: CUDNN num_output: 3 dropout_ratio: 0.3 dropout_seed: 0
                    num_layers: 2 } }
layer { name: "simple" type: "LstmSimple" bottom: "rows" bottom: "row_clip" top: "simple"
  lstm_simple_param { num_output: 4 batch_size: 1 } }
layer { name: "snake" type: "lstm_simple" bottom: "rows" top: "snake"
  lstm_simple_param { num_output: 2 batch_size: 2 } }
"""


def test_mycaffe_spellings_read_as_mycaffe_reads_them(tmp_path, invoke):
    net, weights = synthetic_files(tmp_path, MYCAFFE_NET, seed=3)
    done = invoke("inspect", net)
    assert done.exit_code == 0, done.stderr
    for layer, kind in (("lstm", "LSTM"), ("cudnn", "LSTM"), ("simple", "LSTMSimple"),
                        ("snake", "LSTMSimple")):
        assert f"  {layer} ({kind}):" in done.stdout, done.stdout
    clip = np.ones((5, 2), np.float32)
    clip[0] = 0
    row_clip = np.ones((6, 1), np.float32)
    row_clip[0] = 0
    feeds = {"x": rand(5, 2, 3, rng=RNG), "clip": clip, "rows": rand(6, 3, rng=RNG),
             "row_clip": row_clip}
    np.savez(tmp_path / "in.npz", **feeds)
    out = tmp_path / "out.npz"
    done = invoke("run", net, "-w", weights, "--inputs", tmp_path / "in.npz", "-o", out)
    assert done.exit_code == 0, done.stderr
    got = dict(np.load(out))
    import caffe_lstm

    blobs = {node.name: [w.data for w in node.weights]
             for node in caffe_lstm.load(net, weights).graph.nodes}
    # MyCaffe's LSTM is Caffe's (torch.nn.LSTM the reference); the stack feeds level 0 to 1
    want, _, _ = torch_lstm(feeds["x"], *blobs["lstm"])
    np.testing.assert_allclose(got["lstm"], want, atol=1e-5)
    level0, _, _ = torch_lstm(feeds["x"], *blobs["cudnn"][:3])
    level1, _, _ = torch_lstm(level0, *blobs["cudnn"][3:])
    np.testing.assert_allclose(got["cudnn"], level1, atol=1e-5)
    # LSTM_SIMPLE is junhyukoh's Lstm (its port the reference): W_x, W_h, b
    w_x, w_h, b = blobs["simple"]
    np.testing.assert_allclose(got["simple"], junhyukoh_lstm(
        feeds["rows"], row_clip, w_x, w_h, b), atol=1e-5)
    w_x, w_h, b = blobs["snake"]
    np.testing.assert_allclose(got["snake"], junhyukoh_lstm(
        feeds["rows"], None, w_x, w_h, b, batch_size=2), atol=1e-5)


def test_junhyukoh_lstm_keeps_its_type(tmp_path, invoke):
    """"Lstm" configured by lstm_param stays the fork type of junhyukoh and deepdiary."""
    text = ('layer { name: "input" type: "Input" top: "x" '
            'input_param { shape { dim: 6 dim: 3 } } }\n'
            'layer { name: "lstm" type: "Lstm" bottom: "x" top: "h" '
            'lstm_param { num_output: 2 } }\n')
    net = tmp_path / "net.prototxt"
    net.write_text(text)
    done = invoke("inspect", net)
    assert done.exit_code == 0 and "  lstm (Lstm):" in done.stdout, done.stderr


# ---- bad parameters: one line, no traceback ------------------------------------------------------

BAD = {
    "convert_2d": ('type: "Convert" bottom: "rows" top: "a" top: "b"', "expected (S, D, 1"),
    "zeros_3": ('type: "ZerosData" top: "a" zeros_data_param { shape: 1 shape: 2 shape: 3 }',
                "reads 2 (a 2-D top) or 4"),
    "gridlstmsum": (('type: "Transpose" bottom: "rows" top: "a" '
                    'transpose_param { transposetype: GRIDLSTMSUM }'), "GRIDLSTMSUM is not"),
    "grid_channels": (('type: "Transpose" bottom: "rows" top: "a" '
                      'transpose_param { transposetype: GRIDLSTM height: 2 }'),
                      "channels (3) divisible by 8"),
    "caption_sizes": (('type: "CaptionInput" bottom: "rows" bottom: "rows" top: "a" '
                      'caption_input_param { hidden_size: 2 image_size: 3 vocabulary_size: 4 '
                      'sequence_len: 5 }'), "sent (N, sequence_len = 5)"),
    "indicator_axis": (('type: "ContinuationIndicator" bottom: "rows" top: "a" '
                       'continuation_indicator_param { time_step: 2 axis: 3 }'),
                       "axis 3 is out of range"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_fork_layer_is_one_line(tmp_path, invoke, case):
    layer, needle = BAD[case]
    net = tmp_path / "bad.prototxt"
    net.write_text('input: "rows"\ninput_shape { dim: 6 dim: 3 }\n'
                   f'layer {{ name: "bad" {layer} }}\n')
    assert "layer 'bad'" in assert_one_error_line(invoke("inspect", net), needle)
