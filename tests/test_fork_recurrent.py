"""The forks' recurrent layers against ports of the forks' own forward loops
(tests/fork_references.py): junhyukoh's Lstm read with its own Reshape (N-D x, batch_size > 1,
a clip with resets in mid-sequence)."""

from __future__ import annotations

import numpy as np
import pytest

from caffe_lstm.errors import ShapeError
from caffe_lstm.ops import get_op
from tests.helpers import (
    apollocaffe_lstm_unit, junhyukoh_lstm, make_node, net_with_weights, run_op, torch_lstm,
)

ATOL = 1e-5


def _fork_weights(rng, hidden, inputs):
    return [rng.normal(0, 0.3, shape).astype(np.float32)
            for shape in ((4 * hidden, inputs), (4 * hidden, hidden), (4 * hidden,))]


def _clip(steps, batch, resets=()):
    """T·N clip values, row t·N + n: 0 at t = 0, 1 after, 0 again at each (t, n) in resets."""
    clip = np.ones((steps, batch), np.float32)
    clip[0] = 0
    for t, n in resets:
        clip[t, n] = 0
    return clip.reshape(steps * batch)


def test_one_step_of_5376_features_as_the_fork_reads_it():
    """x (1, 256, 21, 1) with a clip of one value: T = N = 1, I = 5,376 (not BVLC's T = 1,
    N = 256), top (1, H)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1, 256, 21, 1)).astype(np.float32)
    weights = _fork_weights(rng, 3, 256 * 21)
    clip = np.zeros((1,), np.float32)
    (h,) = run_op("Lstm", {"num_output": 3, "batch_size": None}, [x, clip], weights)
    assert h.shape == (1, 3)
    np.testing.assert_allclose(h, junhyukoh_lstm(x, clip, *weights), atol=ATOL)


@pytest.mark.parametrize("x_shape, batch", [((12, 2, 3), 3), ((8, 3, 2, 2), 2), ((6, 5), 2),
                                            ((9,), 3)])
def test_nd_input_with_batch_size_and_resets_matches_the_forks_loop(x_shape, batch):
    """batch_size > 1 and x of 1 to 4 axes, a clip of T·N values with a reset of one stream
    in mid-sequence: rows t·N + n, I = count / num."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=x_shape).astype(np.float32)
    steps = x_shape[0] // batch
    clip = _clip(steps, batch, resets=[(steps // 2, batch - 1)])
    weights = _fork_weights(rng, 4, x.size // x_shape[0])
    (h,) = run_op("Lstm", {"num_output": 4, "batch_size": batch}, [x, clip], weights)
    assert h.shape == (x_shape[0], 4)
    np.testing.assert_allclose(h, junhyukoh_lstm(x, clip, *weights, batch_size=batch),
                               atol=ATOL)


def test_without_a_clip_the_fork_starts_fresh_at_t0():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(6, 2, 3)).astype(np.float32)
    weights = _fork_weights(rng, 2, 6)
    # batch_size written other than x[1] does not alone switch the reading (caffe_ocr's and
    # CTPN's nets write it too): the loaded W_x of count(x, 1) = 6 columns does
    node = make_node("Lstm", {"num_output": 2, "batch_size": 2}, [x.shape])
    from caffe_lstm.ir.graph import Value

    node.weights = [Value(f"w{i}", w.shape, w, is_weight=True) for i, w in enumerate(weights)]
    (shape,) = get_op("Lstm").infer(None, node, x.shape)
    assert shape == (6, 2)
    (h,) = get_op("Lstm").numpy(None, node, x, *weights)
    np.testing.assert_allclose(h, junhyukoh_lstm(x, None, *weights, batch_size=2), atol=ATOL)


def test_time_major_reading_stays_for_caffe_ocr_and_ctpn_nets():
    """x (T, N, C) with a (T, N) clip or none: caffe_ocr's and CTPN's Reshape, top (T, N, H)."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(5, 3, 4)).astype(np.float32)
    weights = _fork_weights(rng, 2, 4)
    clip = _clip(5, 3, resets=[(2, 1)]).reshape(5, 3)
    (h,) = run_op("Lstm", {"num_output": 2, "batch_size": None}, [x, clip], weights)
    assert h.shape == (5, 3, 2)
    # the same equations on rows t·N + n with N = 3
    expected = junhyukoh_lstm(x.reshape(15, 4), clip, *weights, batch_size=3)
    np.testing.assert_allclose(h.reshape(15, 2), expected, atol=ATOL)


@pytest.mark.parametrize("attrs, shapes, message", [
    ({"num_output": 2, "batch_size": 4}, [(6, 3)], "num a multiple of N"),
    ({"num_output": 2, "batch_size": 0}, [(6, 3)], "batch_size is 0"),
    ({"num_output": 2, "batch_size": 2}, [(6, 3), (6, 2)], "(num == count)"),
    ({"num_output": 2, "batch_size": None}, [(1, 256, 21), (2,)], "clip must have shape"),
])
def test_bad_fork_bottoms_name_the_rule(attrs, shapes, message):
    node = make_node("Lstm", attrs, shapes)
    with pytest.raises(ShapeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        get_op("Lstm").infer(None, node, *shapes)


# ---- MyCaffe's LSTMSimple: junhyukoh's layer under another name and param -------------------


def test_lstm_simple_reads_rows_always_and_matches_the_forks_loop():
    """LSTMSimple takes junhyukoh's Reshape even for an x (T·N, C, 1) that the Lstm type would
    read time-major; resets in mid-sequence."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(8, 3, 1)).astype(np.float32)
    clip = _clip(4, 2, resets=[(2, 0), (3, 1)])
    weights = _fork_weights(rng, 3, 3)
    (h,) = run_op("LSTMSimple", {"num_output": 3, "batch_size": 2}, [x, clip], weights)
    assert h.shape == (8, 3)
    np.testing.assert_allclose(h, junhyukoh_lstm(x, clip, *weights, batch_size=2), atol=ATOL)


def test_lstm_simple_parses_its_own_param():
    from caffe_lstm.frontend.params import to_params
    from caffe_lstm.proto import caffe_pb2

    p = to_params(caffe_pb2.LSTMSimpleParameter(num_output=5, batch_size=3,
                                                enable_clockwork_forgetgate_bias=True))
    assert get_op("LSTMSimple").parse(None, p) == {"num_output": 5, "batch_size": 3}


# ---- apollocaffe's LstmUnit ------------------------------------------------------------------


@pytest.mark.parametrize("scale", [0.3, 3.0], ids=["smooth", "saturating"])
def test_apollocaffe_lstm_unit_matches_the_forks_loop(scale):
    """Two bottoms (x, memory), two tops (h, c); at scale 3 many pre-activations pass |v| = 5,
    where the fork's tanh returns ±1."""

    rng = np.random.default_rng(5)
    x = rng.normal(size=(3, 6, 1, 1)).astype(np.float32)
    memory = rng.normal(0, 3, size=(3, 4)).astype(np.float32)
    weights = [rng.normal(0, scale, (1, 4, 1, 6)).astype(np.float32) for _ in range(4)]
    h, c = run_op("LstmUnit", {"num_cells": 4}, [x, memory], weights, n_tops=2)
    want_h, want_c = apollocaffe_lstm_unit(x, memory, *weights)
    np.testing.assert_allclose(c, want_c, atol=ATOL)
    np.testing.assert_allclose(h, want_h, atol=ATOL)
    if scale > 1:
        pre = x.reshape(3, 6).astype(np.float64) @ weights[0].reshape(4, 6).T.astype(np.float64)
        assert np.any(np.abs(pre) >= 5)   # the saturated branch is exercised


@pytest.mark.parametrize("attrs, shapes, message", [
    ({"num_cells": 4}, [(3, 6, 2), (3, 4)], "x must be (N, K)"),
    ({"num_cells": 4}, [(3, 6), (3, 5)], "memory must be (N, C) = (3, 4)"),
    ({"num_cells": 4}, [(3, 6), (2, 4)], "memory must be (N, C) = (3, 4)"),
    ({"num_cells": 0}, [(3, 6), (3, 0)], "num_cells is 0"),
])
def test_lstm_unit_bad_bottoms_name_the_rule(attrs, shapes, message):
    node = make_node("LstmUnit", attrs, shapes, n_tops=2)
    with pytest.raises(ShapeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        get_op("LstmUnit").infer(None, node, *shapes)


# ---- num_layers: the stack written out ---------------------------------------------------------

STACK_NET = """name: "stack"
input: "x" input_shape { dim: 6 dim: 2 dim: 3 }
input: "cont" input_shape { dim: 6 dim: 2 }
layer { name: "lstm" type: "LSTM" bottom: "x" bottom: "cont" top: "h"
        recurrent_param { num_output: 4 num_layers: 3 dropout_ratio: 0.5 engine: CUDNN } }
"""
#: The same stack as three separate layers, blob for blob.
SEPARATE_NET = """name: "separate"
input: "x" input_shape { dim: 6 dim: 2 dim: 3 }
input: "cont" input_shape { dim: 6 dim: 2 }
layer { name: "l0" type: "LSTM" bottom: "x" bottom: "cont" top: "h0"
        recurrent_param { num_output: 4 } }
layer { name: "l1" type: "LSTM" bottom: "h0" bottom: "cont" top: "h1"
        recurrent_param { num_output: 4 } }
layer { name: "l2" type: "LSTM" bottom: "h1" bottom: "cont" top: "h"
        recurrent_param { num_output: 4 } }
"""


def _stack_feeds():
    rng = np.random.default_rng(6)
    cont = np.ones((6, 2), np.float32)
    cont[0] = 0
    cont[3, 1] = 0   # stream 1 starts a new sequence in mid-call
    return {"x": rng.normal(size=(6, 2, 3)).astype(np.float32), "cont": cont}


def _separate_from_stack(stack):
    """The separate layers' graph, each level's blobs copied from the stack's."""
    from caffe_lstm.frontend.loader import load_net
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "separate.prototxt"
        path.write_text(SEPARATE_NET)
        graph = load_net(path).graph
    blobs = [w.data for w in next(n for n in stack.nodes if n.op == "LSTM").weights]
    for level, node in enumerate(n for n in graph.nodes if n.op == "LSTM"):
        for value, data in zip(node.weights, blobs[3 * level:3 * level + 3]):
            value.data = data
    return graph


def test_num_layers_equals_the_stack_of_separate_layers(tmp_path):
    """Numpy's stack, the rewritten stack and three separate LSTMs with the same blobs agree;
    dropout_ratio (training only) changes nothing; resets in mid-sequence."""
    from caffe_lstm.backends.numpy_exec import NumpyExecutor
    from caffe_lstm.passes import run_passes

    stack = net_with_weights(tmp_path, STACK_NET)
    lstm = next(n for n in stack.nodes if n.op == "LSTM")
    assert [w.shape for w in lstm.weights] == [(16, 3), (16,), (16, 4)] + [(16, 4), (16,),
                                                                           (16, 4)] * 2
    feeds = _stack_feeds()
    direct = NumpyExecutor(stack).run(feeds)["h"]
    separate = NumpyExecutor(_separate_from_stack(stack)).run(feeds)["h"]
    np.testing.assert_allclose(direct, separate, atol=1e-6)
    rewritten = run_passes(stack)
    assert "LSTM" not in {n.op for n in rewritten.nodes}
    np.testing.assert_allclose(NumpyExecutor(rewritten).run(feeds)["h"], direct, atol=1e-6)
    # and torch, level by level, on the part before the reset (cont = 0 only at t = 0)
    h = feeds["x"][:3]
    for level in range(3):
        w_xc, b_c, w_hc = (w.data for w in lstm.weights[3 * level:3 * level + 3])
        h = torch_lstm(h, w_xc, b_c, w_hc)[0]
    np.testing.assert_allclose(direct[:3], h, atol=1e-5)


@pytest.mark.parametrize("fields, message", [
    ("num_layers: 0", "num_layers is 0, expected >= 1"),
    ("num_layers: 2 peephole: true", "with cell variant fields"),
    ("num_layers: 2 expose_hidden: true", "with expose_hidden"),
])
def test_bad_stacks_are_refused_naming_the_field(tmp_path, fields, message):
    from caffe_lstm.errors import CaffeLstmError
    from caffe_lstm.frontend.loader import load_net

    path = tmp_path / "net.prototxt"
    path.write_text(STACK_NET.replace("num_layers: 3", fields))
    with pytest.raises(CaffeLstmError, match=message):
        load_net(path)


def test_an_rnn_stack_is_refused():
    node = make_node("RNN", {"num_output": 2, "expose_hidden": False, "extensions": {},
                             "stack": {"num_layers": 2}}, [(3, 1, 2), (3, 1)])
    with pytest.raises(ShapeError, match="stacks are read for LSTM only"):
        get_op("RNN").infer(None, node, (3, 1, 2), (3, 1))
