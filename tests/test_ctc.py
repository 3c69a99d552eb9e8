"""caffe_ocr's CTCGreedyDecoder: hand-worked decodings (repeats, blanks, all-blank, merge off,
the default blank C − 1, ties), and the TensorRT network and the ONNX facet against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from caffe_lstm.errors import ShapeError
from caffe_lstm.ops import get_op
from tests.helpers import make_node, run_onnx_facet, run_op


def _scores(paths: list[list[int]], classes: int) -> np.ndarray:
    """(T, N, C) scores whose argmax per step follows ``paths`` (one label path per stream)."""
    steps, batch = len(paths[0]), len(paths)
    rng = np.random.default_rng(len(paths) * 31 + steps)
    x = rng.uniform(-1.0, 0.0, (steps, batch, classes)).astype(np.float32)
    for n, path in enumerate(paths):
        for t, label in enumerate(path):
            x[t, n, label] = 1.0 + 0.1 * t
    return x


def _attrs(blank: int = 0, merge: bool = True) -> dict:
    return {"blank_index": blank, "ctc_merge_repeated": merge}


def _labels(*rows: list[int], steps: int) -> np.ndarray:
    """The expected top (N, T, 1, 1): each row's labels, then −1."""
    y = np.full((len(rows), steps, 1, 1), -1.0, np.float32)
    for n, row in enumerate(rows):
        y[n, :len(row), 0, 0] = row
    return y


