"""The non-recurrent fork layers (Interp, SpatialTransformer, PSROIPooling, Repeat) against
references written from the forks' own sources, and torch where torch has the operation.

Each ``reference_*`` below is a line-by-line port of the fork's forward loop (named in its
docstring), not of our numpy facet: scalar loops over every output element.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.helpers import rand, run_op

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(17)


# ---- Interp -----------------------------------------------------------------------------------


def reference_interp(x: np.ndarray, pad_beg: int, pad_end: int, h2: int, w2: int) -> np.ndarray:
    """DeepLab v2 caffe_cpu_interp2<float, false> (src/caffe/util/interp.cpp) as InterpLayer
    calls it: window at (-pad_beg, -pad_beg) of size (H + pad_beg + pad_end, ...)."""
    n, c, big_h, big_w = x.shape
    y1 = x1 = -pad_beg
    h1, w1 = big_h + pad_beg + pad_end, big_w + pad_beg + pad_end
    out = np.zeros((n, c, h2, w2), np.float32)
    data = x.reshape(n * c, big_h, big_w)
    flat = out.reshape(n * c, h2, w2)
    if h1 == h2 and w1 == w2:
        flat[:] = data[:, y1:y1 + h1, x1:x1 + w1]
        return out
    rheight = np.float32(h1 - 1) / np.float32(h2 - 1) if h2 > 1 else np.float32(0)
    rwidth = np.float32(w1 - 1) / np.float32(w2 - 1) if w2 > 1 else np.float32(0)
    for i in range(h2):
        h1r = np.float32(rheight * np.float32(i))
        h = int(h1r)
        hp = 1 if h < h1 - 1 else 0
        hl1 = np.float32(h1r - np.float32(h))
        hl0 = np.float32(1) - hl1
        for j in range(w2):
            w1r = np.float32(rwidth * np.float32(j))
            w = int(w1r)
            wp = 1 if w < w1 - 1 else 0
            wl1 = np.float32(w1r - np.float32(w))
            wl0 = np.float32(1) - wl1
            p = data[:, y1 + h:, x1 + w:]
            flat[:, i, j] = (hl0 * (wl0 * p[:, 0, 0] + wl1 * p[:, 0, wp])
                             + hl1 * (wl0 * p[:, hp, 0] + wl1 * p[:, hp, wp]))
    return out


def interp_attrs(**given) -> dict:
    attrs = {"height": None, "width": None, "zoom_factor": None, "shrink_factor": None,
             "pad_beg": 0, "pad_end": 0}
    return {**attrs, **given}


def test_interp_zoom_by_hand():
    # 2x2 zoomed by 2 -> 3x3: the midpoints are the means of their neighbours
    x = np.array([[[[0, 1], [2, 3]]]], np.float32)
    (y,) = run_op("Interp", interp_attrs(zoom_factor=2), [x])
    np.testing.assert_array_equal(y[0, 0], [[0, 0.5, 1], [1, 1.5, 2], [2, 2.5, 3]])


def test_interp_shrink_by_hand_picks_every_other_pixel():
    x = rand(1, 2, 5, 7, rng=RNG)
    (y,) = run_op("Interp", interp_attrs(shrink_factor=2), [x])
    assert y.shape == (1, 2, 3, 4)
    np.testing.assert_allclose(y, x[:, :, ::2, ::2], rtol=1e-6, atol=1e-6)


def test_interp_crop_same_size_copies_the_window():
    x = rand(2, 3, 6, 5, rng=RNG)
    (y,) = run_op("Interp", interp_attrs(height=3, width=2, pad_beg=-2, pad_end=-1), [x])
    np.testing.assert_array_equal(y, x[:, :, 2:5, 2:4])


@pytest.mark.parametrize("attrs, shape", [
    (interp_attrs(zoom_factor=3), (2, 3, 4, 5)),
    (interp_attrs(zoom_factor=2, pad_beg=-1), (1, 2, 5, 6)),
    (interp_attrs(shrink_factor=3, pad_end=-1), (1, 2, 9, 8)),
    (interp_attrs(shrink_factor=2, zoom_factor=3), (1, 2, 7, 6)),
    (interp_attrs(height=7, width=3), (2, 2, 4, 5)),
    (interp_attrs(height=1, width=9, pad_beg=-1, pad_end=-1), (1, 3, 5, 4)),
    (interp_attrs(height=13, width=11, zoom_factor=None), (1, 1, 4, 6)),
])
def test_interp_equals_the_fork_and_torch(attrs, shape):
    x = rand(*shape, rng=RNG)
    (y,) = run_op("Interp", attrs, [x])
    pb, pe = attrs["pad_beg"], attrs["pad_end"]
    np.testing.assert_allclose(y, reference_interp(x, pb, pe, *y.shape[2:]), rtol=1e-5,
                               atol=1e-6)
    # torch: the same grid is interpolate(align_corners=True) on the cropped window
    window = torch.from_numpy(x)[:, :, -pb:shape[2] + pe, -pb:shape[3] + pe]
    want = torch.nn.functional.interpolate(window, size=y.shape[2:], mode="bilinear",
                                           align_corners=True).numpy()
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


def test_interp_second_bottom_gives_the_size():
    x, ref = rand(1, 2, 3, 4, rng=RNG), rand(1, 5, 6, 7, rng=RNG)
    (y,) = run_op("Interp", interp_attrs(), [x, ref])
    np.testing.assert_allclose(y, reference_interp(x, 0, 0, 6, 7), rtol=1e-5, atol=1e-6)


# ---- SpatialTransformer -----------------------------------------------------------------------

THETA = ("theta_1_1", "theta_1_2", "theta_1_3", "theta_2_1", "theta_2_2", "theta_2_3")


def st_attrs(out_h=None, out_w=None, **fixed) -> dict:
    return {"transform_type": "affine", "sampler_type": "bilinear", "to_compute_dU": True,
            "output_H": out_h, "output_W": out_w, **{name: fixed.get(name) for name in THETA}}


def reference_st(u: np.ndarray, full: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    """daerduoCarey's SpatialTransformerForwardGPU (st_layer.cu), one output element at a time:
    the output grid of LayerSetUp, the gemm with the full theta, the four corners."""
    n, c, height, width = u.shape
    v = np.zeros((n, c, out_h, out_w), np.float32)
    for i in range(n):
        for s in range(out_h):
            for t in range(out_w):
                row = np.float32(s * 1.0 / out_h * 2 - 1)
                col = np.float32(t * 1.0 / out_w * 2 - 1)
                px = full[i, 0] * row + full[i, 1] * col + full[i, 2]
                py = full[i, 3] * row + full[i, 4] * col + full[i, 5]
                x = (px + 1) / 2 * height
                y = (py + 1) / 2 * width
                for j in range(c):
                    total = 0.0
                    for m, wm in ((math.floor(x), 1 - (x - math.floor(x))),
                                  (math.floor(x) + 1, 1 - (math.floor(x) + 1 - x))):
                        for k, wk in ((math.floor(y), 1 - (y - math.floor(y))),
                                      (math.floor(y) + 1, 1 - (math.floor(y) + 1 - y))):
                            if 0 <= m < height and 0 <= k < width:
                                total += wm * wk * u[i, j, m, k]
                    v[i, j, s, t] = total
    return v


def torch_st(u: np.ndarray, full: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    """torch.grid_sample (align_corners=False, zeros) at the fork's sampling points: its pixel
    ((g + 1)·size - 1)/2 is the fork's (p + 1)/2·size for g = p + 1/size."""
    height, width = u.shape[2:]
    s, t = np.meshgrid(np.arange(out_h) / out_h * 2 - 1, np.arange(out_w) / out_w * 2 - 1,
                       indexing="ij")
    base = torch.from_numpy(np.stack([s, t, np.ones_like(s)], -1)).double()
    theta = torch.from_numpy(full.reshape(-1, 2, 3)).double()
    coords = torch.einsum("hwk,nrk->nhwr", base, theta)
    grid = torch.stack([coords[..., 1] + 1 / width, coords[..., 0] + 1 / height], -1)
    return torch.nn.functional.grid_sample(torch.from_numpy(u).double(), grid, mode="bilinear",
                                           padding_mode="zeros",
                                           align_corners=False).float().numpy()


