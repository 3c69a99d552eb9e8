"""Fast R-CNN's ``ROIPooling`` against a port of the fork's Forward_cpu
(``tests.helpers.fast_rcnn_roi_pooling``) and values worked out by hand; onnxruntime's
``MaxRoiPool`` (the ONNX form) and the TensorRT network walked on the CPU against numpy; a small
net through ``verify``; bad parameters as one error line.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import caffe_lstm

from tests.helpers import (
    assert_one_error_line,
    fast_rcnn_roi_pooling,
    rand,
    run_cli,
    run_onnx_facet,
    run_op,
    synthetic_files,
)

RNG = np.random.default_rng(23)
LOWEST = -np.finfo(np.float32).max


def attrs(pooled_h=2, pooled_w=2, spatial_scale=1.0) -> dict:
    return {"pooled_h": pooled_h, "pooled_w": pooled_w, "spatial_scale": spatial_scale}


# x[0, 0] = 4·row + column on a 4x4 map: a bin's max is its bottom-right pixel
MAP = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
BY_HAND = [
    # the whole map, size 4: bins of 2 pixels
    ([0, 0, 0, 3, 3], 1.0, [[5, 7], [13, 15]]),
    # C's round: 0.5 -> 1, 2.5 -> 3; size 3, bin 1.5: rows/columns [1, 3) and [2, 4)
    ([0, 0.5, 0.5, 2.5, 2.5], 1.0, [[10, 11], [14, 15]]),
    # the same roi at spatial_scale 0.5: 1 -> 0.5 -> 1, 5 -> 2.5 -> 3
    ([0, 1, 1, 5, 5], 0.5, [[10, 11], [14, 15]]),
    # past the map: every bin clipped empty, 0
    ([0, 10, 10, 12, 12], 1.0, [[0, 0], [0, 0]]),
    # reversed corners: size max(1 - 3 + 1, 1) = 1, bin 0.5: both bins [3, 4)
    ([0, 3, 3, 1, 1], 1.0, [[15, 15], [15, 15]]),
    # partly outside: -1.5 -> -2, 1.5 -> 2, size 5, bin 2.5: [-2, 1) -> [0, 1) and [0, 3)
    ([0, -1.5, -1.5, 1.5, 1.5], 1.0, [[0, 2], [8, 10]]),
    # 0.49999997 rounds to 0 (adding 0.5 in float32 would give 1): the whole map again
    ([0, 0.49999997, 0, 3, 3], 1.0, [[5, 7], [13, 15]]),
    # a batch index of 0.9 is image 0 (C's int() truncates)
    ([0.9, 0, 0, 1, 1], 1.0, [[0, 1], [4, 5]]),
]


@pytest.mark.parametrize("roi, scale, want", BY_HAND)
def test_by_hand(roi, scale, want):
    rois = np.array([roi], np.float32)
    (y,) = run_op("ROIPooling", attrs(spatial_scale=scale), [MAP, rois])
    np.testing.assert_array_equal(y[0, 0], want)
    np.testing.assert_array_equal(fast_rcnn_roi_pooling(MAP, rois, 2, 2, scale)[0, 0], want)
    (z,) = run_onnx_facet("ROIPooling", attrs(spatial_scale=scale), [MAP, rois])
    np.testing.assert_array_equal(z[0, 0], want)


def test_minus_infinity_and_nan_as_the_fork():
    # the fork's max starts at -FLT_MAX and takes a pixel only when greater: a bin of -inf
    # gives -FLT_MAX, a NaN pixel is passed over
    x = np.array([[[[-np.inf, -np.inf], [np.nan, 2]]]], np.float32)
    rois = np.array([[0, 0, 0, 1, 1]], np.float32)
    (y,) = run_op("ROIPooling", attrs(), [x, rois])
    np.testing.assert_array_equal(y[0, 0], [[LOWEST, LOWEST], [LOWEST, 2]])
    np.testing.assert_array_equal(fast_rcnn_roi_pooling(x, rois, 2, 2, 1.0), y)


def random_rois(count: int, batch: int, hw: tuple[int, int], scale: float) -> np.ndarray:
    """Rois over and past an image of the map's size / scale: some reversed, some with
    coordinates on halves after scaling."""
    high = np.array(hw[::-1], np.float32) / scale
    corner = RNG.uniform(-0.4, 1.2, (count, 2)) * high
    size = RNG.uniform(-0.3, 1.0, (count, 2)) * high
    boxes = np.concatenate([corner, corner + size], axis=1)
    halves = RNG.random(count) < 0.3
    boxes[halves] = np.round(boxes[halves] * scale * 2) / 2 / scale
    ids = RNG.integers(0, batch, (count, 1))
    return np.concatenate([ids, boxes], axis=1).astype(np.float32)


CASES = [(2, 2, 1.0, (2, 3, 6, 7)), (3, 2, 0.5, (1, 2, 8, 5)), (7, 7, 0.0625, (2, 2, 9, 11)),
         (1, 4, 0.7, (3, 1, 4, 6)), (2, 3, 1 / 3, (1, 2, 1, 1))]


@pytest.mark.parametrize("pooled_h, pooled_w, scale, nchw", CASES)
def test_numpy_and_onnxruntime_equal_the_fork(pooled_h, pooled_w, scale, nchw):
    x = rand(*nchw, rng=RNG)
    rois = random_rois(9, nchw[0], nchw[2:], scale)
    want = fast_rcnn_roi_pooling(x, rois, pooled_h, pooled_w, scale)
    (y,) = run_op("ROIPooling", attrs(pooled_h, pooled_w, scale), [x, rois])
    np.testing.assert_array_equal(y, want)
    (z,) = run_onnx_facet("ROIPooling", attrs(pooled_h, pooled_w, scale), [x, rois.reshape(
        9, 5, 1, 1)], dynamic=[(1, 0)])
    np.testing.assert_array_equal(z, want)


def test_tensorrt_network_at_dynamic_roi_counts(tmp_path):
    """One network for 1-16 rois and batches 1-3 (the sparse-table form): the walk equals
    numpy on every case above, -inf pixels included."""
    pytest.importorskip("tensorrt_rtx_bindings")
    from caffe_lstm.backends.numpy_exec import NumpyExecutor
    from caffe_lstm.backends.tensorrt.build import BuildOptions, emit
    from caffe_lstm.backends.tensorrt.network_eval import evaluate_network
    from caffe_lstm.backends.tensorrt.runtime import load_runtime
    from caffe_lstm.frontend.loader import load_net

    runtime = load_runtime("tensorrt-rtx")
    for pooled_h, pooled_w, scale, (n, c, h, w) in CASES:
        text = (f'layer {{ name: "in" type: "Input" top: "x" top: "rois" input_param {{ '
                f'shape {{ dim: {n} dim: {c} dim: {h} dim: {w} }} shape {{ dim: 9 dim: 5 }} }} }}\n'
                f'layer {{ name: "pool" type: "ROIPooling" bottom: "x" bottom: "rois" '
                f'top: "pooled" roi_pooling_param {{ pooled_h: {pooled_h} pooled_w: {pooled_w} '
                f'spatial_scale: {scale} }} }}\n')
        (tmp_path / "net.prototxt").write_text(text)
        graph = load_net(tmp_path / "net.prototxt").graph
        shapes = {"x": ((1, c, h, w), (n, c, h, w), (3, c, h, w)),
                  "rois": ((1, 5), (9, 5), (16, 5))}
        _, network, _ = emit(runtime, graph, BuildOptions(shapes=shapes))
        x = rand(n, c, h, w, rng=RNG)
        x[..., : h // 2, : w // 3] = -np.inf
        feeds = {"x": x, "rois": random_rois(13, n, (h, w), scale)}
        got = evaluate_network(runtime.trt, network, feeds)["pooled"]
        want = NumpyExecutor(graph).run(feeds)["pooled"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=str((h, w)))


NET_TEMPLATE = """
layer {{ name: "input" type: "Input" top: "image" top: "rois"
        input_param {{ shape {{ dim: 2 dim: 3 dim: 14 dim: 18 }} shape {{ {rois} }} }} }}