#: (label paths per stream, classes, blank_index, merge, expected labels per stream)
CASES = {
    # a blank between two 1s keeps both; the repeated 2 is merged
    "repeats": ([[1, 1, 0, 1, 2, 2]], 4, 0, True, [[1, 1, 2]]),
    # without merging every non-blank step is a label
    "merge-off": ([[1, 1, 0, 1, 2, 2]], 4, 0, False, [[1, 1, 1, 2, 2]]),
    "all-blank": ([[0, 0, 0, 0]], 4, 0, True, [[]]),
    "all-blank-merge-off": ([[0, 0, 0]], 3, 0, False, [[]]),
    # blank_index -1 is C − 1 = 3
    "default-blank": ([[3, 1, 1, 3, 0, 0]], 4, -1, True, [[1, 0]]),
    # streams decode independently, to different lengths
    "two-streams": ([[2, 2, 2, 0, 1], [0, 1, 0, 1, 0]], 3, 0, True, [[2, 1], [1, 1]]),
    "every-step-a-label": ([[1, 2, 1, 2]], 3, 0, True, [[1, 2, 1, 2]]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_decoder_by_hand(case):
    paths, classes, blank, merge, expected = CASES[case]
    x = _scores(paths, classes)
    (y,) = run_op("CTCGreedyDecoder", _attrs(blank, merge), [x])
    np.testing.assert_array_equal(y, _labels(*expected, steps=len(paths[0])))


def test_equal_scores_take_the_first_class():
    # step 1: classes 1 and 2 tie; Caffe keeps the first maximum (strict >): path 1, 1 -> [1]
    x = np.array([[[0.0, 5.0, 1.0]], [[0.0, 3.0, 3.0]]], np.float32)
    (y,) = run_op("CTCGreedyDecoder", _attrs(), [x])
    np.testing.assert_array_equal(y.reshape(-1), [1, -1])
    np.testing.assert_array_equal(run_onnx_facet("CTCGreedyDecoder", _attrs(), [x])[0], y)


@pytest.mark.parametrize("case", sorted(CASES))
def test_onnx_facet_decodes_like_numpy(case):
    paths, classes, blank, merge, _ = CASES[case]
    x = _scores(paths, classes)
    (expected,) = run_op("CTCGreedyDecoder", _attrs(blank, merge), [x])
    (got,) = run_onnx_facet("CTCGreedyDecoder", _attrs(blank, merge), [x])
    np.testing.assert_array_equal(got, expected)


def test_onnx_facet_reads_a_varying_sequence_length_at_run_time():
    paths, classes, blank, merge, _ = CASES["two-streams"]
    x = _scores(paths, classes)
    (expected,) = run_op("CTCGreedyDecoder", _attrs(blank, merge), [x])
    (got,) = run_onnx_facet("CTCGreedyDecoder", _attrs(blank, merge), [x], dynamic=[(0, 0)])
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("shapes, message", [
    (((4, 2),), r"the scores must be \(T, N, C\)"),
    (((4, 2, 3), (2, 4)), "accuracy form"),
])
def test_decoder_refuses(shapes, message):
    node = make_node("CTCGreedyDecoder", _attrs(), shapes)
    with pytest.raises(ShapeError, match=message):
        get_op("CTCGreedyDecoder").infer(None, node, *shapes)


# ---- TensorRT ---------------------------------------------------------------------------------

NET = """
input: "x" input_shape {{ dim: {steps} dim: {batch} dim: {classes} }}
layer {{ name: "decode" type: "CTCGreedyDecoder" bottom: "x" top: "labels"
         ctc_decoder_param {{ blank_index: {blank} ctc_merge_repeated: {merge} }} }}
"""


def _graph(tmp_path, steps, batch, classes, blank=0, merge=True):
    from caffe_lstm.frontend.loader import load_net

    path = tmp_path / "ctc.prototxt"
    path.write_text(NET.format(steps=steps, batch=batch, classes=classes, blank=blank,
                               merge=str(merge).lower()))
    return load_net(path).graph


@pytest.fixture(scope="module")
def runtime():
    pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT for RTX is not installed")
    from caffe_lstm.backends.tensorrt.runtime import load_runtime

    return load_runtime("tensorrt-rtx")


def _network_labels(runtime, graph, x, **options):
    from caffe_lstm.backends.tensorrt.build import BuildOptions, emit
    from caffe_lstm.backends.tensorrt.network_eval import evaluate_network

    _, network, _ = emit(runtime, graph, BuildOptions(**options))
    return evaluate_network(runtime.trt, network, {"x": x})["labels"]


@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_tensorrt_network_decodes_like_numpy(runtime, tmp_path, case, fp16):
    paths, classes, blank, merge, _ = CASES[case]
    x = _scores(paths, classes)
    graph = _graph(tmp_path, x.shape[0], x.shape[1], classes, blank, merge)
    (expected,) = run_op("CTCGreedyDecoder", _attrs(blank, merge), [x])
    got = _network_labels(runtime, graph, x, fp16=fp16)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, expected)


def test_tensorrt_network_with_a_dynamic_sequence_length(runtime, tmp_path):
    graph = _graph(tmp_path, 6, 2, 5)
    shapes = {"x": ((1, 2, 5), (6, 2, 5), (9, 2, 5))}
    for steps in (1, 4, 9):
        paths = [[(3 * t + n) % 5 // 2 for t in range(steps)] for n in range(2)]
        x = _scores(paths, 5)
        (expected,) = run_op("CTCGreedyDecoder", _attrs(), [x])
        np.testing.assert_array_equal(_network_labels(runtime, graph, x, shapes=shapes),
                                      expected)


def test_tensorrt_engine_builds_with_many_classes(runtime, tmp_path):
    """Beyond the caffe_ocr size (T = 35): T = 70, 5990 classes (labels above 2048, exact
    as float32)."""
    from caffe_lstm.backends.tensorrt.build import BuildOptions, build_engine

    graph = _graph(tmp_path, 70, 1, 5990)
    plan = build_engine(runtime, graph, BuildOptions(fp16=True))
    assert plan[:4] == b"vtrt"
    rng = np.random.default_rng(5)
    x = _scores([list(rng.integers(0, 5990, 70))], 5990)
    (expected,) = run_op("CTCGreedyDecoder", _attrs(), [x])
    assert expected.max() > 2048
    np.testing.assert_array_equal(_network_labels(runtime, graph, x, fp16=True), expected)
