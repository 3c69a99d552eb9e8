"""Eltwise, Scale, Bias, Power: literal hand-worked cases, torch references, error messages."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from caffe_lstm.errors import ShapeError
from caffe_lstm.frontend.params import to_params
from caffe_lstm.ops import get_op
from tests.helpers import make_node, rand, run_op

SCALE = {"axis": 1, "num_axes": 1, "bias_term": False}
BIAS = {"axis": 1, "num_axes": 1}


def infer_error(op_type, attrs, shapes) -> str:
    """The message of the ShapeError that ``infer`` raises; it must name the layer."""
    node = make_node(op_type, attrs, shapes)
    with pytest.raises(ShapeError) as info:
        get_op(op_type).infer(None, node, *shapes)
    assert f"layer 'layer' ({op_type})" in str(info.value)
    return str(info.value)


def parse(op_type, message_name, **fields):
    caffe_pb2 = pytest.importorskip("caffe_lstm.proto.caffe_pb2")
    return get_op(op_type).parse(None, to_params(getattr(caffe_pb2, message_name)(**fields)))


# ---- Eltwise ---------------------------------------------------------------------------------

A = [[1.0, 2.0], [3.0, 4.0]]
B = [[10.0, -20.0], [0.5, 4.0]]
C = [[-1.0, 0.0], [2.0, 5.0]]


def test_eltwise_sum_default_coeffs_adds():
    (y,) = run_op("Eltwise", {"operation": "SUM", "coeff": []}, [A, B])
    np.testing.assert_array_equal(y, [[11.0, -18.0], [3.5, 8.0]])


def test_eltwise_sum_with_coeffs_weights_each_bottom():
    (y,) = run_op("Eltwise", {"operation": "SUM", "coeff": [0.5, 1.0, -2.0]}, [A, B, C])
    # 0.5·A + B − 2·C
    np.testing.assert_allclose(y, [[12.5, -19.0], [-2.0, -4.0]])


def test_eltwise_prod_multiplies_all_bottoms():
    (y,) = run_op("Eltwise", {"operation": "PROD", "coeff": []}, [A, B, C])
    np.testing.assert_array_equal(y, [[-10.0, -0.0], [3.0, 80.0]])


def test_eltwise_max_takes_elementwise_max():
    (y,) = run_op("Eltwise", {"operation": "MAX", "coeff": []}, [A, B, C])
    np.testing.assert_array_equal(y, [[10.0, 2.0], [3.0, 5.0]])


@pytest.mark.parametrize("operation", ["SUM", "PROD", "MAX"])
def test_eltwise_matches_torch(operation):
    xs = [rand(2, 3, 4, rng=s) for s in range(3)]
    ts = [torch.from_numpy(x) for x in xs]
    expected = {"SUM": ts[0] * 2 + ts[1] - ts[2] * 0.25,
                "PROD": ts[0] * ts[1] * ts[2],
                "MAX": torch.maximum(torch.maximum(ts[0], ts[1]), ts[2])}[operation]
    coeff = [2.0, 1.0, -0.25] if operation == "SUM" else []
    (y,) = run_op("Eltwise", {"operation": operation, "coeff": coeff}, xs)
    np.testing.assert_allclose(y, expected.numpy(), rtol=1e-6, atol=1e-6)


def test_eltwise_rejects_shape_mismatch():
    message = infer_error("Eltwise", {"operation": "SUM", "coeff": []}, [(2, 3), (3, 2)])
    assert "bottom 1 has shape (3, 2), expected (2, 3)" in message


def test_eltwise_rejects_wrong_coeff_count():
    message = infer_error("Eltwise", {"operation": "SUM", "coeff": [1.0]}, [(2,), (2,), (2,)])
    assert "one coeff per bottom (3), found 1" in message


def test_eltwise_rejects_coeff_with_prod():
    message = infer_error("Eltwise", {"operation": "PROD", "coeff": [1.0, 1.0]}, [(2,), (2,)])
    assert "PROD" in message


def test_eltwise_rejects_single_bottom_and_unknown_operation():
    assert "at least 2 bottoms" in infer_error("Eltwise", {"operation": "SUM"}, [(2,)])
    assert "'DIV' is unknown" in infer_error("Eltwise", {"operation": "DIV"}, [(2,), (2,)])


def test_eltwise_parse_gives_enum_names():
    assert parse("Eltwise", "EltwiseParameter") == {"operation": "SUM", "coeff": []}
    assert parse("Eltwise", "EltwiseParameter", operation=0) == {"operation": "PROD", "coeff": []}
    attrs = parse("Eltwise", "EltwiseParameter", operation=1, coeff=[1.0, -1.0])
    assert attrs == {"operation": "SUM", "coeff": [1.0, -1.0]}


# ---- Scale -----------------------------------------------------------------------------------


def test_scale_two_bottoms_axis0_scales_rows_like_lstm_h_conted():
    # (1,2,3) hidden state times a (1,2) cont: row n of the 2 streams scaled by cont[n].
    x = [[[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]]
    (y,) = run_op("Scale", {**SCALE, "axis": 0}, [x, [[2.0, -1.0]]])
    np.testing.assert_array_equal(y, [[[0.0, 2.0, 4.0], [-3.0, -4.0, -5.0]]])


def test_scale_one_bottom_learned_scale_and_bias():
    x = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
    node = make_node("Scale", {**SCALE, "bias_term": True}, [x.shape])
    assert get_op("Scale").blobs(None, node, x.shape) == (("scale", (3,)), ("bias", (3,)))
    (y,) = run_op("Scale", {**SCALE, "bias_term": True}, [x], [[1.0, 0.0, -1.0], [0.5, 1.0, 2.0]])
    # y[o, d, i] = x[o, d, i]·s[d] + b[d]
    np.testing.assert_array_equal(y, [[[0.5, 1.5], [1.0, 1.0], [-2.0, -3.0]],
                                      [[6.5, 7.5], [1.0, 1.0], [-8.0, -9.0]]])


@pytest.mark.parametrize("num_axes, blob_shape", [(-1, (3, 4)), (0, ()), (2, (3, 4)), (1, (3,))])
def test_scale_one_bottom_blob_shape_follows_num_axes(num_axes, blob_shape):
    node = make_node("Scale", {**SCALE, "num_axes": num_axes}, [(2, 3, 4)])
    assert get_op("Scale").blobs(None, node, (2, 3, 4)) == (("scale", blob_shape),)


def test_scale_scalar_operand_ignores_axis():
    # A 0-axis scale multiplies everything; axis 7 would be out of range but is not used.
    x = [[1.0, -2.0], [3.0, 4.0]]
    (y,) = run_op("Scale", {**SCALE, "axis": 7}, [x, np.float32(3.0)])
    np.testing.assert_array_equal(y, [[3.0, -6.0], [9.0, 12.0]])


def test_scale_two_bottoms_with_bias_term_learns_only_bias():
    x, s = [[1.0, 2.0], [3.0, 4.0]], [10.0, -1.0]
    node = make_node("Scale", {**SCALE, "axis": 0, "bias_term": True}, [(2, 2), (2,)])
    assert get_op("Scale").blobs(None, node, (2, 2), (2,)) == (("bias", (2,)),)
    (y,) = run_op("Scale", {**SCALE, "axis": 0, "bias_term": True}, [x, s], [[0.5, 100.0]])
    np.testing.assert_array_equal(y, [[10.5, 20.5], [97.0, 96.0]])


def test_scale_negative_axis_matches_torch_broadcast():
    x, s = rand(2, 3, 4, 5), rand(3, 4, rng=1)
    (y,) = run_op("Scale", {**SCALE, "axis": -3}, [x, s])
    expected = torch.from_numpy(x) * torch.from_numpy(s)[None, :, :, None]
    np.testing.assert_allclose(y, expected.numpy(), rtol=1e-6)


def test_scale_rejects_scale_shape_mismatch():
    message = infer_error("Scale", {**SCALE, "axis": 0}, [(1, 2, 3), (2, 1)])
    assert "scale shape (2, 1) must equal the bottom dims from axis 0, found (1, 2)" in message


def test_scale_rejects_scale_longer_than_bottom():
    message = infer_error("Scale", {**SCALE, "axis": 1}, [(1, 2, 3), (2, 3, 1)])
    assert "found (2, 3)" in message


def test_scale_rejects_axis_out_of_range_and_num_axes_too_large():
    assert "axis 3 is out of range for a 3-axis bottom" in infer_error(
        "Scale", {**SCALE, "axis": 3}, [(1, 2, 3)])
    assert "exceeds the 3 axes" in infer_error("Scale", {**SCALE, "num_axes": 3}, [(1, 2, 3)])


def test_scale_parse():
    attrs = parse("Scale", "ScaleParameter", axis=0, bias_term=True)
    assert attrs == {"axis": 0, "num_axes": 1, "bias_term": True}


# ---- Bias ------------------------------------------------------------------------------------


def test_bias_one_bottom_adds_learned_blob_per_channel():
    x = [[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]]
    node = make_node("Bias", BIAS, [(1, 3, 2)])
    assert get_op("Bias").blobs(None, node, (1, 3, 2)) == (("bias", (3,)),)
    (y,) = run_op("Bias", BIAS, [x], [[10.0, 0.0, -1.0]])
    np.testing.assert_array_equal(y, [[[11.0, 12.0], [3.0, 4.0], [4.0, 5.0]]])


def test_bias_two_bottoms_has_no_blobs_and_matches_torch():
    x, b = rand(2, 3, 4), rand(3, 4, rng=1)
    node = make_node("Bias", BIAS, [(2, 3, 4), (3, 4)])
    assert get_op("Bias").blobs(None, node, (2, 3, 4), (3, 4)) == ()
    (y,) = run_op("Bias", BIAS, [x, b])
    np.testing.assert_allclose(y, (torch.from_numpy(x) + torch.from_numpy(b)).numpy())


def test_bias_rejects_shape_mismatch():
    assert "bias shape (4,)" in infer_error("Bias", BIAS, [(2, 3, 4), (4,)])


# ---- Power -----------------------------------------------------------------------------------


def test_power_literal():
    attrs = {"power": 2.0, "scale": 0.5, "shift": 1.0}
    (y,) = run_op("Power", attrs, [[0.0, 2.0, -4.0, 6.0]])
    # (1 + 0.5·x)²
    np.testing.assert_array_equal(y, [1.0, 4.0, 1.0, 16.0])


def test_power_matches_torch_and_parse_defaults_are_identity():
    x = np.abs(rand(3, 4)) + 0.1
    (y,) = run_op("Power", {"power": 0.5, "scale": 3.0, "shift": -0.2}, [x])
    expected = torch.pow(torch.from_numpy(x) * 3.0 - 0.2, 0.5)
    np.testing.assert_allclose(y, expected.numpy(), rtol=1e-6)
    attrs = parse("Power", "PowerParameter")
    assert attrs == {"power": 1.0, "scale": 1.0, "shift": 0.0}
    np.testing.assert_array_equal(run_op("Power", attrs, [x])[0], x)