layer {{ name: "conv" type: "Convolution" bottom: "image" top: "features"
        convolution_param {{ num_output: 4 kernel_size: 3 stride: 2 pad: 1 }} }}
layer {{ name: "roi_pool" type: "ROIPooling" bottom: "features" bottom: "rois" top: "pooled"
        roi_pooling_param {{ {param} }} }}
layer {{ name: "fc" type: "InnerProduct" bottom: "pooled" top: "fc"
        inner_product_param {{ num_output: 5 }} }}
"""
NET = NET_TEMPLATE.format(rois="dim: 6 dim: 5",
                          param="pooled_h: 3 pooled_w: 2 spatial_scale: 0.5")

# image pixels; the features are 7x9 at spatial_scale 0.5
ROIS = np.array([[0, 0, 0, 17, 13],        # the whole image
                 [1, -6, -3, 9, 5],         # partly outside
                 [0, 40, 40, 50, 50],       # outside: every bin 0
                 [1, 10, 8, 2, 2],          # reversed: a 1x1 roi
                 [0, 1, 3, 7, 9],           # 0.5, 1.5, 3.5, 4.5 after scaling: halves go up
                 [1, 5, 5, 5, 5]], np.float32)


def test_verify_numpy_tensorrt_and_onnxruntime_through_the_cli(tmp_path):
    pytest.importorskip("tensorrt_rtx_bindings")
    pytest.importorskip("onnxruntime")
    net, weights = synthetic_files(tmp_path, NET)
    inputs = tmp_path / "in.npz"
    np.savez(inputs, image=rand(2, 3, 14, 18, rng=RNG), rois=ROIS)
    done = run_cli("verify", net, "-w", weights, "--inputs", inputs, "--runtime", "tensorrt-rtx",
                   "--onnxruntime", "--atol", "1e-5", "--rtol", "1e-5")
    assert done.returncode == 0, done.stderr
    assert "TensorRT network" in done.stdout and "ONNX model" in done.stdout
    assert len(re.findall(r"^fc .* ok$", done.stdout, re.M)) == 3, done.stdout
    assert "MISMATCH" not in done.stdout


@pytest.mark.parametrize("rois, param, message", [
    ("dim: 6 dim: 5", "pooled_h: 0 pooled_w: 2", "pooled_h 0 and pooled_w 2 must be > 0"),
    ("dim: 6 dim: 4", "pooled_h: 2 pooled_w: 2", "rois (6, 4) must be (R, 5)"),
])
def test_bad_parameters_are_one_line(tmp_path, rois, param, message):
    net = tmp_path / "bad.prototxt"
    net.write_text(NET_TEMPLATE.format(rois=rois, param=param))
    line = assert_one_error_line(run_cli("inspect", net), message)
    assert "layer 'roi_pool' (ROIPooling) at " in line and "bad.prototxt:6" in line


@pytest.mark.parametrize("features, layer, message, most", [
    # ROIPooling's max table: 16 · 256 · (7 + 1)(7 + 1) levels · 128 · 128 = 2³²
    ("dim: 16 dim: 256 dim: 128 dim: 128",
     'type: "ROIPooling" roi_pooling_param { pooled_h: 2 pooled_w: 2 }',
     "max table has 4294967296 elements (16 image(s) · C 256 · levels 64 · H 128 · W 128)", 7),
    # PSROIPooling's integral image: 64 · 1029 (21 classes · 7 · 7) · 201 · 201 > 2³¹
    ("dim: 64 dim: 1029 dim: 200 dim: 200",
     'type: "PSROIPooling" psroi_pooling_param { spatial_scale: 1 output_dim: 21 group_size: 7 }',
     "integral image has 2660648256 elements (64 image(s) · C 1029 · H + 1 201 · W + 1 201)",
     51),
])
def test_a_table_past_int32_indices_is_refused_before_building(tmp_path, features, layer,
                                                               message, most):
    """The TensorRT forms gather from a table flattened, at INT32 indices: one whose elements
    pass 2³¹ − 1 is one line before any engine is built, with the most images that fit.
    weights init writes such a net's (empty) weights without running it."""
    pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT for RTX is not installed")
    net = tmp_path / "big.prototxt"
    net.write_text('layer { name: "input" type: "Input" top: "features" top: "rois" input_param '
                   f'{{ shape {{ {features} }} shape {{ dim: 6 dim: 5 }} }} }}\n'
                   f'layer {{ name: "pool" {layer} bottom: "features" bottom: "rois" '
                   'top: "pooled" }\n')
    # the features alone are ~8 GiB, the default --max-memory: neither command allocates them
    weights = tmp_path / "big.caffemodel"  # no blobs: nothing is run
    written = run_cli("--max-memory", "16G", "weights", "init", net, "-o", weights)
    assert written.returncode == 0, written.stderr
    engine = tmp_path / "big.engine"
    line = assert_one_error_line(run_cli("--max-memory", "16G", "convert", net, "-w", weights,
                                         "-o", engine),
                                 f"the TensorRT form's {message}, past its INT32 indices")
    assert "layer 'pool' (" in line and f"at most {most} images" in line
    assert not engine.exists()


