"""`weights init`: synthetic weights follow the prototxt's fillers, filled as Caffe fills them,
and elsewhere a fan-in-scaled default that `verify` can check on deep recurrences.

Every filler type of Caffe's include/caffe/filler.hpp (BVLC/caffe) goes through the CLI into a
caffemodel, and the blob read back has that filler's statistics, by the formulas of
filler.hpp: constant (value), uniform U(min, max), gaussian N(mean, std²) (with sparse: each
value kept with probability sparse / num_outputs), positive_unitball (rows of U(0, 1) divided by
their sum), xavier U(±√(3/n)) and msra N(0, 2/n) with n = fan_in = count / num, fan_out =
count / channels or their average, and bilinear (1 − |x/f − c|)(1 − |y/f − c|).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from caffe_lstm.frontend.caffemodel import read_caffemodel
from tests.helpers import (CORPUS_EXPECTED, assert_one_error_line, corpus_deploy_nets,
                           needs_corpus, run_cli)

#: The InnerProduct's weight is (OUT, IN): fan_in = IN, fan_out = count / channels = OUT.
OUT, IN = 200, 300


def ip_net(weight_filler: str = "", bias_filler: str = "") -> str:
    fillers = "".join(f" {name} {{ {text} }}" for name, text in
                      (("weight_filler", weight_filler), ("bias_filler", bias_filler)) if text)
    return ('layer { name: "input" type: "Input" top: "x" '
            f'input_param {{ shape {{ dim: 2 dim: {IN} }} }} }}\n'
            'layer { name: "ip" type: "InnerProduct" bottom: "x" top: "y" '
            f'inner_product_param {{ num_output: {OUT}{fillers} }} }}\n')


def init_blobs(invoke, tmp_path, text: str, seed: int = 0) -> dict[str, list[np.ndarray]]:
    """``weights init --fillers`` of the net ``text`` (the blobs as the fillers draw them,
    not rescaled); the caffemodel read back, layer -> blobs."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    net, weights = tmp_path / "net.prototxt", tmp_path / "w.caffemodel"
    net.write_text(text)
    result = invoke("weights", "init", net, "-o", weights, "--seed", seed, "--fillers")
    assert result.exit_code == 0, result.stderr
    return {layer.name: [np.array(b.data).reshape(b.shape) for b in layer.blobs]
            for layer in read_caffemodel(weights)}


def assert_mean_std(values: np.ndarray, mean: float, std: float) -> None:
    """Sample mean within 5 standard errors, sample std within 5 % (n ≥ 10⁴)."""
    assert values.size >= 10_000
    assert abs(values.mean() - mean) <= 5 * std / math.sqrt(values.size), values.mean()
    assert values.std() == pytest.approx(std, rel=0.05)


def test_constant_weight_and_bias(invoke, tmp_path):
    blobs = init_blobs(invoke, tmp_path, ip_net('type: "constant" value: 0.25',
                                               'type: "constant" value: -1.5'))["ip"]
    np.testing.assert_array_equal(blobs[0], np.full((OUT, IN), 0.25, np.float32))
    np.testing.assert_array_equal(blobs[1], np.full(OUT, -1.5, np.float32))


def test_constant_filler_without_value_is_zero(invoke, tmp_path):
    w, _ = init_blobs(invoke, tmp_path, ip_net('type: "constant"'))["ip"]
    assert not w.any()


def test_uniform(invoke, tmp_path):
    w, _ = init_blobs(invoke, tmp_path, ip_net('type: "uniform" min: -0.3 max: 0.7'))["ip"]
    assert w.min() >= -0.3 and w.max() < 0.7
    assert w.min() < -0.29 and w.max() > 0.69
    assert_mean_std(w, 0.2, 1.0 / math.sqrt(12))  # U(a, b): mean (a+b)/2, var (b−a)²/12


