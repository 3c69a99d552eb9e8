"""Caffe's state carry-over: a step-wise run with --state io equals one pass over the sequence."""

from __future__ import annotations

import numpy as np

from caffe_lstm.frontend.caffe_writer import write_caffemodel
from caffe_lstm.frontend.loader import load_net
from caffe_lstm.synthetic import synthetic_weights
from tests.helpers import corpus_files, needs_corpus, sample


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
