"""`weights init` keeps the signal alive (LSUV): each learnable layer's output at unit scale on
the net's own random inputs, the weights drawn in the fillers' form; `--fillers` keeps the
prototxt's fillers as written, which on a deep net of `gaussian std: 0.01` convolutions (a
3-D pose net's recipe) shrink the signal until the outputs no longer depend on the input."""

from __future__ import annotations

import numpy as np
import pytest

import caffe_lstm
from caffe_lstm.frontend.caffemodel import read_caffemodel
from tests.helpers import assert_one_error_line, run_cli

CONVS = 8


def _conv(i: int, bottom: str) -> str:
    return (f'layer {{ name: "conv{i}" type: "Convolution" bottom: "{bottom}" top: "conv{i}" '
            f'convolution_param {{ num_output: 12 kernel_size: 3 pad: 1 '
            f'weight_filler {{ type: "gaussian" std: 0.01 }} '
            f'bias_filler {{ type: "constant" value: 0 }} }} }}\n'
            f'layer {{ name: "relu{i}" type: "ReLU" bottom: "conv{i}" top: "relu{i}" }}\n')


#: A pose-like net: per frame (T=3 frames of N=2 clips), a deep CNN of gaussian std 0.01
#: convolutions, a feature InnerProduct, then an LSTM over the frames and a regressor.
POSE_LIKE = (
    'name: "pose_like"\n'
    'input: "data" input_shape { dim: 6 dim: 3 dim: 16 dim: 16 }\n'
    'input: "cont" input_shape { dim: 3 dim: 2 }\n'
    + "".join(_conv(i, "data" if i == 1 else f"relu{i - 1}") for i in range(1, CONVS + 1))
    + f'layer {{ name: "fc" type: "InnerProduct" bottom: "relu{CONVS}" top: "fc" '
      'inner_product_param { num_output: 24 weight_filler { type: "gaussian" std: 0.01 } '
      'bias_filler { type: "constant" value: 0 } } }\n'
      'layer { name: "unread" type: "Silence" bottom: "fc" }\n'  # a layer without a top
      'layer { name: "frames" type: "Reshape" bottom: "fc" top: "frames" '
      'reshape_param { shape { dim: 3 dim: 2 dim: 24 } } }\n'
      'layer { name: "lstm" type: "LSTM" bottom: "frames" bottom: "cont" top: "lstm" '
      'recurrent_param { num_output: 16 weight_filler { type: "gaussian" std: 0.01 } '
      'bias_filler { type: "constant" value: 0 } } }\n'
      'layer { name: "pose" type: "InnerProduct" bottom: "lstm" top: "pose" '
      'inner_product_param { num_output: 9 axis: 2 '
      'weight_filler { type: "gaussian" std: 0.01 } bias_filler { type: "uniform" } } }\n')


@pytest.fixture(scope="module")
def pose_net(tmp_path_factory):
    """The net and its `weights init` caffemodels: (net, default, --fillers)."""
    folder = tmp_path_factory.mktemp("pose")
    net = folder / "pose.prototxt"
    net.write_text(POSE_LIKE)
    made = {}
    for name, extra in (("scaled", ()), ("fillers", ("--fillers",))):
        made[name] = folder / f"{name}.caffemodel"
        proc = run_cli("weights", "init", net, "-o", made[name], "--seed", 4, *extra)
        assert proc.returncode == 0, proc.stderr
    return net, made["scaled"], made["fillers"]


def _outputs(tmp_path, net, weights, seed: int, output: str = "pose") -> np.ndarray:
    """The net's output through `run` on the random inputs of ``seed``."""
    out = tmp_path / f"out{seed}.npz"
    proc = run_cli("run", net, "-w", weights, "--seed", seed, "-o", out)
    assert proc.returncode == 0, proc.stderr
    with np.load(out) as arrays:
        return arrays[output]