def test_gaussian(invoke, tmp_path):
    w, _ = init_blobs(invoke, tmp_path, ip_net('type: "gaussian" mean: 0.1 std: 0.02'))["ip"]
    assert_mean_std(w, 0.1, 0.02)


def test_gaussian_sparse_keeps_sparse_over_num_outputs(invoke, tmp_path):
    """filler.hpp: non_zero_probability = sparse / num_outputs, num_outputs = shape(0)."""
    w, _ = init_blobs(invoke, tmp_path, ip_net('type: "gaussian" std: 0.5 sparse: 20'))["ip"]
    kept = w != 0
    p = 20 / OUT
    assert abs(kept.mean() - p) <= 5 * math.sqrt(p * (1 - p) / w.size), kept.mean()
    assert w[kept].std() == pytest.approx(0.5, rel=0.05)


def test_positive_unitball(invoke, tmp_path):
    """U(0, 1), each of the num = shape(0) rows divided by its sum."""
    w, _ = init_blobs(invoke, tmp_path, ip_net('type: "positive_unitball"'))["ip"]
    assert (w >= 0).all()
    np.testing.assert_allclose(w.sum(axis=1), 1.0, rtol=1e-5)
    # row i is u / Σu with u ~ U(0, 1): its entries average 1/IN, spread ≈ (1/√12)/(IN/2)
    assert_mean_std(w * IN, 1.0, (1 / math.sqrt(12)) / 0.5)


@pytest.mark.parametrize("norm, n", [("FAN_IN", IN), ("FAN_OUT", OUT),
                                     ("AVERAGE", (IN + OUT) / 2)])
def test_xavier(invoke, tmp_path, norm, n):
    """U(−a, a), a = √(3/n): n = fan_in = count/num, fan_out = count/channels, or the mean."""
    w, _ = init_blobs(invoke, tmp_path,
                      ip_net(f'type: "xavier" variance_norm: {norm}'))["ip"]
    bound = math.sqrt(3 / n)
    assert np.abs(w).max() <= bound * (1 + 1e-6) and np.abs(w).max() > 0.99 * bound
    assert_mean_std(w, 0.0, math.sqrt(1 / n))


@pytest.mark.parametrize("norm, n", [("FAN_IN", IN), ("FAN_OUT", OUT),
                                     ("AVERAGE", (IN + OUT) / 2)])
def test_msra(invoke, tmp_path, norm, n):
    """N(0, σ²), σ = √(2/n)."""
    w, _ = init_blobs(invoke, tmp_path, ip_net(f'type: "msra" variance_norm: {norm}'))["ip"]
    assert_mean_std(w, 0.0, math.sqrt(2 / n))


def test_xavier_of_a_convolution_counts_the_kernel():
    """A (num, channels, kh, kw) blob: fan_in = channels·kh·kw, fan_out = num·kh·kw."""
    from caffe_lstm.synthetic import Filler, fill

    w = fill(Filler(type="xavier", variance_norm="FAN_OUT"), (64, 32, 3, 3),
             np.random.default_rng(0))
    assert np.abs(w).max() <= math.sqrt(3 / (64 * 9)) * (1 + 1e-6)
    assert_mean_std(w, 0.0, math.sqrt(1 / (64 * 9)))


UPSAMPLE = """
layer { name: "input" type: "Input" top: "x" input_param { shape { dim: 1 dim: 3 dim: 4 dim: 4 } } }
layer { name: "up" type: "Deconvolution" bottom: "x" top: "y"
        convolution_param { num_output: 3 group: 3 kernel_size: 5 stride: 3 pad: 1
                            bias_term: false weight_filler { type: "bilinear" } } }
"""


