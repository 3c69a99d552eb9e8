"""The recurrent configs of the surgery, as real TensorRT networks and engines.

For each config the rewritten graph is emitted into a real TensorRT-for-RTX network; the
network, walked and evaluated on the CPU through the TensorRT API, must equal the recurrent
equations (numpy, the original graph) to 1e-5 in fp32, and engines must build in fp32 and
fp16 with static and dynamic shapes.
"""

from __future__ import annotations

import numpy as np
import pytest

from caffe_lstm.backends.numpy_exec import NumpyExecutor
from caffe_lstm.passes import run_passes
from tests.helpers import lstm_prototxt, net_with_weights

trt_module = pytest.importorskip("tensorrt_rtx_bindings",
                                 reason="TensorRT for RTX is not installed")

from caffe_lstm.backends.tensorrt.build import BuildOptions, build_engine, emit  # noqa: E402
from caffe_lstm.backends.tensorrt.network_eval import evaluate_network  # noqa: E402
from caffe_lstm.backends.tensorrt.runtime import load_runtime  # noqa: E402


def _input_layer(shapes: dict[str, tuple[int, ...]]) -> str:
    tops = " ".join(f'top: "{name}"' for name in shapes)
    dims = " ".join("shape { " + " ".join(f"dim: {d}" for d in s) + " }" for s in shapes.values())
    return f'layer {{ name: "input" type: "Input" {tops} input_param {{ {dims} }} }}\n'


def _rnn(T, N, I, H):
    return (_input_layer({"x": (T, N, I), "cont": (T, N)}) +
            f'layer {{ name: "rnn1" type: "RNN" bottom: "x" bottom: "cont" top: "o" '
            f'recurrent_param {{ num_output: {H} }} }}\n')


def _fork(x_shape, with_clip, H, batch):
    shapes = {"x": x_shape}
    if with_clip:
        shapes["clip"] = x_shape[:2] if len(x_shape) > 2 else (x_shape[0], 1)
    clip = 'bottom: "clip" ' if with_clip else ""
    return (_input_layer(shapes) +
            f'layer {{ name: "lstm1" type: "Lstm" bottom: "x" {clip}top: "h" '
            f'lstm_param {{ num_output: {H} batch_size: {batch} }} }}\n')


def _stacked(T, N, I, H):
    return lstm_prototxt(T, N, (I,), H) + (
        'layer { name: "lstm2" type: "LSTM" bottom: "h" bottom: "cont" top: "h2" '
        f'recurrent_param {{ num_output: {H} }} }}\n')


#: name -> (prototxt, cont pattern); cont patterns: "start" = [0, 1, ...],
#: "reset" = a mid-sequence reset in one stream, "half" = one non-binary value.
CONFIGS = {
    "lstm_T1_N1_H2": (lstm_prototxt(1, 1, (3,), 2), "start"),
    "lstm_T2_N3_H1": (lstm_prototxt(2, 3, (4,), 1), "start"),
    "lstm_T17_N3_H7": (lstm_prototxt(17, 3, (5,), 7), "start"),
    "lstm_trailing_dims": (lstm_prototxt(6, 2, (3, 2), 4), "start"),
    "lstm_reset_one_stream": (lstm_prototxt(7, 3, (4,), 5), "reset"),
    "lstm_non_binary_cont": (lstm_prototxt(7, 3, (4,), 5), "half"),
    "lstm_x_static": (lstm_prototxt(5, 2, (3,), 6, static=4), "reset"),
    "lstm_expose_hidden": (lstm_prototxt(4, 2, (3,), 5, expose=True), "start"),
    "lstm_static_and_exposed": (lstm_prototxt(4, 3, (3,), 2, static=5, expose=True), "reset"),
    "lstm_stacked": (_stacked(6, 3, 4, 5), "reset"),
    "rnn": (_rnn(5, 3, 4, 2), "reset"),
    "fork_lstm_flat_clip": (_fork((10, 3), True, 4, 2), "start"),
    "fork_lstm_sequence_clip": (_fork((5, 2, 3), True, 4, 2), "reset"),
    "fork_lstm_no_clip": (_fork((5, 2, 3), False, 4, 2), "start"),
}


@pytest.fixture(scope="module")
def runtime():
    return load_runtime("tensorrt-rtx")


def _feeds(graph, pattern):
    rng = np.random.default_rng(11)
    feeds = {}
    for value in graph.inputs:
        if value.name in ("cont", "clip"):
            feeds[value.name] = _cont(value.shape, pattern)
        else:
            feeds[value.name] = rng.normal(size=value.shape).astype(np.float32)
    return feeds


def _cont(shape, pattern):
    cont = np.ones(shape, np.float32)
    cont[0] = 0
    if pattern == "reset" and shape[0] > 3:
        cont[3, shape[1] - 1 if len(shape) > 1 else 0] = 0
    if pattern == "half" and shape[0] > 2:
        cont[2, 0] = 0.5
    return cont


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_network_walk_equals_the_recurrent_equations(runtime, tmp_path, config):
    text, pattern = CONFIGS[config]
    original = net_with_weights(tmp_path, text, seed=7)
    feeds = _feeds(original, pattern)
    expected = NumpyExecutor(original).run(feeds)
    rewritten = run_passes(net_with_weights(tmp_path, text, seed=7))
    _, network, _ = emit(runtime, rewritten, BuildOptions())
    got = evaluate_network(runtime.trt, network, feeds)
    assert sorted(got) == sorted(expected)
    for name, want in expected.items():
        np.testing.assert_allclose(got[name], want, atol=1e-5, rtol=0, err_msg=name)


@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_engine_builds_static_and_dynamic(runtime, tmp_path, config, fp16):
    graph = run_passes(net_with_weights(tmp_path, CONFIGS[config][0], seed=7))
    assert build_engine(runtime, graph, BuildOptions(fp16=fp16))[:4] == b"vtrt"
    # dynamic T: axis 0 of every (T, ...) input ranges over 1..2T (fork flat inputs excepted)
    shapes = {}
    for value in graph.inputs:
        if value.name in ("x", "cont", "clip") and len(value.shape) >= 2 and \
                not config.startswith("fork_lstm_flat"):
            steps = value.shape[0]
            rest = value.shape[1:]
            shapes[value.name] = ((1, *rest), value.shape, (2 * steps, *rest))
    if shapes:
        options = BuildOptions(fp16=fp16, shapes={**shapes, **{
            v.name: (v.shape,) * 3 for v in graph.inputs if v.name not in shapes}})
        assert build_engine(runtime, graph, options)[:4] == b"vtrt"
