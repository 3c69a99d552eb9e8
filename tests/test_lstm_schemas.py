"""The forks' three incompatible lstm_param schemas of the type "Lstm": told apart by the fields
a layer sets, converted where the math is known (junhyukoh's num_output, deepdiary's
hidden_size), refused in one line otherwise."""

from __future__ import annotations


import numpy as np
import pytest

from caffe_lstm.analysis.shapes import infer_shapes
from caffe_lstm.backends.numpy_exec import NumpyExecutor
from caffe_lstm.frontend.caffemodel import read_caffemodel
from caffe_lstm.errors import ShapeError, UnsupportedLayerError
from caffe_lstm.frontend.params import Params
from caffe_lstm.ir.graph import Graph, Node, Value
from caffe_lstm.ops import get_op
from caffe_lstm.passes import run_passes
from tests.helpers import make_node, run_op, torch_lstm

def _params(**fields) -> Params:
    """lstm_param as the frontend hands it over, with only ``fields`` written."""
    defaults = {"num_output": 0, "clipping_threshold": 0.0, "batch_size": 1}
    return Params({**defaults, **fields}, frozenset(fields))


def test_junhyukoh_schema_by_num_output():
    attrs = get_op("Lstm").parse(None, _params(num_output=8, batch_size=2, clipping_threshold=5.0))
    assert attrs == {"num_output": 8, "batch_size": 2}


def test_hidden_size_schema_by_hidden_size():
    attrs = get_op("Lstm").parse(None, _params(hidden_size=8, sequence_len=4, vocabulary_size=100))
    assert attrs == {"hidden_size": 8, "sequence_len": 4}


@pytest.mark.parametrize("fields", [{}, {"clipping_threshold": 5.0}])
def test_neither_schema_is_refused_naming_the_forks(fields):
    with pytest.raises(UnsupportedLayerError) as error:
        get_op("Lstm").parse(None, _params(**fields))
    message = str(error.value)
    assert "junhyukoh/caffe-lstm" in message and "fanchenyou/deepdiary" in message
    assert "recurrent_param" in message and "\n" not in message


def test_an_lstm_layer_with_recurrent_param_is_mycaffes_lstm(invoke, tmp_path):
    """MyCaffe spells its (Caffe's) LSTM "Lstm" and configures it by recurrent_param (see
    ops/spellings.py): read so, with LSTM's bottoms x and cont; without cont, one error line."""
    net = tmp_path / "net.prototxt"
    layer = ('layer {{ name: "lstm" type: "Lstm" bottom: "x" {} top: "h" '
             'recurrent_param {{ num_output: 5 }} }}\n')
    net.write_text('input: "x" input_shape { dim: 4 dim: 1 dim: 3 }\n'
                   'input: "cont" input_shape { dim: 4 dim: 1 }\n' + layer.format('bottom: "cont"'))
    result = invoke("inspect", net)
    assert result.exit_code == 0 and "  lstm (LSTM): x, cont -> h  (4, 1, 5)" in result.stdout
    net.write_text('input: "x" input_shape { dim: 4 dim: 1 dim: 3 }\n' + layer.format(""))
    result = invoke("inspect", net)
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 1 and "layer 'lstm' (LSTM)" in lines[0], lines


# ---- the hidden_size schema computes junhyukoh's cell on rows t·N + n ------------------------


def _weights(rng, hidden):
    return [rng.normal(0, 0.5, s).astype(np.float32)
            for s in ((4 * hidden, hidden), (4 * hidden, hidden), (4 * hidden,))]


def _torch(x, w_x, w_h, b):
    return torch_lstm(x, w_x, b, w_h)[0]