def test_bilinear_upsampling_kernel_by_hand(invoke, tmp_path):
    """Kernel 5 (factor 3): f = ⌈5/2⌉ = 3, c = (2·3 − 1 − 3 mod 2)/(2·3) = 2/3, so the taps
    1 − |x/3 − 2/3| for x = 0..4 are 1/3, 2/3, 1, 2/3, 1/3, the same for every channel."""
    (w,) = init_blobs(invoke, tmp_path, UPSAMPLE)["up"]
    taps = np.array([1 / 3, 2 / 3, 1, 2 / 3, 1 / 3])
    assert w.shape == (3, 1, 5, 5)
    np.testing.assert_allclose(w, np.broadcast_to(np.outer(taps, taps), w.shape), rtol=1e-6)


def test_bilinear_even_kernel_by_hand():
    """Kernel 4 (factor 2): f = 2, c = 3/4: taps 1/4, 3/4, 3/4, 1/4."""
    from caffe_lstm.synthetic import Filler, fill

    w = fill(Filler(type="bilinear"), (2, 1, 4, 4), np.random.default_rng(0))
    taps = np.array([0.25, 0.75, 0.75, 0.25])
    np.testing.assert_allclose(w[1, 0], np.outer(taps, taps))


SCALE_AND_LSTM = """
layer { name: "input" type: "Input" top: "x" top: "cont"
        input_param { shape { dim: 3 dim: 2 dim: 600 } shape { dim: 3 dim: 2 } } }
layer { name: "scale" type: "Scale" bottom: "x" top: "xs"
        scale_param { axis: 2 bias_term: true filler { type: "constant" value: 2 }
                      bias_filler { type: "constant" value: 0.5 } } }
layer { name: "lstm" type: "LSTM" bottom: "xs" bottom: "cont" top: "h"
        recurrent_param { num_output: 100
                          weight_filler { type: "uniform" min: -0.08 max: 0.08 }
                          bias_filler { type: "constant" value: 1 } } }
"""


def test_scale_and_recurrent_layers_pass_their_fillers_on_as_caffe_does(invoke, tmp_path):
    """Scale: ``filler`` for the scale, ``bias_filler`` for its bias; LSTM: weight_filler for
    W_xc and W_hc, bias_filler for b_c (lstm_layer.cpp's unrolled InnerProducts)."""
    blobs = init_blobs(invoke, tmp_path, SCALE_AND_LSTM)
    scale, bias = blobs["scale"]
    np.testing.assert_array_equal(scale, np.full(600, 2, np.float32))
    np.testing.assert_array_equal(bias, np.full(600, 0.5, np.float32))
    w_xc, b_c, w_hc = blobs["lstm"]
    assert w_xc.shape == (400, 600) and w_hc.shape == (400, 100)
    for w in (w_xc, w_hc):
        assert -0.08 <= w.min() < -0.079 and 0.079 < w.max() < 0.08
    assert_mean_std(w_xc, 0.0, 0.16 / math.sqrt(12))
    np.testing.assert_array_equal(b_c, np.ones(400, np.float32))


def test_without_fillers_the_default_is_scaled_by_the_fan_in(invoke, tmp_path):
    """Uniform in ±1/√fan_in (fan_in = count/num), a bias with its layer's matrix's bound."""
    w, b = init_blobs(invoke, tmp_path, ip_net())["ip"]
    bound = 1 / math.sqrt(IN)
    for blob in (w, b):
        assert np.abs(blob).max() <= bound and np.abs(blob).max() > 0.95 * bound
    assert_mean_std(w, 0.0, bound / math.sqrt(3))


def test_the_same_seed_gives_the_same_weights_another_seed_others(invoke, tmp_path):
    text = ip_net('type: "gaussian" std: 0.1')
    first = init_blobs(invoke, tmp_path / "a", text, seed=3)["ip"]
    again = init_blobs(invoke, tmp_path / "b", text, seed=3)["ip"]
    other = init_blobs(invoke, tmp_path / "c", text, seed=4)["ip"]
    np.testing.assert_array_equal(first[0], again[0])
    assert not np.array_equal(first[0], other[0])


