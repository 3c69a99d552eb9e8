"""Slice, Concat, Split, Reshape, Flatten, Tile, Silence, Reduction: literal cases, torch
references, error messages and parse()."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from caffe_lstm.errors import ShapeError
from caffe_lstm.frontend.params import to_params
from caffe_lstm.ops import get_op
from tests.helpers import make_node, run_op

RESHAPE = {"axis": 0, "num_axes": -1}
FLATTEN = {"axis": 1, "end_axis": -1}


def infer_error(op_type, attrs, shapes, n_tops=1) -> str:
    """The message of the ShapeError that ``infer`` raises; it must name the layer."""
    node = make_node(op_type, attrs, shapes, n_tops)
    with pytest.raises(ShapeError) as info:
        get_op(op_type).infer(None, node, *shapes)
    assert f"layer 'layer' ({op_type})" in str(info.value)
    return str(info.value)


def message(message_name, text=""):
    """A parameter message of caffe.proto written in prototxt syntax, as Params."""
    caffe_pb2 = pytest.importorskip("caffe_lstm.proto.caffe_pb2")
    from google.protobuf import text_format

    return to_params(text_format.Parse(text, getattr(caffe_pb2, message_name)()))


def arange(*shape):
    return np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)


# ---- Slice -----------------------------------------------------------------------------------


def test_slice_with_points_cuts_at_the_points():
    # x = [[0 1 2 3] [4 5 6 7]], cut axis 1 at 1 and 3
    tops = run_op("Slice", {"axis": 1, "slice_point": [1, 3]}, [arange(2, 4)], n_tops=3)
    assert [t.tolist() for t in tops] == [[[0], [4]], [[1, 2], [5, 6]], [[3], [7]]]


def test_slice_without_points_cuts_evenly_like_lstm_cont_slice():
    # cont (T=3, N=2) sliced on axis 0 into one (1, N) blob per time step
    tops = run_op("Slice", {"axis": 0, "slice_point": []}, [arange(3, 2)], n_tops=3)
    assert [t.tolist() for t in tops] == [[[0, 1]], [[2, 3]], [[4, 5]]]


def test_slice_gate_blocks_match_torch_chunk():
    x = arange(1, 2, 8)  # (1, N, 4H) with H = 2: the i, f, o, g blocks
    tops = run_op("Slice", {"axis": 2, "slice_point": []}, [x], n_tops=4)
    for top, chunk in zip(tops, torch.chunk(torch.from_numpy(x), 4, dim=2)):
        np.testing.assert_array_equal(top, chunk.numpy())


def test_slice_one_top_is_identity_and_legacy_slice_dim_works():
    x = arange(2, 3)
    np.testing.assert_array_equal(run_op("Slice", {"axis": 1, "slice_point": []}, [x])[0], x)
    tops = run_op("Slice", {"slice_dim": 0, "slice_point": [1]}, [x], n_tops=2)
    assert [t.tolist() for t in tops] == [[[0, 1, 2]], [[3, 4, 5]]]


@pytest.mark.parametrize("points, expected", [
    ([3, 1], "strictly increasing within (0, 4), found [3, 1]"),
    ([2, 2], "strictly increasing"),
    ([0, 2], "strictly increasing"),
    ([1, 4], "strictly increasing"),
    ([1], "expected 2 slice_point for 3 tops, found 1"),
])
def test_slice_rejects_bad_points(points, expected):
    assert expected in infer_error("Slice", {"axis": 1, "slice_point": points}, [(2, 4)], 3)


def test_slice_rejects_uneven_split_and_axis_problems():
    assert "axis dim 4 cannot be cut into 3 equal parts" in infer_error(
        "Slice", {"axis": 1, "slice_point": []}, [(2, 4)], 3)
    assert "axis -3 is out of range for a 2-axis bottom" in infer_error(
        "Slice", {"axis": -3, "slice_point": []}, [(2, 4)], 2)
    assert "slice_dim 2 is out of range" in infer_error(
        "Slice", {"slice_dim": 2, "slice_point": []}, [(2, 4)], 2)
    assert "both axis (1) and slice_dim (0) are set" in infer_error(
        "Slice", {"axis": 1, "slice_dim": 0, "slice_point": []}, [(2, 4)], 2)


def test_slice_parse_keeps_axis_or_legacy_slice_dim():
    slice_op = get_op("Slice")
    assert slice_op.parse(None, message("SliceParameter")) == {"axis": 1, "slice_point": []}
    assert slice_op.parse(
        None, message("SliceParameter", "axis: 0 slice_point: 2 slice_point: 5")) == {
        "axis": 0, "slice_point": [2, 5]}
    assert slice_op.parse(None, message("SliceParameter", "slice_dim: 0")) == {
        "slice_dim": 0, "slice_point": []}
    both = slice_op.parse(None, message("SliceParameter", "slice_dim: 0 axis: 1"))
    assert "both axis" in infer_error("Slice", both, [(2, 4)], 2)


# ---- Concat / Split --------------------------------------------------------------------------


def test_concat_axis0_stacks_time_steps():
    h1, h2 = [[[1.0, 2.0]]], [[[3.0, 4.0]]]
    (y,) = run_op("Concat", {"axis": 0}, [h1, h2])
    assert y.tolist() == [[[1.0, 2.0]], [[3.0, 4.0]]]


def test_concat_negative_axis_matches_torch_cat():
    xs = [np.random.default_rng(i).standard_normal((2, 3, k)).astype(np.float32) for i, k in
          enumerate((1, 4, 2))]
    (y,) = run_op("Concat", {"axis": -1}, xs)
    np.testing.assert_array_equal(y, torch.cat([torch.from_numpy(x) for x in xs], dim=-1).numpy())


def test_concat_one_bottom_is_identity_and_legacy_concat_dim_works():
    x = arange(2, 3)
    np.testing.assert_array_equal(run_op("Concat", {"axis": 1}, [x])[0], x)
    (y,) = run_op("Concat", {"concat_dim": 0}, [x, x + 10])
    assert y.shape == (4, 3) and y[2].tolist() == [10.0, 11.0, 12.0]


def test_concat_rejects_mismatches():
    assert "bottom 1 has shape (3, 5), expected (3, 4) except along axis 0" in infer_error(
        "Concat", {"axis": 0}, [(3, 4), (3, 5)])
    assert "bottom 1 has shape (3, 4, 1)" in infer_error("Concat", {"axis": 0}, [(3, 4), (3, 4, 1)])
    assert "both axis (1) and concat_dim (1) are set" in infer_error(
        "Concat", {"axis": 1, "concat_dim": 1}, [(3, 4), (3, 4)])


def test_concat_parse():
    concat = get_op("Concat")
    assert concat.parse(None, message("ConcatParameter", "axis: 2")) == {"axis": 2}
    assert concat.parse(None, message("ConcatParameter", "concat_dim: 0")) == {"concat_dim": 0}
    assert concat.parse(None, message("ConcatParameter")) == {"axis": 1}


def test_split_copies_the_bottom_to_every_top():
    x = arange(2, 2)
    tops = run_op("Split", {}, [x], n_tops=3)
    assert len(tops) == 3 and all(t.tolist() == [[0, 1], [2, 3]] for t in tops)


def test_silence_has_no_tops():
    node = make_node("Silence", {}, [(2, 3), (4,)], n_tops=0)
    assert get_op("Silence").infer(None, node, (2, 3), (4,)) == ()
    assert get_op("Silence").numpy(None, node, arange(2, 3), arange(4)) == ()
    assert "at least 1 bottom" in infer_error("Silence", {}, [], n_tops=0)


# ---- Reshape / Flatten -----------------------------------------------------------------------


def test_reshape_ctpn_merges_axes_1_and_2():
    # shape { dim: -1 } axis: 1 num_axes: 2 on (N, H, W, C) = (2, 3, 4, 5) → (2, 12, 5)
    x = arange(2, 3, 4, 5)
    (y,) = run_op("Reshape", {"shape": [-1], "axis": 1, "num_axes": 2}, [x])
    assert y.shape == (2, 12, 5)
    assert y[1, 7, 2] == x[1, 1, 3, 2] == 1 * 60 + 1 * 20 + 3 * 5 + 2


def test_reshape_zero_copies_and_minus_one_infers():
    (y,) = run_op("Reshape", {**RESHAPE, "shape": [0, -1]}, [arange(2, 3, 4)])
    assert y.shape == (2, 12) and y[1].tolist() == list(range(12, 24))
    (y,) = run_op("Reshape", {**RESHAPE, "shape": [1, -1, 4]}, [arange(3, 4)])  # LSTM static
    assert y.shape == (1, 3, 4)


def test_reshape_range_keeps_dims_before_and_after():
    (y,) = run_op("Reshape", {"shape": [2, 3], "axis": 1, "num_axes": 1}, [arange(4, 6, 5)])
    assert y.shape == (4, 2, 3, 5)
    # 0 copies input axis start + i = 1 + 1 (5); −1 = 120 / (4·3·5)
    (y,) = run_op("Reshape", {"shape": [3, 0, -1], "axis": 1, "num_axes": 2}, [arange(4, 6, 5)])
    assert y.shape == (4, 3, 5, 2)


def test_reshape_negative_axis_counts_from_after_the_end():
    # axis −1 = start after the last axis: appends new axes
    (y,) = run_op("Reshape", {"shape": [1, 1], "axis": -1, "num_axes": 0}, [arange(2, 3)])
    assert y.shape == (2, 3, 1, 1)
    (y,) = run_op("Reshape", {"shape": [-1], "axis": -2, "num_axes": 1}, [arange(2, 3)])
    assert y.shape == (2, 3)


@pytest.mark.parametrize("attrs, shape, expected", [
    ({"shape": [5]}, (2, 3), "the new shape (5,) has 5 elements, the bottom (2, 3) has 6"),
    ({"shape": [-1, -1]}, (2, 3), "more than one −1 dim"),
    ({"shape": [-1, 4]}, (2, 3), "count 6 of (2, 3) is not divisible by 4"),
    ({"shape": [-2, -3]}, (2, 3), "shape dims must be ≥ −1"),
    ({"shape": [0, 0, 0]}, (2, 3), "shape dim 2 is 0 but bottom (2, 3) has no axis 2"),
    ({"shape": [6], "axis": 3}, (2, 3), "axis 3 is out of range for a 2-axis bottom"),
    ({"shape": [6], "axis": -4}, (2, 3), "axis -4 is out of range"),
    ({"shape": [6], "axis": 1, "num_axes": 2}, (2, 3), "exceeds the 2 axes"),
])
def test_reshape_rejects(attrs, shape, expected):
    assert expected in infer_error("Reshape", {**RESHAPE, **attrs}, [shape])


def test_reshape_parse_ctpn_params():
    attrs = get_op("Reshape").parse(
        None,
        message("ReshapeParameter", "shape { dim: -1 } axis: 1 num_axes: 2"))
    assert attrs == {"shape": [-1], "axis": 1, "num_axes": 2}
    assert get_op("Reshape").parse(None, message("ReshapeParameter")) == {
        "shape": [], "axis": 0, "num_axes": -1}


@pytest.mark.parametrize("axis, end_axis, expected", [
    (1, -1, (2, 60)), (0, 1, (6, 4, 5)), (1, 2, (2, 12, 5)), (-2, -1, (2, 3, 20)),
    (2, 2, (2, 3, 4, 5)),
])
def test_flatten_matches_torch(axis, end_axis, expected):
    x = arange(2, 3, 4, 5)
    (y,) = run_op("Flatten", {"axis": axis, "end_axis": end_axis}, [x])
    assert y.shape == expected
    np.testing.assert_array_equal(y, torch.flatten(torch.from_numpy(x), axis, end_axis).numpy())


def test_flatten_rejects_bad_axes_and_parses_defaults():
    assert "end_axis 0 comes before axis 2" in infer_error(
        "Flatten", {"axis": 2, "end_axis": 0}, [(2, 3, 4)])
    assert "end_axis 3 is out of range" in infer_error(
        "Flatten", {"axis": 1, "end_axis": 3}, [(2, 3, 4)])
    assert get_op("Flatten").parse(None, message("FlattenParameter")) == FLATTEN


# ---- Tile ------------------------------------------------------------------------------------


def test_tile_repeats_whole_blocks_abab():
    x = [[1.0, 2.0], [3.0, 4.0]]
    (y,) = run_op("Tile", {"axis": 1, "tiles": 2}, [x])
    assert y.tolist() == [[1, 2, 1, 2], [3, 4, 3, 4]]
    (y,) = run_op("Tile", {"axis": 0, "tiles": 3}, [x])
    assert y.tolist() == [[1, 2], [3, 4], [1, 2], [3, 4], [1, 2], [3, 4]]


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_tile_matches_torch_repeat(axis):
    x = arange(2, 3, 4)
    reps = [1, 1, 1]
    reps[axis] = 3
    (y,) = run_op("Tile", {"axis": axis, "tiles": 3}, [x])
    np.testing.assert_array_equal(y, torch.from_numpy(x).repeat(*reps).numpy())


def test_tile_rejects_missing_or_non_positive_tiles():
    assert "tiles must be set and > 0, found None" in infer_error(
        "Tile", {"axis": 1, "tiles": None}, [(2, 3)])
    assert "found 0" in infer_error("Tile", {"axis": 1, "tiles": 0}, [(2, 3)])
    assert "axis 2 is out of range" in infer_error("Tile", {"axis": 2, "tiles": 2}, [(2, 3)])


def test_tile_parse_uses_presence_of_tiles():
    tile = get_op("Tile")
    assert tile.parse(None, message("TileParameter")) == {"axis": 1, "tiles": None}
    assert tile.parse(None, message("TileParameter", "tiles: 4 axis: 0")) == {"axis": 0, "tiles": 4}


# ---- Reduction -------------------------------------------------------------------------------

ROWS = [[1.0, -2.0, 3.0], [-4.0, 5.0, -6.0]]


@pytest.mark.parametrize("operation, coeff, expected", [
    ("SUM", 1.0, [2.0, -5.0]),
    ("ASUM", 1.0, [6.0, 15.0]),
    ("SUMSQ", 1.0, [14.0, 77.0]),
    ("MEAN", 1.0, [2.0 / 3.0, -5.0 / 3.0]),
    ("SUM", 2.0, [4.0, -10.0]),
    ("MEAN", -3.0, [-2.0, 5.0]),
])
def test_reduction_literal(operation, coeff, expected):
    attrs = {"operation": operation, "axis": 1, "coeff": coeff}
    (y,) = run_op("Reduction", attrs, [ROWS])
    np.testing.assert_allclose(y, expected, rtol=1e-6)


def test_reduction_axis0_gives_a_scalar():
    (y,) = run_op("Reduction", {"operation": "SUM", "axis": 0, "coeff": 1.0}, [ROWS])
    assert y.shape == () and float(y) == -3.0


def test_reduction_reduces_every_trailing_axis_like_torch():
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)
    (y,) = run_op("Reduction", {"operation": "SUMSQ", "axis": -3, "coeff": 0.5}, [x])
    expected = 0.5 * torch.from_numpy(x).square().sum(dim=(1, 2, 3))
    np.testing.assert_allclose(y, expected.numpy(), rtol=1e-5)


def test_reduction_rejects_unknown_operation_and_bad_axis_and_parses():
    assert "'PROD' is unknown" in infer_error(
        "Reduction", {"operation": "PROD", "axis": 0, "coeff": 1.0}, [(2, 3)])
    assert "axis 2 is out of range" in infer_error(
        "Reduction", {"operation": "SUM", "axis": 2, "coeff": 1.0}, [(2, 3)])
    attrs = get_op("Reduction").parse(
        None,
        message("ReductionParameter", "operation: MEAN axis: 1 coeff: 0.5"))
    assert attrs == {"operation": "MEAN", "axis": 1, "coeff": 0.5}