@pytest.mark.parametrize("layer, chw, most", [
    ('type: "ROIPooling" roi_pooling_param { pooled_h: 2 pooled_w: 2 }', "256x128x128", 7),
    (('type: "PSROIPooling" psroi_pooling_param { spatial_scale: 1 output_dim: 21 '
      'group_size: 7 }'), "1029x200x200", 51),
])
def test_a_table_past_int32_indices_at_the_profile_max_is_refused(tmp_path, layer, chw, most):
    """With a dynamic batch the network's N is -1: the table is checked at the profile's MAX
    (here 64 images), the most the engine takes, before any engine is built; a MAX within the
    limit builds (the network at OPT, one image)."""
    pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT for RTX is not installed")
    net = tmp_path / "roi.prototxt"
    dims = " ".join(f"dim: {d}" for d in chw.split("x"))
    net.write_text('layer { name: "input" type: "Input" top: "features" top: "rois" input_param '
                   f'{{ shape {{ dim: 1 {dims} }} shape {{ dim: 6 dim: 5 }} }} }}\n'
                   f'layer {{ name: "pool" {layer} bottom: "features" bottom: "rois" '
                   'top: "pooled" }\n')
    weights = tmp_path / "roi.caffemodel"  # no blobs: nothing is run
    written = run_cli("weights", "init", net, "-o", weights)
    assert written.returncode == 0, written.stderr
    engine = tmp_path / "roi.engine"
    ranges = f"features:1x{chw}:1x{chw}:64x{chw}"
    line = assert_one_error_line(run_cli("convert", net, "-w", weights, "-o", engine,
                                         "--shape", ranges),
                                 "past its INT32 indices")
    assert "(64 image(s) · C " in line and f"at most {most} images" in line, line
    assert not engine.exists()
    within = f"features:1x{chw}:1x{chw}:{most}x{chw}"
    built = run_cli("convert", net, "-w", weights, "-o", engine, "--shape", within)
    assert built.returncode == 0 and engine.exists(), built.stderr


