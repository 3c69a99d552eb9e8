"""The numpy evaluator of TensorRT's windowed layers and top-k, against torch.

Each network is built directly with the TensorRT-RTX API; padding that torch cannot express
(asymmetric, or counted differently) is made explicit with F.pad on the torch side.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tests.helpers import rand, TrtNet

trt = pytest.importorskip(
    "tensorrt_rtx_bindings",
    reason="TensorRT-RTX Python bindings (tensorrt_rtx_bindings) are not installed")


RNG = np.random.default_rng(11)
TOL = dict(rtol=1e-5, atol=1e-5)


def t(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x))


def weights(n: TrtNet, array: np.ndarray | None):
    if array is None:
        return trt.Weights()          # empty: no bias
    data = np.ascontiguousarray(array)
    n._keep.append(data)
    return trt.Weights(data)


def test_convolution_groups_stride_dilation_asymmetric_padding():
    n = TrtNet()
    x = n.input("x", trt.float32, (2, 4, 9, 10))
    w, b = rand(6, 2, 3, 2, rng=RNG), rand(6, rng=RNG)
    conv = n.net.add_convolution_nd(x, 6, (3, 2), weights(n, w), weights(n, b))
    conv.num_groups, conv.stride_nd, conv.dilation_nd = 2, (2, 1), (1, 3)
    conv.pre_padding, conv.post_padding = (1, 0), (2, 3)
    n.output(conv.get_output(0), "y")
    plain = n.net.add_convolution_nd(x, 6, (3, 2), weights(n, w), weights(n, None))
    plain.num_groups = 2
    n.output(plain.get_output(0), "plain")
    x_value = rand(2, 4, 9, 10, rng=RNG)
    out = n.run(x=x_value)
    padded = F.pad(t(x_value), (0, 3, 1, 2))           # (left, right, top, bottom)
    ref = F.conv2d(padded, t(w), t(b), stride=(2, 1), dilation=(1, 3), groups=2)
    np.testing.assert_allclose(out["y"], ref.numpy(), **TOL)
    np.testing.assert_allclose(out["plain"], F.conv2d(t(x_value), t(w), groups=2).numpy(), **TOL)


def test_convolution_3d():
    n = TrtNet()
    x = n.input("x", trt.float32, (1, 2, 5, 6, 4))
    w = rand(3, 2, 3, 3, 2, rng=RNG)
    conv = n.net.add_convolution_nd(x, 3, (3, 3, 2), weights(n, w), weights(n, None))
    conv.padding_nd, conv.stride_nd = (1, 1, 1), (2, 1, 1)
    n.output(conv.get_output(0), "y")
    x_value = rand(1, 2, 5, 6, 4, rng=RNG)
    ref = F.conv3d(t(x_value), t(w), padding=1, stride=(2, 1, 1))
    np.testing.assert_allclose(n.run(x=x_value)["y"], ref.numpy(), **TOL)


@pytest.mark.parametrize("pre, post", [((1, 0), (1, 0)), ((0, 2), (1, 0)), ((2, 0), (0, 1))])
def test_deconvolution_crops_its_padding(pre, post):
    n = TrtNet()
    x = n.input("x", trt.float32, (2, 4, 4, 5))
    w, b = rand(4, 3, 3, 2, rng=RNG), rand(6, rng=RNG)  # CKRS: C inputs, K = 3 outputs per group
    layer = n.net.add_deconvolution_nd(x, 6, (3, 2), weights(n, w), weights(n, b))
    layer.num_groups, layer.stride_nd, layer.dilation_nd = 2, (2, 3), (1, 2)
    layer.pre_padding, layer.post_padding = pre, post
    n.output(layer.get_output(0), "y")
    x_value = rand(2, 4, 4, 5, rng=RNG)
    full = F.conv_transpose2d(t(x_value), t(w), t(b), stride=(2, 3), dilation=(1, 2), groups=2)
    ref = full[:, :, pre[0]:full.shape[2] - post[0], pre[1]:full.shape[3] - post[1]]
    y = n.run(x=x_value)["y"]
    assert y.shape == tuple(ref.shape)
    np.testing.assert_allclose(y, ref.numpy(), **TOL)


def pooling(n: TrtNet, x, kind, window, stride, pre, post, round_up=False, exclude=True):
    layer = n.net.add_pooling_nd(x, kind, window)
    layer.stride_nd, layer.pre_padding, layer.post_padding = stride, pre, post
    layer.padding_mode = (trt.PaddingMode.EXPLICIT_ROUND_UP if round_up
                          else trt.PaddingMode.EXPLICIT_ROUND_DOWN)
    layer.average_count_excludes_padding = exclude
    return layer.get_output(0)


def test_pooling_explicit_asymmetric_padding():
    n = TrtNet()
    x = n.input("x", trt.float32, (1, 3, 7, 8))
    args = ((3, 2), (2, 2), (1, 0), (2, 1))
    n.output(pooling(n, x, trt.PoolingType.MAX, *args), "max")
    n.output(pooling(n, x, trt.PoolingType.AVERAGE, *args, exclude=True), "real")
    n.output(pooling(n, x, trt.PoolingType.AVERAGE, *args, exclude=False), "padded")
    x_value = rand(1, 3, 7, 8, rng=RNG)
    out = n.run(x=x_value)
    pad = (0, 1, 1, 2)
    max_ref = F.max_pool2d(F.pad(t(x_value), pad, value=-np.inf), (3, 2), (2, 2))
    sums = F.avg_pool2d(F.pad(t(x_value), pad), (3, 2), (2, 2))
    real = F.avg_pool2d(F.pad(torch.ones_like(t(x_value)), pad), (3, 2), (2, 2))
    np.testing.assert_allclose(out["max"], max_ref.numpy(), **TOL)
    np.testing.assert_allclose(out["padded"], sums.numpy(), **TOL)        # ÷ the whole window
    np.testing.assert_allclose(out["real"], (sums / real).numpy(), **TOL)  # ÷ the real part


def test_pooling_round_up_counts_the_padded_input_only():
    """Rounded up, the last window overhangs the padding: its AVERAGE divisor (counting
    padding) stops at the padded input, as torch's ceil_mode with count_include_pad."""
    n = TrtNet()
    x = n.input("x", trt.float32, (2, 2, 7, 9))
    args = ((3, 3), (2, 2), (1, 1), (1, 1))
    n.output(pooling(n, x, trt.PoolingType.AVERAGE, *args, round_up=True, exclude=False), "ave")
    n.output(pooling(n, x, trt.PoolingType.MAX, *args, round_up=True), "max")
    x_value = rand(2, 2, 7, 9, rng=RNG)
    out = n.run(x=x_value)
    ave = F.avg_pool2d(t(x_value), 3, 2, 1, ceil_mode=True, count_include_pad=True)
    np.testing.assert_allclose(out["ave"], ave.numpy(), **TOL)
    np.testing.assert_allclose(out["max"], F.max_pool2d(t(x_value), 3, 2, 1, ceil_mode=True),
                               **TOL)