def test_st_identity_by_hand_is_the_input():
    u = rand(2, 3, 4, 5, rng=RNG)
    theta = np.tile(np.array([1, 0, 0, 0, 1, 0], np.float32), (2, 1))
    (v,) = run_op("SpatialTransformer", st_attrs(), [u, theta])
    np.testing.assert_allclose(v, u, rtol=1e-6, atol=1e-6)


def test_st_one_row_shift_by_hand_reads_the_next_row_and_zeros_past_the_end():
    # θ13 = 2/H moves x by one pixel: V[s] = U[s + 1], the last row reads outside (0)
    u = rand(1, 2, 4, 3, rng=RNG)
    theta = np.array([[2 / 4, 0]], np.float32)   # θ13, θ23 given; the linear part fixed
    attrs = st_attrs(theta_1_1=1.0, theta_1_2=0.0, theta_2_1=0.0, theta_2_2=1.0)
    (v,) = run_op("SpatialTransformer", attrs, [u, theta])
    np.testing.assert_allclose(v[:, :, :3], u[:, :, 1:], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(v[:, :, 3], 0)


@pytest.mark.parametrize("fixed, out", [
    ({}, (None, None)),
    ({}, (5, 7)),
    ({"theta_1_2": 0.1, "theta_2_1": -0.2}, (3, 4)),
    ({"theta_1_1": 0.8, "theta_1_3": 0.05, "theta_2_2": 1.2, "theta_2_3": -0.3}, (6, 2)),
])
def test_st_equals_the_fork_and_torch(fixed, out):
    u = rand(2, 3, 5, 6, rng=RNG)
    free = [name for name in THETA if name not in fixed]
    theta = (np.tile(np.array([1, 0, 0, 0, 1, 0], np.float32), (2, 1))
             + 0.4 * rand(2, 6, rng=RNG))[:, [THETA.index(name) for name in free]]
    (v,) = run_op("SpatialTransformer", st_attrs(*out, **fixed), [u, theta])
    full = np.zeros((2, 6), np.float32)
    full[:, [THETA.index(name) for name in free]] = theta
    for name, value in fixed.items():
        full[:, THETA.index(name)] = value
    out_h, out_w = v.shape[2:]
    np.testing.assert_allclose(v, reference_st(u, full, out_h, out_w), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(v, torch_st(u, full, out_h, out_w), rtol=1e-4, atol=1e-5)


# ---- PSROIPooling -----------------------------------------------------------------------------


def reference_psroi(x, rois, scale, dim, groups):
    """R-FCN's PSROIPoolingForward_cpu (psroi_pooling_layer.cpp), index by index, in float32;
    C's round() sends halves away from zero."""
    def c_round(v):
        return np.float32(math.floor(abs(v) + 0.5) * (1 if v >= 0 else -1))

    scale, (height, width) = np.float32(scale), x.shape[2:]
    out = np.zeros((rois.shape[0], dim, groups, groups), np.float32)
    for index in range(out.size):
        pw, ph = index % groups, (index // groups) % groups
        ctop, n = (index // groups // groups) % dim, index // groups // groups // dim
        roi = rois[n]
        start_w, start_h = c_round(roi[1]) * scale, c_round(roi[2]) * scale
        end_w = (c_round(roi[3]) + np.float32(1)) * scale
        end_h = (c_round(roi[4]) + np.float32(1)) * scale
        roi_w = max(end_w - start_w, np.float32(0.1))
        roi_h = max(end_h - start_h, np.float32(0.1))
        bin_h, bin_w = roi_h / np.float32(groups), roi_w / np.float32(groups)
        hstart = min(max(math.floor(np.float32(ph) * bin_h + start_h), 0), height)
        wstart = min(max(math.floor(np.float32(pw) * bin_w + start_w), 0), width)
        hend = min(max(math.ceil(np.float32(ph + 1) * bin_h + start_h), 0), height)
        wend = min(max(math.ceil(np.float32(pw + 1) * bin_w + start_w), 0), width)
        c = (ctop * groups + ph) * groups + pw
        total = np.float32(0)
        for h in range(hstart, hend):
            for w in range(wstart, wend):
                total += x[int(roi[0]), c, h, w]
        empty = hend <= hstart or wend <= wstart
        out.reshape(-1)[index] = 0 if empty else total / np.float32((hend - hstart)
                                                                      * (wend - wstart))
    return out


def psroi_attrs(scale=1.0, dim=1, groups=2) -> dict:
    return {"spatial_scale": scale, "output_dim": dim, "group_size": groups}


def test_psroi_by_hand():
    # channel k of the G·G = 4 score maps is bin k's: bin (i, j) of a roi covering the 4x4
    # map averages channel 2i + j over its 2x2 quarter
    x = np.arange(64, dtype=np.float32).reshape(1, 4, 4, 4)
    rois = np.array([[0, 0, 0, 3, 3],             # the whole map, bins of 2x2
                     [0, 10, 10, 12, 12],          # outside the map: every bin empty, 0
                     [0, 0.5, 0, 2.5, 1]], np.float32)  # C round: 0.5 -> 1, 2.5 -> 3
    (y,) = run_op("PSROIPooling", psroi_attrs(), [x, rois])
    quarter = [[x[0, 0, 0:2, 0:2].mean(), x[0, 1, 0:2, 2:4].mean()],
               [x[0, 2, 2:4, 0:2].mean(), x[0, 3, 2:4, 2:4].mean()]]
    np.testing.assert_allclose(y[0, 0], quarter)
    np.testing.assert_array_equal(y[1], 0)
    # roi 2: columns [1, 4) in bins [1, 3) and [2, 4); rows [0, 2) in bins [0, 1) and [1, 2)
    np.testing.assert_allclose(y[2, 0], [[x[0, 0, 0:1, 1:3].mean(), x[0, 1, 0:1, 2:4].mean()],
                                         [x[0, 2, 1:2, 1:3].mean(), x[0, 3, 1:2, 2:4].mean()]])


@pytest.mark.parametrize("scale, dim, groups, hw", [
    (1.0, 2, 2, (6, 7)), (0.5, 3, 3, (8, 5)), (0.0625, 2, 3, (9, 9)), (0.7, 1, 1, (4, 6))])
def test_psroi_equals_the_fork(scale, dim, groups, hw):
    x = rand(2, dim * groups * groups, *hw, rng=RNG)
    rois = random_rois(7, 2, hw, scale)
    (y,) = run_op("PSROIPooling", psroi_attrs(scale, dim, groups), [x, rois])
    np.testing.assert_allclose(y, reference_psroi(x, rois, scale, dim, groups), rtol=1e-5,
                               atol=1e-6)


def random_rois(count: int, batch: int, hw: tuple[int, int], scale: float) -> np.ndarray:
    """Rois over (and a little past) an image of the map's size / scale, some of zero size."""
    high = np.array(hw[::-1], np.float32) / scale
    corner = RNG.uniform(-0.2, 1.0, (count, 2)) * high
    size = RNG.uniform(0, 0.8, (count, 2)) * high * (RNG.random((count, 1)) > 0.15)
    ids = RNG.integers(0, batch, (count, 1))
    return np.concatenate([ids, corner, corner + size], axis=1).astype(np.float32)


# ---- Repeat -----------------------------------------------------------------------------------


def reference_repeat(x: np.ndarray, w: np.ndarray, num: int, axis: int) -> np.ndarray:
    """christopher5106's RepeatLayer::Forward_cpu: gemm(NoTrans, Trans, M, N·K, K) of the bottom
    (M, K) and the weight (N·K, K), index by index, into the top shape (x0, N, x1, ...)."""
    m, k = int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:]))
    flat, top = x.reshape(-1), np.zeros(m * num * k, np.float32)
    for i in range(m):
        for j in range(num * k):
            top[i * num * k + j] = sum(flat[i * k + q] * w[j, q] for q in range(k))
    return top.reshape((x.shape[0], num) + x.shape[1:])


def test_repeat_with_the_forks_initial_weight_repeats_the_input():
    x = rand(2, 3, rng=RNG)
    w = np.tile(np.eye(3, dtype=np.float32), (2, 1))   # RepeatLayer::LayerSetUp's fill
    (y,) = run_op("Repeat", {"num_repeats": 2, "axis": 1}, [x], [w])
    np.testing.assert_array_equal(y, np.stack([x, x], axis=1))


@pytest.mark.parametrize("shape, num, axis", [((3, 4), 2, 1), ((2, 3, 2), 3, 1),
                                              ((2, 3, 2), 2, 2), ((2, 2, 3), 2, -1),
                                              ((2, 3), 2, 0)])
def test_repeat_equals_the_fork_and_torch(shape, num, axis):
    x = rand(*shape, rng=RNG)
    k = int(np.prod(shape[axis:])) if axis != -1 else shape[-1]
    w = rand(num * k, k, rng=RNG)
    (y,) = run_op("Repeat", {"num_repeats": num, "axis": axis}, [x], [w])
    canonical = axis % len(shape)
    np.testing.assert_allclose(y, reference_repeat(x, w, num, canonical), rtol=1e-5, atol=1e-5)
    m = int(np.prod(shape[:canonical]))
    want = torch.nn.functional.linear(torch.from_numpy(x.reshape(m, k)), torch.from_numpy(w))
    np.testing.assert_allclose(y, want.numpy().reshape(y.shape), rtol=1e-5, atol=1e-5)