def test_weights_init_gives_outputs_of_unit_order_that_depend_on_the_input(tmp_path, pose_net):
    net, scaled, _ = pose_net
    first, second = (_outputs(tmp_path, net, scaled, seed) for seed in (4, 5))
    assert 0.5 < first.std() < 2, first.std()  # the last layer is scaled on seed 4's inputs
    # other inputs, other outputs (deep random ReLU stacks map inputs to correlated features,
    # so not all of the output moves; but far more than any float tolerance)
    assert np.std(first - second) > 0.1 * first.std(), np.std(first - second)


def test_weights_init_fillers_reproduces_the_vanishing_outputs(tmp_path, pose_net):
    """The outputs are the last layer's bias, whatever the input."""
    net, _, fillers = pose_net
    first, second = (_outputs(tmp_path, net, fillers, seed) for seed in (4, 5))
    bias = next(np.array(layer.blobs[1].data) for layer in read_caffemodel(fillers)
                if layer.name == "pose")
    assert np.abs(first - bias).max() < 1e-6, np.abs(first - bias).max()
    assert np.abs(first - second).max() < 1e-9


def test_each_learnable_layer_before_the_lstm_has_unit_output_on_the_seeds_inputs(pose_net):
    """Measured by running the net (cut at each layer) on the inputs `run --seed 4` draws."""
    net, scaled, _ = pose_net
    layers = [f"conv{i}" for i in range(1, CONVS + 1)] + ["fc", "pose"]
    outputs = caffe_lstm.load(net, scaled, outputs=layers).run(seed=4)
    for layer in layers:
        assert outputs[layer].std() == pytest.approx(1, abs=0.02), layer


def test_the_weights_keep_the_fillers_form_and_the_lstm_keeps_its_own(pose_net):
    """Each matrix is the --fillers one times a positive factor (the same gaussian draw); the
    LSTM's blobs are the drawn ones. A bias is the drawn one, or, where the layer's output was
    dominated by per-channel offsets (a convolution reading a ReLU's positive output), the one
    that centres each channel on the drawn bias: measured on the inputs `run --seed 4` draws."""
    net, scaled, fillers = pose_net
    drawn = {layer.name: [np.array(b.data) for b in layer.blobs]
             for layer in read_caffemodel(fillers)}
    layers = [f"conv{i}" for i in range(1, CONVS + 1)] + ["fc", "pose"]
    outputs = caffe_lstm.load(net, scaled, outputs=layers).run(seed=4)
    centred = []
    for layer in read_caffemodel(scaled):
        blobs = [np.array(b.data) for b in layer.blobs]
        if layer.name == "lstm":
            for ours, theirs in zip(blobs, drawn["lstm"]):
                np.testing.assert_array_equal(ours, theirs)
            continue
        factor = blobs[0][0] / drawn[layer.name][0][0]
        assert factor > 1, layer.name  # std 0.01 shrinks: every layer is scaled up
        np.testing.assert_allclose(blobs[0], drawn[layer.name][0] * factor, rtol=1e-5)
        if not np.array_equal(blobs[1], drawn[layer.name][1]):
            output = outputs[layer.name]
            channel = 1 if layer.name.startswith("conv") else output.ndim - 1
            means = output.mean(axis=tuple(a for a in range(output.ndim) if a != channel))
            np.testing.assert_allclose(means, drawn[layer.name][1], atol=1e-4)
            centred.append(layer.name)
    # the first convolution reads N(0, 1) inputs: no offset; some reading ReLUs are centred
    assert "conv1" not in centred and centred, centred


def test_the_same_net_and_seed_give_the_same_file(tmp_path, pose_net):
    net, scaled, _ = pose_net
    again = tmp_path / "again.caffemodel"
    assert run_cli("weights", "init", net, "-o", again, "--seed", 4).returncode == 0
    assert again.read_bytes() == scaled.read_bytes()