@pytest.mark.parametrize("trailing", [(), (1, 1)], ids=["2-D", "4-D"])
def test_hidden_size_lstm_matches_torch_and_junhyukohs(trailing):
    steps, batch, hidden = 5, 3, 4   # sequence_len 4: T = 5
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(steps * batch, hidden)).astype(np.float32)
    weights = _weights(rng, hidden)
    attrs = {"hidden_size": hidden, "sequence_len": steps - 1}
    (h,) = run_op("Lstm", attrs, [rows.reshape(rows.shape + trailing)], weights)
    assert h.shape == (steps * batch, hidden)
    (same,) = run_op("Lstm", {"num_output": hidden, "batch_size": batch}, [rows], weights)
    np.testing.assert_array_equal(h, same)
    expected = _torch(rows.reshape(steps, batch, hidden), *weights)
    np.testing.assert_allclose(h, expected.reshape(steps * batch, hidden), atol=1e-5)


@pytest.mark.parametrize("shapes, message", [
    ([(10, 3)], r"x must be \(T·N, H\) with T = sequence_len \+ 1 = 5 and H = hidden_size = 4"),
    ([(12, 4)], "T = sequence_len"),   # 12 rows are no multiple of T = 5
    ([(10, 4), (10, 1)], "has no clip bottom"),
])
def test_hidden_size_lstm_refuses_bad_bottoms(shapes, message):
    node = make_node("Lstm", {"hidden_size": 4, "sequence_len": 4}, shapes)
    with pytest.raises(ShapeError, match=message):
        get_op("Lstm").infer(None, node, *shapes)


def test_hidden_size_lstm_expands_like_its_equations():
    steps, batch, hidden = 4, 2, 3
    rng = np.random.default_rng(1)
    x = Value("x", (steps * batch, hidden, 1, 1))
    weights = [Value(f"lstm/{name}", w.shape, w, is_weight=True)
               for name, w in zip(("W_x", "W_h", "b"), _weights(rng, hidden))]
    node = Node("lstm", "Lstm", [x], [Value("h")], {"hidden_size": hidden,
                                                    "sequence_len": steps - 1}, weights)
    graph = Graph("net", [node], [x], list(node.outputs))
    infer_shapes(graph)
    feeds = {"x": rng.normal(size=x.shape).astype(np.float32)}
    direct = NumpyExecutor(graph).run(feeds)["h"]
    rewritten = run_passes(graph)
    assert "Lstm" not in {n.op for n in rewritten.nodes}
    np.testing.assert_allclose(NumpyExecutor(rewritten).run(feeds)["h"], direct, atol=1e-6)


# ---- deepdiary's prototxt, read by name from our caffe.proto, through the CLI -----------------

#: deepdiary's lstm_param as its caption nets write it (T = sequence_len + 1 = 4, N = 2 rows).
DEEPDIARY_NET = """name: "deepdiary_like"
input: "x" input_shape { dim: 8 dim: 6 }
layer { name: "lstm" type: "Lstm" bottom: "x" top: "h"
  lstm_param { hidden_size: 6 sequence_len: 3 vocabulary_size: 100 image_size: 4096
               clipping_threshold: 5 weight_filler { type: "uniform" } batch_size: 2 } }
"""


def test_deepdiary_prototxt_converts_and_runs_like_torch(invoke, tmp_path):
    net, weights = tmp_path / "net.prototxt", tmp_path / "w.caffemodel"
    net.write_text(DEEPDIARY_NET)
    result = invoke("inspect", net, "--json")
    assert result.exit_code == 0, result.stderr
    assert '"unknown": []' in result.stdout.replace("\n", "") or "unknown" not in result.stdout
    assert invoke("weights", "init", net, "-o", weights).exit_code == 0
    rows = np.random.default_rng(2).normal(size=(8, 6)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=rows)
    result = invoke("run", net, "-w", weights, "--inputs", tmp_path / "in.npz",
                    "-o", tmp_path / "out.npz")
    assert result.exit_code == 0, result.stderr
    (layer,) = [layer for layer in read_caffemodel(weights) if layer.name == "lstm"]
    blobs = [blob.data.reshape(blob.shape) for blob in layer.blobs]
    expected = _torch(rows.reshape(4, 2, 6), *blobs).reshape(8, 6)
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["h"], expected, atol=1e-5)
    pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT for RTX is not installed")
    result = invoke("convert", net, "-w", weights, "-o", tmp_path / "net.engine")
    assert result.exit_code == 0, result.stderr
