"""The CNN-front-end and fork layers against torch (or hand-worked literals), to 1e-5.

Where Caffe and torch disagree the test says so and uses literals worked out from Caffe's
source instead (pooling_layer.cpp, argmax_layer.cpp, batch_norm_layer.cpp...).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from caffe_lstm.errors import ShapeError
from caffe_lstm.ops import get_op
from tests.helpers import conv_attrs, make_node, pool_attrs, rand, run_op

RNG = np.random.default_rng(2024)
TOL = dict(rtol=1e-5, atol=1e-5)


def t(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x))


def infer(op_type: str, attrs: dict, *shapes, n_tops: int = 1):
    node = make_node(op_type, attrs, shapes, n_tops)
    return get_op(op_type).infer(None, node, *shapes)


# ---- Convolution, Deconvolution, Im2col --------------------------------------------------------


def test_convolution_groups_dilation_and_per_axis_geometry():
    x, w, b = rand(2, 6, 13, 11, rng=RNG), rand(9, 2, 3, 2, rng=RNG), rand(9, rng=RNG)
    attrs = conv_attrs(num_output=9, group=3, kernel_size=[], kernel_h=3, kernel_w=2,
                       stride_h=2, stride_w=3, pad_h=2, pad_w=0, dilation=[2, 1])
    (y,) = run_op("Convolution", attrs, [x], [w, b])
    ref = F.conv2d(t(x), t(w), t(b), stride=(2, 3), padding=(2, 0), dilation=(2, 1), groups=3)
    np.testing.assert_allclose(y, ref.numpy(), **TOL)


def test_convolution_repeated_fields_per_axis_without_bias():
    x, w = rand(1, 3, 10, 8, rng=RNG), rand(5, 3, 2, 4, rng=RNG)
    attrs = conv_attrs(num_output=5, bias_term=False, kernel_size=[2, 4], stride=[1, 2],
                       pad=[1, 3], dilation=[3])
    (y,) = run_op("Convolution", attrs, [x], [w])
    ref = F.conv2d(t(x), t(w), stride=(1, 2), padding=(1, 3), dilation=3)
    np.testing.assert_allclose(y, ref.numpy(), **TOL)


@pytest.mark.parametrize("spatial", [(15,), (5, 6, 7)], ids=["1d", "3d"])
def test_convolution_nd(spatial):
    rank = len(spatial)
    x, w, b = rand(2, 4, *spatial, rng=RNG), rand(6, 2, *(3,) * rank, rng=RNG), rand(6, rng=RNG)
    attrs = conv_attrs(num_output=6, group=2, stride=[2], pad=[1])
    (y,) = run_op("Convolution", attrs, [x], [w, b])
    conv = F.conv1d if rank == 1 else F.conv3d
    np.testing.assert_allclose(y, conv(t(x), t(w), t(b), stride=2, padding=1, groups=2).numpy(),
                               **TOL)


def test_convolution_axis_2_convolves_every_leading_item():
    x, w, b = rand(3, 2, 4, 7, 7, rng=RNG), rand(5, 4, 3, 3, rng=RNG), rand(5, rng=RNG)
    (y,) = run_op("Convolution", conv_attrs(num_output=5, axis=2, pad=[1]), [x], [w, b])
    ref = F.conv2d(t(x.reshape(6, 4, 7, 7)), t(w), t(b), padding=1).numpy()
    np.testing.assert_allclose(y, ref.reshape(3, 2, 5, 7, 7), **TOL)


def test_deconvolution_groups_stride_pad_dilation():
    x, w, b = rand(2, 4, 5, 6, rng=RNG), rand(4, 3, 3, 2, rng=RNG), rand(6, rng=RNG)
    attrs = conv_attrs(num_output=6, group=2, kernel_size=[3, 2], stride=[2, 3], pad=[1, 0],
                       dilation=[1, 2])
    (y,) = run_op("Deconvolution", attrs, [x], [w, b])
    ref = F.conv_transpose2d(t(x), t(w), t(b), stride=(2, 3), padding=(1, 0), dilation=(1, 2),
                             groups=2)
    np.testing.assert_allclose(y, ref.numpy(), **TOL)


def test_deconvolution_blob_is_input_channels_first():
    attrs = conv_attrs(num_output=6, group=2, kernel_size=[4], stride=[2], pad=[1])
    node = make_node("Deconvolution", attrs, [(1, 4, 5, 5)])
    assert get_op("Deconvolution").blobs(None, node, (1, 4, 5, 5)) == (
        ("weight", (4, 3, 4, 4)), ("bias", (6,)))
    assert infer("Deconvolution", attrs, (1, 4, 5, 5)) == ((1, 6, 10, 10),)   # 2·4 + 4 − 2


def test_im2col_matches_unfold():
    """Caffe's im2col channel order is (c, kernel row, kernel col), torch.unfold's too."""
    x = rand(2, 3, 8, 9, rng=RNG)
    attrs = conv_attrs(kernel_size=[3, 2], stride=[2, 1], pad=[1, 0], dilation=[1, 2])
    (y,) = run_op("Im2col", attrs, [x])
    ref = F.unfold(t(x), (3, 2), dilation=(1, 2), padding=(1, 0), stride=(2, 1))
    assert y.shape == (2, 18, 4, 7)
    np.testing.assert_array_equal(y.reshape(2, 18, -1), ref.numpy())


def test_im2col_literal():
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)      # [[0, 1], [2, 3]]
    (y,) = run_op("Im2col", conv_attrs(kernel_size=[2], pad=[1], stride=[2]), [x])
    # padded: [[0 0 0 0], [0 0 1 0], [0 2 3 0], [0 0 0 0]]; row = tap (i, j), column =
    # output position: tap (0, 0) of the window at (2, 2) is x[1, 1] = 3, and so on
    np.testing.assert_array_equal(y.reshape(4, 4), [[0, 0, 0, 3], [0, 0, 2, 0],
                                                    [0, 1, 0, 0], [0, 0, 0, 0]])


@pytest.mark.parametrize("changes, shape, needle", [
    ({"group": 4}, (1, 6, 5, 5), "divisible by group 4"),
    ({"num_output": 0}, (1, 6, 5, 5), "num_output 0"),
    ({"kernel_size": [3], "kernel_h": 3}, (1, 6, 5, 5), "kernel_h/kernel_w given"),
    ({"kernel_size": [3, 3, 3]}, (1, 6, 5, 5), "3 entries for 2 spatial axes"),
    ({"kernel_size": [7]}, (1, 6, 5, 5), "does not fit"),
    ({"stride": [0]}, (1, 6, 5, 5), "stride [0, 0]"),
    ({"axis": 3}, (1, 6, 5, 5), "no spatial axis"),
])
def test_convolution_shape_errors(changes, shape, needle):
    with pytest.raises(ShapeError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        infer("Convolution", conv_attrs(**changes), shape)


# ---- Pooling ------------------------------------------------------------------------------------


# Caffe vs torch pooling (pooling_layer.cpp vs torch's pooling_shape / avg_pool2d kernels):
# - Both round up with ceil_mode and both drop the last window when it would start in the end
#   padding, (out − 1)·stride ≥ in + pad. Caffe applies that rule only when the layer has
#   padding; torch always. They differ only when a window can start past the input without
#   padding (kernel < stride): those cases are hand-worked literals below.
# - AVE: both divide by the window clipped to [−pad, in + pad) (count_include_pad=True), so
#   the overhang of a rounded-up window is not counted; torch checks pad ≤ kernel / 2 where
#   Caffe allows pad < kernel: that case is a literal too.
POOL_CASES = [  # (H, W), kernel, stride, pad
    ((7, 9), (3, 3), (2, 2), (1, 1)),     # rounded up, last windows overhang the padding
    ((6, 6), (3, 3), (2, 2), (1, 1)),     # the clip rule drops the last window
    ((5, 8), (2, 3), (2, 2), (0, 1)),     # rectangular, padding on one axis only
    ((9, 5), (3, 1), (3, 1), (0, 0)),     # no padding, exact fit
    ((4, 35), (4, 1), (1, 1), (0, 0)),    # caffe_ocr's pool5_ave
]


@pytest.mark.parametrize("method", ["MAX", "AVE"])
@pytest.mark.parametrize("size, kernel, stride, pad", POOL_CASES)
def test_pooling_ceil_matches_torch(method, size, kernel, stride, pad):
    x = rand(2, 3, *size, rng=RNG)
    attrs = pool_attrs(method, kernel_h=kernel[0], kernel_w=kernel[1], stride_h=stride[0],
                       stride_w=stride[1], pad_h=pad[0], pad_w=pad[1])
    (y,) = run_op("Pooling", attrs, [x])
    if method == "MAX":
        ref = F.max_pool2d(t(x), kernel, stride, pad, ceil_mode=True)
    else:
        ref = F.avg_pool2d(t(x), kernel, stride, pad, ceil_mode=True, count_include_pad=True)
    np.testing.assert_allclose(y, ref.numpy(), **TOL)


@pytest.mark.parametrize("method", ["MAX", "AVE"])
def test_pooling_floor_round_mode_matches_torch(method):
    x = rand(1, 2, 7, 8, rng=RNG)
    attrs = pool_attrs(method, kernel_size=3, stride=2, pad=1, round_mode="FLOOR")
    (y,) = run_op("Pooling", attrs, [x])
    pool = F.max_pool2d if method == "MAX" else F.avg_pool2d
    np.testing.assert_allclose(y, pool(t(x), 3, 2, 1).numpy(), **TOL)
    assert y.shape == (1, 2, 4, 4)


def test_pooling_literal_ave_divisor_clipped_to_padded_input():
    # W = 4, kernel 3, stride 2, pad 1: ⌈(4 + 2 − 3) / 2⌉ + 1 = 3 outputs (FLOOR would give 2);
    # windows start at −1, 1, 3; the last covers [3, 6) but Caffe clips its divisor at
    # in + pad = 5: 2, not 3 (all padding) nor 1 (the real input).
    x = np.array([1, 2, 3, 4], np.float32).reshape(1, 1, 1, 4)
    attrs = dict(kernel_h=1, kernel_w=3, stride_h=1, stride_w=2, pad_h=0, pad_w=1)
    (ave,) = run_op("Pooling", pool_attrs("AVE", **attrs), [x])
    (top,) = run_op("Pooling", pool_attrs("MAX", **attrs), [x])
    np.testing.assert_allclose(ave.ravel(), [(1 + 2) / 3, (2 + 3 + 4) / 3, 4 / 2], rtol=1e-6)
    np.testing.assert_array_equal(top.ravel(), [2, 4, 4])


def test_pooling_literal_clip_rule_drops_the_window_starting_in_the_padding():
    # W = 3, kernel 2, stride 2, pad 1: ⌈3/2⌉ + 1 = 3, but (3 − 1)·2 = 4 ≥ 3 + 1: only 2
    # windows, [−1, 1) and [1, 3).
    x = np.array([5, 6, 7], np.float32).reshape(1, 1, 1, 3)
    attrs = pool_attrs("AVE", kernel_h=1, kernel_w=2, stride_h=1, stride_w=2, pad_h=0, pad_w=1)
    (y,) = run_op("Pooling", attrs, [x])
    np.testing.assert_allclose(y.ravel(), [5 / 2, (6 + 7) / 2])


def test_pooling_literal_no_padding_keeps_a_window_past_the_input():
    # Caffe-only: W = 5, kernel 1, stride 3, no pad: ⌈4/3⌉ + 1 = 3 windows at 0, 3, 6 (torch
    # drops the third). The third sees nothing: MAX keeps −FLT_MAX, AVE gives 0 / (5 − 6) = −0.
    x = np.arange(1, 6, dtype=np.float32).reshape(1, 1, 1, 5)
    attrs = dict(kernel_h=1, kernel_w=1, stride_h=1, stride_w=3)
    (top,) = run_op("Pooling", pool_attrs("MAX", **attrs), [x])
    (ave,) = run_op("Pooling", pool_attrs("AVE", **attrs), [x])
    np.testing.assert_array_equal(top.ravel(), [1, 4, np.finfo(np.float32).min])
    np.testing.assert_array_equal(ave.ravel(), [1, 4, 0])


def test_pooling_literal_pad_above_half_the_kernel():
    # Caffe allows pad < kernel (torch: pad ≤ kernel / 2). W = 2, kernel 3, stride 1, pad 2:
    # ⌈(2 + 4 − 3) / 1⌉ + 1 = 4, clipped: (4 − 1) ≥ 2 + 2? no. Windows start −2, −1, 0, 1,
    # their divisors min(s + 3, 4) − s = 3, 3, 3, 3 (the last ends at 4).
    x = np.array([3, 6], np.float32).reshape(1, 1, 1, 2)
    attrs = dict(kernel_h=1, kernel_w=3, stride_h=1, stride_w=1, pad_h=0, pad_w=2)
    (ave,) = run_op("Pooling", pool_attrs("AVE", **attrs), [x])
    (top,) = run_op("Pooling", pool_attrs("MAX", **attrs), [x])
    np.testing.assert_allclose(ave.ravel(), [3 / 3, 9 / 3, 9 / 3, 6 / 3], rtol=1e-6)
    np.testing.assert_array_equal(top.ravel(), [3, 6, 6, 6])


@pytest.mark.parametrize("method", ["MAX", "AVE"])
def test_global_pooling(method):
    x = rand(2, 5, 4, 6, rng=RNG)
    (y,) = run_op("Pooling", pool_attrs(method, global_pooling=True), [x])
    ref = t(x).amax(dim=(2, 3), keepdim=True) if method == "MAX" else t(x).mean(
        dim=(2, 3), keepdim=True)
    np.testing.assert_allclose(y, ref.numpy(), **TOL)


@pytest.mark.parametrize("changes, needle", [
    ({"kernel_size": 3, "kernel_h": 3}, "kernel_size and kernel_h/kernel_w mixed"),
    ({"kernel_h": 3}, "kernel_size and kernel_h/kernel_w mixed"),
    ({}, "no kernel size"),
    ({"global_pooling": True, "kernel_size": 2}, "global_pooling with a kernel size"),
    ({"global_pooling": True, "stride": 2}, "global_pooling with pad"),
    ({"kernel_size": 2, "pad": 2}, "pad \\(2, 2\\) below kernel"),
    ({"kernel_size": 9}, "larger than the padded input"),
    ({"kernel_size": 2, "pool": "STOCHASTIC"}, "pool STOCHASTIC is not supported"),
])
def test_pooling_shape_errors(changes, needle):
    with pytest.raises(ShapeError, match=needle):
        infer("Pooling", pool_attrs(**changes), (1, 2, 5, 5))
    with pytest.raises(ShapeError, match="4-axis"):
        infer("Pooling", pool_attrs(kernel_size=2), (2, 5, 5))


# ---- LRN, BatchNorm, PReLU ----------------------------------------------------------------------


def lrn_attrs(region="ACROSS_CHANNELS", **changes) -> dict:
    attrs = {"local_size": 5, "alpha": 0.3, "beta": 0.75, "k": 2.0, "norm_region": region}
    attrs.update(changes)
    return attrs


@pytest.mark.parametrize("size", [1, 3, 5])
def test_lrn_across_channels_matches_torch(size):
    """Caffe's ACROSS_CHANNELS scale is k + α/n · Σ x², as torch's local_response_norm."""
    x = rand(2, 7, 3, 4, rng=RNG)
    (y,) = run_op("LRN", lrn_attrs(local_size=size), [x])
    ref = F.local_response_norm(t(x), size, alpha=0.3, beta=0.75, k=2.0)
    np.testing.assert_allclose(y, ref.numpy(), **TOL)


def test_lrn_within_channel_matches_torch_pooling():
    """WITHIN_CHANNEL: x · (1 + α · mean of x² over the n×n square)^−β; Caffe ignores k
    there (its power layer has shift 1) and its AVE pooling divides by n² everywhere."""
    x = rand(2, 3, 6, 5, rng=RNG)
    (y,) = run_op("LRN", lrn_attrs("WITHIN_CHANNEL", local_size=3), [x])
    mean = F.avg_pool2d(t(x) ** 2, 3, stride=1, padding=1, count_include_pad=True)
    np.testing.assert_allclose(y, (t(x) * (1 + 0.3 * mean) ** -0.75).numpy(), **TOL)


def test_lrn_rejects_an_even_size():
    with pytest.raises(ShapeError, match="local_size must be odd"):
        infer("LRN", lrn_attrs(local_size=4), (1, 8, 2, 2))


def test_batch_norm_divides_the_stored_statistics_by_the_factor():
    x, mean, var = rand(2, 4, 3, 5, rng=RNG), rand(4, rng=RNG), np.abs(rand(4, rng=RNG)) + 0.1
    factor = np.array([2.5], np.float32)
    attrs = {"use_global_stats": True, "eps": 1e-3}
    (y,) = run_op("BatchNorm", attrs, [x], [mean, var, factor])
    ref = F.batch_norm(t(x), t(mean / 2.5), t(var / 2.5), training=False, eps=1e-3)
    np.testing.assert_allclose(y, ref.numpy(), **TOL)


def test_batch_norm_zero_factor_means_zero_statistics():
    x = rand(3, 2, rng=RNG)
    attrs = {"use_global_stats": True, "eps": 1e-5}
    (y,) = run_op("BatchNorm", attrs, [x],
                  [rand(2, rng=RNG), rand(2, rng=RNG), np.zeros(1, np.float32)])
    np.testing.assert_allclose(y, x / np.sqrt(np.float32(1e-5)), rtol=1e-5)


def test_batch_norm_without_global_stats_uses_the_batch():
    x = rand(4, 3, 2, 5, rng=RNG)
    attrs = {"use_global_stats": False, "eps": 1e-5}
    (y,) = run_op("BatchNorm", attrs, [x],
                  [rand(3, rng=RNG), rand(3, rng=RNG), np.ones(1, np.float32)])
    ref = F.batch_norm(t(x), None, None, training=True, eps=1e-5)
    np.testing.assert_allclose(y, ref.numpy(), **TOL)


@pytest.mark.parametrize("shared", [False, True])
def test_prelu(shared):
    x = rand(2, 4, 3, 3, rng=RNG)
    slope = np.array(0.3, np.float32) if shared else rand(4, rng=RNG)
    (y,) = run_op("PReLU", {"channel_shared": shared}, [x], [slope])
    np.testing.assert_allclose(y, F.prelu(t(x), t(slope.reshape(-1))).numpy(), **TOL)


# ---- pointwise -----------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_softmax_axis(axis):
    x = rand(3, 4, 5, rng=RNG)
    (y,) = run_op("Softmax", {"axis": axis}, [x])
    np.testing.assert_allclose(y, torch.softmax(t(x), dim=axis).numpy(), **TOL)


X = np.linspace(-30, 30, 61, dtype=np.float32).reshape(1, 61)
POSITIVE = np.linspace(0.05, 9, 40, dtype=np.float32).reshape(2, 20)


@pytest.mark.parametrize("op_type, attrs, x, expected", [
    ("ELU", {"alpha": 0.7}, X, lambda v: F.elu(v, alpha=0.7)),
    ("AbsVal", {}, X, torch.abs),
    ("BNLL", {}, X, F.softplus),
    ("Exp", {"base": -1, "scale": 0.1, "shift": 0.5}, X, lambda v: torch.exp(0.5 + 0.1 * v)),
    ("Exp", {"base": 2, "scale": 0.3, "shift": -1}, X, lambda v: torch.pow(2.0, -1 + 0.3 * v)),
    ("Log", {"base": -1, "scale": 1, "shift": 0}, POSITIVE, torch.log),
    ("Log", {"base": 10, "scale": 2, "shift": 1}, POSITIVE, lambda v: torch.log10(1 + 2 * v)),
    ("Clip", {"min": -2.5, "max": 4}, X, lambda v: torch.clamp(v, -2.5, 4)),
], ids=["elu", "absval", "bnll", "exp_e", "exp_2", "log_e", "log_10", "clip"])
def test_pointwise(op_type, attrs, x, expected):
    (y,) = run_op(op_type, attrs, [x])
    np.testing.assert_allclose(y, expected(t(x)).numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op_type, attrs, needle", [
    ("Exp", {"base": 0, "scale": 1, "shift": 0}, "base must be −1"),
    ("Log", {"base": -2, "scale": 1, "shift": 0}, "base must be −1"),
    ("Clip", {"min": None, "max": 1}, "clip_param needs min and max"),
])
def test_pointwise_param_errors(op_type, attrs, needle):
    with pytest.raises(ShapeError, match=needle):
        infer(op_type, attrs, (2, 3))


# ---- Crop, ArgMax --------------------------------------------------------------------------------


@pytest.mark.parametrize("axis, offset", [(2, []), (2, [1]), (1, [1, 2, 0]), (-2, [3, 1])])
def test_crop(axis, offset):
    x, ref = rand(2, 4, 6, 5, rng=RNG), np.zeros((1, 2, 3, 4), np.float32)
    (y,) = run_op("Crop", {"axis": axis, "offset": offset}, [x, ref])
    start = axis % 4
    offsets = (offset or [0]) * (4 - start) if len(offset) <= 1 else offset
    index = [slice(None)] * start + [slice(o, o + n) for o, n in zip(offsets, ref.shape[start:])]
    np.testing.assert_array_equal(y, t(x)[tuple(index)].numpy())
    assert y.shape[:start] == x.shape[:start] and y.shape[start:] == ref.shape[start:]


@pytest.mark.parametrize("attrs, needle", [
    ({"axis": 1, "offset": [3]}, "exceeds"),
    ({"axis": 1, "offset": [0, 1]}, "2 offsets for 3 cropped axes"),
])
def test_crop_errors(attrs, needle):
    with pytest.raises(ShapeError, match=needle):
        infer("Crop", attrs, (2, 4, 6, 5), (1, 2, 3, 4))


def test_argmax_along_an_axis_matches_torch_topk():
    x = rand(2, 7, 3, rng=RNG)
    (index,) = run_op("ArgMax", {"out_max_val": False, "top_k": 3, "axis": 1}, [x])
    (values,) = run_op("ArgMax", {"out_max_val": True, "top_k": 3, "axis": -2}, [x])
    ref = torch.topk(t(x), 3, dim=1)
    np.testing.assert_array_equal(index, ref.indices.numpy())
    np.testing.assert_array_equal(values, ref.values.numpy())


def test_argmax_without_axis_flattens_each_item():
    x = rand(3, 2, 5, rng=RNG)
    (index,) = run_op("ArgMax", {"out_max_val": False, "top_k": 2, "axis": None}, [x])
    (both,) = run_op("ArgMax", {"out_max_val": True, "top_k": 2, "axis": None}, [x])
    ref = torch.topk(t(x).reshape(3, 10), 2, dim=1)
    assert index.shape == (3, 1, 2) and both.shape == (3, 2, 2)
    np.testing.assert_array_equal(index[:, 0], ref.indices.numpy())
    np.testing.assert_array_equal(both[:, 0], ref.indices.numpy())
    np.testing.assert_array_equal(both[:, 1], ref.values.numpy())


def test_argmax_literal_ties_rank_the_higher_index_first():
    # argmax_layer.cpp sorts (value, index) pairs with std::greater: 3 at 1 and 4, 3 at 4 first
    x = np.array([[1, 3, 0, 2, 3, 1]], np.float32)
    (y,) = run_op("ArgMax", {"out_max_val": False, "top_k": 3, "axis": None}, [x])
    np.testing.assert_array_equal(y.ravel(), [4, 1, 3])
    assert y.shape == (1, 1, 3)


def test_argmax_rejects_top_k_beyond_the_axis():
    with pytest.raises(ShapeError, match="top_k 6 must be in"):
        infer("ArgMax", {"out_max_val": False, "top_k": 6, "axis": 1}, (2, 5))


# ---- fork layers ---------------------------------------------------------------------------------


def test_permute_appends_the_missing_axes():
    x = rand(2, 3, 4, 5, rng=RNG)
    (y,) = run_op("Permute", {"order": [3, 0]}, [x])
    np.testing.assert_array_equal(y, t(x).permute(3, 0, 1, 2).numpy())


def test_transpose_lists_every_axis():
    x = rand(2, 3, 4, 5, rng=RNG)
    (y,) = run_op("Transpose", {"dim": [3, 2, 0, 1]}, [x])
    np.testing.assert_array_equal(y, t(x).permute(3, 2, 0, 1).numpy())


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_reverse(axis):
    x = rand(4, 3, 2, rng=RNG)
    (y,) = run_op("Reverse", {"axis": axis}, [x])
    np.testing.assert_array_equal(y, torch.flip(t(x), dims=(axis,)).numpy())


def test_continuation_indicator_literal():
    (cont,) = run_op("ContinuationIndicator", {"time_step": 3, "batch_size": 2}, [])
    np.testing.assert_array_equal(cont, [[0, 0], [1, 1], [1, 1]])


@pytest.mark.parametrize("op_type, attrs, shape, needle", [
    ("Permute", {"order": [1, 1]}, (2, 3), "repeats an axis"),
    ("Permute", {"order": [2]}, (2, 3), "leaves the 2 axes"),
    ("Transpose", {"dim": [1, 0]}, (2, 3, 4), "not a permutation of the 3 axes"),
    ("Reverse", {"axis": -1}, (2, 3), "no negative axes"),
    ("Reverse", {"axis": 2}, (2, 3), "axis 2 is out of range"),
])
def test_fork_shape_errors(op_type, attrs, shape, needle):
    with pytest.raises(ShapeError, match=needle):
        infer(op_type, attrs, shape)


def test_continuation_indicator_needs_both_sizes():
    with pytest.raises(ShapeError, match="time_step 0 and batch_size 1"):
        infer("ContinuationIndicator", {"time_step": 0, "batch_size": 1})