def test_the_onnx_route_checks_the_integral_image_at_the_profile_max(tmp_path):
    """TensorRT's ONNX parser reads the exported gathers' int64 indices as INT32 (shown by the
    parsed network's gather layers): ``convert --via onnx`` refuses a MAX of 64 images whose
    integral image passes 2³¹ − 1 elements, in the same line as our emitter's route, and
    builds at the most that fit."""
    pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT for RTX is not installed")
    pytest.importorskip("onnx")
    from caffe_lstm.backends.tensorrt.onnx_route import parse_onnx
    from caffe_lstm.backends.tensorrt.runtime import load_runtime
    net = tmp_path / "psroi.prototxt"
    net.write_text('layer { name: "input" type: "Input" top: "features" top: "rois" input_param '
                   '{ shape { dim: 1 dim: 1029 dim: 200 dim: 200 } shape { dim: 6 dim: 5 } } }\n'
                   'layer { name: "pool" type: "PSROIPooling" bottom: "features" bottom: "rois" '
                   'top: "pooled" psroi_pooling_param { spatial_scale: 1 output_dim: 21 '
                   'group_size: 7 } }\n')
    weights = tmp_path / "psroi.caffemodel"
    assert run_cli("weights", "init", net, "-o", weights).returncode == 0
    chw = "1029x200x200"
    model = caffe_lstm.load(net, weights).export_onnx(None).model
    _, network, _ = parse_onnx(load_runtime("tensorrt-rtx"), model)  # serialized
    index_types = {str(layer.get_input(1).dtype) for layer in
                   (network.get_layer(i) for i in range(network.num_layers))
                   if str(layer.type).endswith("GATHER") and len(layer.get_input(0).shape) == 1}
    assert index_types == {"DataType.INT32"}, index_types  # the flat table's reads
    engine = tmp_path / "psroi.engine"
    line = assert_one_error_line(
        run_cli("convert", net, "-w", weights, "-o", engine, "--via", "onnx", "--shape",
                f"features:1x{chw}:1x{chw}:64x{chw}"), "past its INT32 indices")
    assert "layer 'pool' (PSROIPooling)" in line and "(64 image(s) · C 1029" in line, line
    assert "at most 51 images" in line and not engine.exists(), line
    built = run_cli("convert", net, "-w", weights, "-o", engine, "--via", "onnx", "--shape",
                    f"features:1x{chw}:1x{chw}:51x{chw}")
    assert built.returncode == 0 and engine.exists(), built.stderr
