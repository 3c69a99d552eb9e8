"""Sigmoid, TanH, ReLU, Dropout, Softmax: literal hand-worked cases, torch references."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from caffe_lstm.errors import ShapeError
from caffe_lstm.frontend.params import to_params
from caffe_lstm.ops import get_op
from tests.helpers import make_node, rand, run_op


def parse(op_type, message_name, **fields):
    caffe_pb2 = pytest.importorskip("caffe_lstm.proto.caffe_pb2")
    return get_op(op_type).parse(None, to_params(getattr(caffe_pb2, message_name)(**fields)))


# ---- Sigmoid / TanH --------------------------------------------------------------------------


def test_sigmoid_literal():
    # σ(ln 3) = 1 / (1 + 1/3) = 3/4
    (y,) = run_op("Sigmoid", {}, [[0.0, math.log(3.0), -math.log(3.0)]])
    np.testing.assert_allclose(y, [0.5, 0.75, 0.25], rtol=1e-6)


def test_sigmoid_matches_torch_without_overflow_at_extremes():
    x = np.concatenate([rand(50, scale=3.0), [-200.0, -100.0, 100.0, 200.0]]).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (y,) = run_op("Sigmoid", {}, [x])
    np.testing.assert_allclose(y, torch.sigmoid(torch.from_numpy(x)).numpy(), atol=1e-6)
    assert y.dtype == np.float32


def test_tanh_literal():
    # tanh(ln 2) = (4 − 1) / (4 + 1)
    (y,) = run_op("TanH", {}, [[0.0, math.log(2.0), -math.log(2.0)]])
    np.testing.assert_allclose(y, [0.0, 0.6, -0.6], rtol=1e-6, atol=1e-7)


def test_tanh_matches_torch():
    x = rand(3, 4, 5, scale=3.0)
    (y,) = run_op("TanH", {}, [x])
    np.testing.assert_allclose(y, torch.tanh(torch.from_numpy(x)).numpy(), atol=1e-6)


def test_sigmoid_and_tanh_parse_nothing():
    assert parse("Sigmoid", "SigmoidParameter", engine=1) == {}
    assert parse("TanH", "TanHParameter") == {}


# ---- ReLU / Dropout --------------------------------------------------------------------------


def test_relu_literal_plain_and_leaky():
    x = [-2.0, -0.5, 0.0, 3.0]
    np.testing.assert_array_equal(run_op("ReLU", {"negative_slope": 0.0}, [x])[0],
                                  [0.0, 0.0, 0.0, 3.0])
    np.testing.assert_allclose(run_op("ReLU", {"negative_slope": 0.1}, [x])[0],
                               [-0.2, -0.05, 0.0, 3.0], rtol=1e-6)


def test_relu_matches_torch_leaky_relu():
    x = rand(4, 6, scale=3.0)
    (y,) = run_op("ReLU", {"negative_slope": 0.25}, [x])
    expected = torch.nn.functional.leaky_relu(torch.from_numpy(x), 0.25)
    np.testing.assert_allclose(y, expected.numpy(), rtol=1e-6)


def test_relu_parse():
    assert parse("ReLU", "ReLUParameter") == {"negative_slope": 0.0}
    assert parse("ReLU", "ReLUParameter", negative_slope=0.5) == {"negative_slope": 0.5}


def test_dropout_is_identity_at_inference():
    x = rand(2, 3, 4, scale=3.0)
    attrs = parse("Dropout", "DropoutParameter", dropout_ratio=0.7)
    assert attrs["dropout_ratio"] == pytest.approx(0.7)
    (y,) = run_op("Dropout", attrs, [x])
    np.testing.assert_array_equal(y, x)


# ---- Softmax ---------------------------------------------------------------------------------


def test_softmax_literal_over_channels():
    # e^0, e^ln2, e^ln5 = 1, 2, 5 → divided by 8
    x = [[0.0, math.log(2.0), math.log(5.0)], [1.0, 1.0, 1.0]]
    (y,) = run_op("Softmax", {"axis": 1}, [x])
    np.testing.assert_allclose(y, [[0.125, 0.25, 0.625], [1 / 3, 1 / 3, 1 / 3]], rtol=1e-6)


def test_softmax_large_inputs_stay_finite():
    x = [[1000.0, 1000.0 + math.log(3.0)], [-1000.0, -1000.0]]
    (y,) = run_op("Softmax", {"axis": 1}, [x])
    np.testing.assert_allclose(y, [[0.25, 0.75], [0.5, 0.5]], rtol=1e-4)


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_softmax_matches_torch_and_sums_to_one(axis):
    x = rand(2, 3, 4, 5, scale=3.0)
    (y,) = run_op("Softmax", {"axis": axis}, [x])
    expected = torch.softmax(torch.from_numpy(x), dim=axis).numpy()
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(y.sum(axis=axis), 1.0, rtol=1e-5)


def test_softmax_rejects_axis_out_of_range():
    node = make_node("Softmax", {"axis": 3}, [(2, 3, 4)])
    with pytest.raises(ShapeError) as info:
        get_op("Softmax").infer(None, node, (2, 3, 4))
    assert "layer 'layer' (Softmax)" in str(info.value)
    assert "axis 3 is out of range for a 3-axis bottom" in str(info.value)


def test_softmax_parse_default_axis():
    assert parse("Softmax", "SoftmaxParameter") == {"axis": 1}
    assert parse("Softmax", "SoftmaxParameter", axis=-1) == {"axis": -1}


@pytest.mark.parametrize("op_type, attrs", [
    ("Sigmoid", {}), ("TanH", {}), ("ReLU", {"negative_slope": 0.0}),
    ("Dropout", {"dropout_ratio": 0.5}), ("Softmax", {"axis": -2})])
def test_activations_keep_shape_and_float32(op_type, attrs):
    node = make_node(op_type, attrs, [(2, 1, 3, 4)])
    assert get_op(op_type).infer(None, node, (2, 1, 3, 4)) == ((2, 1, 3, 4),)
    assert get_op(op_type).blobs(None, node, (2, 1, 3, 4)) == ()
    (y,) = run_op(op_type, attrs, [rand(2, 1, 3, 4, scale=3.0)])
    assert y.dtype == np.float32