@pytest.mark.parametrize("window", [1, 3, 5])
def test_lrn_matches_torch(window):
    n = TrtNet()
    x = n.input("x", trt.float32, (2, 7, 3, 4))
    n.output(n.net.add_lrn(x, window, 0.4, 0.75, 1.5).get_output(0), "y")
    x_value = rand(2, 7, 3, 4, rng=RNG)
    ref = F.local_response_norm(t(x_value), window, alpha=0.4, beta=0.75, k=1.5)
    np.testing.assert_allclose(n.run(x=x_value)["y"], ref.numpy(), **TOL)


def test_topk_values_and_indices():
    n = TrtNet()
    x = n.input("x", trt.float32, (3, 6, 2))
    top = n.net.add_topk(x, trt.TopKOperation.MAX, 2, 1 << 1)
    low = n.net.add_topk(x, trt.TopKOperation.MIN, 3, 1 << 1)
    for name, layer in (("top", top), ("low", low)):
        n.output(layer.get_output(0), f"{name}_values")
        n.output(layer.get_output(1), f"{name}_index")
    x_value = rand(3, 6, 2, rng=RNG)
    out = n.run(x=x_value)
    for name, k, largest in (("top", 2, True), ("low", 3, False)):
        ref = torch.topk(t(x_value), k, dim=1, largest=largest)
        np.testing.assert_array_equal(out[f"{name}_values"], ref.values.numpy())
        assert out[f"{name}_index"].dtype == np.int32
        np.testing.assert_array_equal(out[f"{name}_index"], ref.indices.numpy())


def test_fp16_convolution_and_pooling_between_casts():
    n = TrtNet()
    x = n.input("x", trt.float32, (1, 2, 6, 6))
    half = n.net.add_cast(x, trt.float16).get_output(0)
    w = rand(3, 2, 3, 3, rng=RNG)
    conv = n.net.add_convolution_nd(half, 3, (3, 3), weights(n, w.astype(np.float16)),
                                    weights(n, np.zeros(3, np.float16)))
    pool = pooling(n, conv.get_output(0), trt.PoolingType.AVERAGE, (2, 2), (2, 2), (0, 0), (0, 0))
    n.output(n.net.add_cast(pool, trt.float32).get_output(0), "y")
    x_value = rand(1, 2, 6, 6, rng=RNG)
    ref = F.avg_pool2d(F.conv2d(t(x_value), t(w)), 2)
    np.testing.assert_allclose(n.run(x=x_value)["y"], ref.numpy(), rtol=1e-2, atol=1e-2)
