"""Caffe's state carry-over: a step-wise run with --state io equals one pass over the sequence."""

from __future__ import annotations

import numpy as np

from caffe_lstm.frontend.caffe_writer import write_caffemodel
from caffe_lstm.frontend.loader import load_net
from caffe_lstm.synthetic import synthetic_weights
from tests.helpers import assert_plan, corpus_files, needs_corpus, sample, synthetic_files


def _run(invoke, tmp_path, net, weights, feeds, *flags):
    inputs, out = tmp_path / "in.npz", tmp_path / "out.npz"
    np.savez(inputs, **feeds)
    result = invoke("run", net, "-w", weights, "--inputs", inputs, "-o", out, *flags)
    assert result.exit_code == 0, result.stderr
    with np.load(out) as data:
        return {k: data[k] for k in data.files}


def _step_by_step(invoke, tmp_path, net, weights, feeds, layers, output):
    """One `run --state io` per time step, each fed the previous step's h_T/c_T as h_0/c_0."""
    steps, carried, outputs = next(iter(feeds.values())).shape[0], {}, []
    for t in range(steps):
        step_feeds = {name: array[t:t + 1] if array.ndim > 1 and name != "image_features"
                      else array for name, array in feeds.items()}
        results = _run(invoke, tmp_path, net, weights, {**step_feeds, **carried},
                       "--state", "io")
        outputs.append(results[output])
        carried = {f"{layer}/{s}_0": results[f"{layer}/{s}_T"] for layer in layers
                   for s in ("h", "c")}
    return np.concatenate(outputs, axis=0)


def test_captioner_one_step_at_a_time_equals_one_pass(invoke, tmp_path):
    net, weights = sample("captioner")
    rng = np.random.default_rng(5)
    cont = np.ones((10, 2), np.float32)
    cont[0] = 0
    cont[6, 1] = 0  # stream 1 starts a new sentence at t = 6: the reset works step-wise too
    feeds = {"cont_sentence": cont,
             "input_sentence": rng.integers(0, 50, (10, 2)).astype(np.float32),
             "image_features": rng.normal(size=(2, 32)).astype(np.float32)}
    whole = _run(invoke, tmp_path, net, weights, feeds)["probs"]
    stepped = _step_by_step(invoke, tmp_path, net, weights, feeds, ("lstm1", "lstm2"), "probs")
    np.testing.assert_allclose(stepped, whole, atol=1e-5, rtol=0)


def test_state_io_without_given_state_starts_from_zero(invoke, tmp_path):
    net, weights = sample("seq_classifier")
    rng = np.random.default_rng(1)
    cont = np.ones((12, 2), np.float32)  # cont_1 = 1: the (zero) initial state is carried in
    feeds = {"data": rng.normal(size=(12, 2, 8)).astype(np.float32), "cont": cont}
    plain = _run(invoke, tmp_path, net, weights, feeds)
    io = _run(invoke, tmp_path, net, weights, feeds, "--state", "io")
    np.testing.assert_allclose(io["probs"], plain["probs"], atol=1e-6)
    assert io["lstm1/h_T"].shape == (1, 2, 16) and io["lstm1/c_T"].shape == (1, 2, 16)


def test_state_io_zero_state_takes_the_batch_of_the_fed_cont(invoke, tmp_path):
    """The captioner's LSTM x is computed (embedded words); N = 3 instead of the prototxt's 2
    still gets zero states of N = 3, read from the fed cont."""
    net, weights = sample("captioner")
    rng = np.random.default_rng(2)
    cont = np.ones((4, 3), np.float32)
    cont[0] = 0
    feeds = {"cont_sentence": cont,
             "input_sentence": rng.integers(0, 50, (4, 3)).astype(np.float32),
             "image_features": rng.normal(size=(3, 32)).astype(np.float32)}
    plain = _run(invoke, tmp_path, net, weights, feeds)
    io = _run(invoke, tmp_path, net, weights, feeds, "--state", "io")
    np.testing.assert_allclose(io["probs"], plain["probs"], atol=1e-6)
    assert io["lstm2/h_T"].shape == (1, 3, 24)


@needs_corpus()
def test_stepwise_corpus_deploy_net(invoke, tmp_path):
    """The COCO language model deploy net (T = 1, word by word, relying on Caffe's carry-over)
    run for 6 words equals the same net run over the 6-word sentence at once."""
    name = "examples__coco_caption__lstm_lm.deploy.prototxt"
    net = next(p for p in corpus_files() if p.name == name)
    weights = tmp_path / "w.caffemodel"
    write_caffemodel(weights, synthetic_weights(load_net(net).graph, seed=2, scale=0.05))
    rng = np.random.default_rng(8)
    cont = np.ones((6, 1), np.float32)
    cont[0] = 0
    feeds = {"cont_sentence": cont,
             "input_sentence": rng.integers(0, 8801, (6, 1)).astype(np.float32)}
    whole = _run(invoke, tmp_path, net, weights, feeds)["probs"]
    stepped = _step_by_step(invoke, tmp_path, net, weights, feeds, ("lstm1",), "probs")
    np.testing.assert_allclose(stepped, whole, atol=1e-5, rtol=0)