def test_the_api_takes_fillers_as_the_cli_does(tmp_path, pose_net):
    net, scaled, fillers = pose_net
    loaded = caffe_lstm.load(net)
    for flag, expected in ((False, scaled), (True, fillers)):
        out = tmp_path / f"{flag}.caffemodel"
        assert loaded.write_synthetic_weights(out, 4, fillers=flag) == CONVS + 3
        assert out.read_bytes() == expected.read_bytes()


#: A layer type from a plugin with shapes but no numpy form: the net loads, but cannot run.
SHAPES_ONLY_PLUGIN = """
from caffe_lstm.ops import Op, register_op


@register_op
class ShapesOnly(Op):
    type = "ShapesOnly"

    @staticmethod
    def infer(ctx, node, x):
        return (x,)
"""


def test_a_net_that_cannot_run_is_one_error_line_naming_fillers(tmp_path):
    """Without a numpy form the weights cannot be scaled: one error line says --fillers."""
    plugin, net = tmp_path / "shapes_only.py", tmp_path / "net.prototxt"
    plugin.write_text(SHAPES_ONLY_PLUGIN)
    net.write_text('input: "x" input_shape { dim: 2 dim: 4 }\n'
                   'layer { name: "ip" type: "InnerProduct" bottom: "x" top: "y" '
                   'inner_product_param { num_output: 3 } }\n'
                   'layer { name: "odd" type: "ShapesOnly" bottom: "y" top: "z" }\n')
    out = tmp_path / "w.caffemodel"
    assert_one_error_line(run_cli("weights", "init", net, "-o", out, "--plugin", plugin),
                          "--fillers")
    assert not out.exists()
    made = run_cli("weights", "init", net, "-o", out, "--plugin", plugin, "--fillers")
    assert made.returncode == 0, made.stderr


BLOCKS = 10


def _block(i: int, bottom: str) -> str:
    """conv → BatchNorm → Scale → ReLU, in place as ResNets and Inception-BN write them; the
    convolution has no bias (BatchNorm's mean takes its place) and a pose net's filler."""
    return (f'layer {{ name: "conv{i}" type: "Convolution" bottom: "{bottom}" top: "conv{i}" '
            f'convolution_param {{ num_output: 8 kernel_size: 3 pad: 1 bias_term: false '
            f'weight_filler {{ type: "gaussian" std: 0.01 }} }} }}\n'
            f'layer {{ name: "bn{i}" type: "BatchNorm" bottom: "conv{i}" top: "conv{i}" '
            f'batch_norm_param {{ use_global_stats: true }} }}\n'
            f'layer {{ name: "scale{i}" type: "Scale" bottom: "conv{i}" top: "conv{i}" '
            f'scale_param {{ bias_term: true }} }}\n'
            f'layer {{ name: "relu{i}" type: "ReLU" bottom: "conv{i}" top: "conv{i}" }}\n')


#: A deep BatchNorm net as the AFEW Inception+LSTM is built (T=3 frames of N=2 clips): blocks
#: of conv-BN-Scale-ReLU, a global average pool, then an LSTM over the frames. Drawn at random,
#: BatchNorm's statistics and Scale's γ, β add an input-independent constant to every channel
#: of every block, which rescaling alone cannot take out.
DEEP_BN = (
    'name: "deep_bn"\n'
    'input: "data" input_shape { dim: 6 dim: 3 dim: 12 dim: 12 }\n'
    'input: "cont" input_shape { dim: 3 dim: 2 }\n'
    + "".join(_block(i, "data" if i == 1 else f"conv{i - 1}") for i in range(1, BLOCKS + 1))
    + f'layer {{ name: "pool" type: "Pooling" bottom: "conv{BLOCKS}" top: "pool" '
      'pooling_param { pool: AVE global_pooling: true } }\n'
      'layer { name: "frames" type: "Reshape" bottom: "pool" top: "frames" '
      'reshape_param { shape { dim: 3 dim: 2 dim: 8 } } }\n'
      'layer { name: "lstm" type: "LSTM" bottom: "frames" bottom: "cont" top: "lstm" '
      'recurrent_param { num_output: 8 } }\n'
      'layer { name: "prob" type: "InnerProduct" bottom: "lstm" top: "prob" '
      'inner_product_param { num_output: 5 axis: 2 } }\n')