@pytest.mark.parametrize("filler, needle", [
    ('type: "glorot"', "unknown filler type 'glorot', layer 'ip' (InnerProduct)"),
    ('type: "uniform" sparse: 3', "the uniform filler has sparse: 3, layer 'ip'"),
    ('type: "bilinear"', "the bilinear filler needs a square 4-D kernel, the blob is (200, 300)"),
])
def test_a_filler_caffe_would_refuse_is_one_error_line(tmp_path, filler, needle):
    net, out = tmp_path / "net.prototxt", tmp_path / "w.caffemodel"
    net.write_text(ip_net(filler))
    assert_one_error_line(run_cli("weights", "init", net, "-o", out), needle)
    assert not out.exists()


# ---- weights init, then verify: the README's first steps --------------------------------------

DEEP_LSTM = """
name: "deep_lstm"
layer { name: "input" type: "Input" top: "x" top: "cont"
        input_param { shape { dim: 200 dim: 2 dim: 32 } shape { dim: 200 dim: 2 } } }
layer { name: "lstm1" type: "LSTM" bottom: "x" bottom: "cont" top: "h1"
        recurrent_param { num_output: 512 } }
layer { name: "lstm2" type: "LSTM" bottom: "h1" bottom: "cont" top: "h2"
        recurrent_param { num_output: 512 } }
"""


def test_a_two_layer_lstm_of_512_units_over_200_steps_verifies(tmp_path):
    """Every candidate (rewritten graph, TensorRT network, onnxruntime) agrees with the
    equations to verify's default tolerances on `weights init`'s weights."""
    net, weights = tmp_path / "deep.prototxt", tmp_path / "w.caffemodel"
    net.write_text(DEEP_LSTM)
    made = run_cli("weights", "init", net, "-o", weights)
    assert made.returncode == 0, made.stderr
    proc = run_cli("verify", net, "-w", weights, timeout=1800)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "MISMATCH" not in proc.stdout and "sensitive" not in proc.stdout, proc.stdout


def test_weights_of_a_fixed_scale_make_it_sensitive_not_a_mismatch(tmp_path):
    """Uniform ±0.5 whatever the width (the old `weights init`): the recurrence is chaotic and
    float32 rounding alone moves h2 by O(1). verify says so instead of calling a mismatch."""
    from caffe_lstm.frontend.caffe_writer import write_caffemodel
    from caffe_lstm.frontend.loader import load_net
    from caffe_lstm.synthetic import synthetic_weights

    net, weights = tmp_path / "deep.prototxt", tmp_path / "w.caffemodel"
    net.write_text(DEEP_LSTM)
    write_caffemodel(weights, synthetic_weights(load_net(net).graph, 0, scale=0.5))
    proc = run_cli("verify", net, "-w", weights, "--no-trt", "--no-onnxruntime", timeout=1800)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "numerically sensitive at these weights" in proc.stdout
    row = next(line for line in proc.stdout.splitlines() if line.startswith("h2 "))
    assert row.split()[-1] == "sensitive" and float(row.split()[-3]) > 0.1, row


@needs_corpus()
@pytest.mark.parametrize("path", corpus_deploy_nets(), ids=lambda p: p.name)
def test_every_corpus_deploy_net_verifies_on_synthetic_weights(tmp_path, path):
    """The equations against the rewritten graph, which is what the weights decide (whether
    float32 programs can agree); the TensorRT network and onnxruntime, which agree with the
    rewritten graph at any weights, are left out to keep the run short (the deep LSTM above
    checks all three)."""
    cut = CORPUS_EXPECTED[path.name][0]
    options = ("--outputs", cut) if cut else ()
    weights = tmp_path / "w.caffemodel"
    made = run_cli("weights", "init", path, "-o", weights, *options, timeout=900)
    assert made.returncode == 0, made.stderr
    proc = run_cli("verify", path, "-w", weights, *options, "--no-trt", "--no-onnxruntime",
                   timeout=1800)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "MISMATCH" not in proc.stdout and "sensitive" not in proc.stdout, proc.stdout