#: Images (T·N, 3, 8, 8) → convolution → InnerProduct → Reshape (-1, 1, 16) → LSTM: the
#: state's N (1) is what the Reshape makes of the images, not any axis of the image input.
CNN_LSTM = """
name: "cnn_lstm"
input: "data"
input_shape { dim: 6 dim: 3 dim: 8 dim: 8 }
input: "cont"
input_shape { dim: 6 dim: 1 }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 4 kernel_size: 3 } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "fc" type: "InnerProduct" bottom: "conv1" top: "fc"
  inner_product_param { num_output: 16 } }
layer { name: "reshape" type: "Reshape" bottom: "fc" top: "fc_seq"
  reshape_param { shape { dim: -1 dim: 1 dim: 16 } } }
layer { name: "lstm1" type: "LSTM" bottom: "fc_seq" bottom: "cont" top: "lstm1"
  recurrent_param { num_output: 8 } }
layer { name: "out" type: "InnerProduct" bottom: "lstm1" top: "out"
  inner_product_param { num_output: 5 axis: 2 } }
"""

IMAGE_RANGE = ("--shape", "data:1x3x8x8:6x3x8x8:12x3x8x8", "--shape", "cont:1x1:6x1:12x1")


def test_state_io_with_a_dynamic_batch_of_images(invoke, tmp_path):
    """The engine and the ONNX model take a dynamic number of images with --state io (the
    states' N follows the Reshape, at MIN, OPT and MAX); three chained `run --state io` calls
    of 3 images equal one run over the 9, through numpy and through onnxruntime."""

    net, weights = synthetic_files(tmp_path, CNN_LSTM, seed=4)
    engine, model = tmp_path / "net.engine", tmp_path / "net.onnx"
    built = invoke("convert", net, "-w", weights, "-o", engine, "--state", "io", *IMAGE_RANGE)
    assert built.exit_code == 0, built.stderr
    assert_plan(engine.read_bytes())
    exported = invoke("export", net, "-w", weights, "-o", model, "--state", "io", *IMAGE_RANGE)
    assert exported.exit_code == 0, exported.stderr
    assert "data (data_dim0, 3, 8, 8)" in exported.stdout
    assert "lstm1/h_0 (1, 1, 8)" in exported.stdout
    rng = np.random.default_rng(3)
    cont = np.ones((9, 1), np.float32)
    cont[0] = cont[5] = 0  # a new sequence at t = 5, inside the second call
    feeds = {"data": rng.normal(size=(9, 3, 8, 8)).astype(np.float32), "cont": cont}
    whole = _run(invoke, tmp_path, net, weights, feeds)["out"]
    for backend in ((), ("--backend", "onnxruntime", "--onnx", model)):
        carried, outputs = {}, []
        for start in (0, 3, 6):
            chunk = {name: array[start:start + 3] for name, array in feeds.items()}
            results = _run(invoke, tmp_path, net, weights, {**chunk, **carried}, "--state", "io",
                           *backend)
            outputs.append(results["out"])
            carried = {f"lstm1/{s}_0": results[f"lstm1/{s}_T"] for s in ("h", "c")}
        np.testing.assert_allclose(np.concatenate(outputs), whole, atol=1e-5, rtol=0)


#: Images (2·N, 3, 8, 8) → convolution → Reshape (2, -1, 16) → LSTM, cont from jolibrain's
#: ContinuationIndicator (N = its bottom's axis 1): no net input has an axis of size N.
CNN_INDICATOR_LSTM = """
input: "data"
input_shape { dim: 4 dim: 3 dim: 8 dim: 8 }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 4 kernel_size: 3 } }
layer { name: "fc" type: "InnerProduct" bottom: "conv1" top: "fc"
  inner_product_param { num_output: 16 } }
layer { name: "reshape" type: "Reshape" bottom: "fc" top: "fc_seq"
  reshape_param { shape { dim: 2 dim: -1 dim: 16 } } }
layer { name: "indicator" type: "ContinuationIndicator" bottom: "fc_seq" top: "indicator"
  continuation_indicator_param { time_step: 2 axis: 1 } }
layer { name: "lstm1" type: "LSTM" bottom: "fc_seq" bottom: "indicator" top: "lstm1"
  recurrent_param { num_output: 8 } }
layer { name: "out" type: "InnerProduct" bottom: "lstm1" top: "out"
  inner_product_param { num_output: 5 axis: 2 } }
"""


def test_zero_states_follow_the_batch_the_front_end_makes(invoke, tmp_path):
    """Fed 6 images instead of the prototxt's 4, the zero states take N = 3 from shape
    inference (no fed array has an axis of that size)."""
    net, weights = synthetic_files(tmp_path, CNN_INDICATOR_LSTM, seed=2)
    feeds = {"data": np.random.default_rng(4).normal(size=(6, 3, 8, 8)).astype(np.float32)}
    plain = _run(invoke, tmp_path, net, weights, feeds)
    io = _run(invoke, tmp_path, net, weights, feeds, "--state", "io")
    assert io["lstm1/h_T"].shape == (1, 3, 8) and plain["out"].shape == (2, 3, 5)
    np.testing.assert_allclose(io["out"], plain["out"], atol=1e-6)