def _moved(tmp_path, net, weights, output: str) -> float:
    """How much ``output`` moves between the inputs of `run --seed 4` and `--seed 5`, relative
    to its spread: std(y₄ − y₅) / std(y₄) (about √2 for two unrelated outputs)."""
    first, second = (_outputs(tmp_path, net, weights, seed, output) for seed in (4, 5))
    return float(np.std(first - second) / np.std(first))


def test_a_deep_batchnorm_net_depends_on_its_input_by_default_not_with_fillers(tmp_path):
    """By default BatchNorm's statistics are its input's own (it normalises) and Scale's γ, β
    sit near 1 and 0: the output depends on the input. With --fillers, the drawn statistics
    and γ, β leave the output the same whatever the input."""
    net = tmp_path / "deep_bn.prototxt"
    net.write_text(DEEP_BN)
    moved = {}
    for name, extra in (("scaled", ()), ("fillers", ("--fillers",))):
        weights = tmp_path / f"{name}.caffemodel"
        proc = run_cli("weights", "init", net, "-o", weights, "--seed", 4, *extra)
        assert proc.returncode == 0, proc.stderr
        moved[name] = _moved(tmp_path, net, weights, "prob")
    assert moved["scaled"] > 0.1, moved
    assert moved["fillers"] < 1e-3, moved


def test_batchnorm_is_measured_on_its_input_and_scale_drawn_near_one_and_zero(tmp_path):
    """BatchNorm's blobs hold its input's per-channel mean and variance on the seed's inputs,
    times the factor a trained net's moving average reaches (Caffe divides by it), so that it
    normalises there (each channel's variance pooled a little with the layer's); Scale's γ is
    within 1 ± 0.2 and β within ± 0.1."""
    net, weights = tmp_path / "deep_bn.prototxt", tmp_path / "w.caffemodel"
    net.write_text(DEEP_BN)
    assert run_cli("weights", "init", net, "-o", weights, "--seed", 4).returncode == 0
    blobs = {layer.name: [np.array(b.data) for b in layer.blobs]
             for layer in read_caffemodel(weights)}
    torch = pytest.importorskip("torch")
    data = caffe_lstm.load(net).random_inputs(4)["data"]  # what `run --seed 4` feeds
    kernel = blobs["conv1"][0].reshape(8, 3, 3, 3).astype(np.float32)
    conv1 = torch.nn.functional.conv2d(torch.from_numpy(data), torch.from_numpy(kernel),
                                       padding=1).numpy()  # bn1's input (in place, unnamed)
    mean, variance, factor = blobs["bn1"]
    assert factor.shape == (1,) and 999 < factor[0] < 1000, factor
    np.testing.assert_allclose(mean / factor, conv1.mean(axis=(0, 2, 3)), rtol=1e-4, atol=1e-6)
    # each channel's m = 6·12·12 values pooled with 16 of the layer's mean variance
    m, measured = conv1.size / 8, conv1.var(axis=(0, 2, 3), dtype=np.float64)
    np.testing.assert_allclose(variance / factor, (m * measured + 16 * measured.mean()) /
                               (m + 16), rtol=1e-4)
    for i in range(1, BLOCKS + 1):
        gamma, beta = blobs[f"scale{i}"]
        assert np.all(np.abs(gamma - 1) <= 0.2) and np.all(np.abs(beta) <= 0.1), i
        assert np.ptp(gamma) > 0 and np.ptp(beta) > 0, i  # spread: skipping it would show
