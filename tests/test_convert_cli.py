"""`caffe-lstm convert` end to end: real TensorRT-for-RTX engines from the sample nets."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys

import numpy as np
import pytest

from caffe_lstm.frontend.caffe_writer import write_caffemodel
from tests.helpers import run_cli, sample

pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT for RTX is not installed")

# Engines of TensorRT for RTX start with this magic.
RTX_MAGIC = b"vtrt"
CLASSIFIER_DYNAMIC = ["--shape", "data:1x1x8:12x2x8:64x4x8", "--shape", "cont:1x1:12x2:64x4"]


def convert(invoke, tmp_path, name, *flags):
    net, weights = sample(name)
    engine = tmp_path / f"{name}.engine"
    result = invoke("convert", net, "-w", weights, "-o", engine, "--runtime", "tensorrt-rtx",
                    *flags)
    return result, engine


@pytest.mark.parametrize("name", ["seq_classifier", "captioner"])
@pytest.mark.parametrize("flags", [(), ("--fp16",), ("--state", "zero"), ("--unroll",)],
                         ids=["fp32", "fp16", "zero_state", "unrolled"])
def test_convert_sample(invoke, tmp_path, name, flags):
    result, engine = convert(invoke, tmp_path, name, *flags)
    assert result.exit_code == 0, result.stderr
    assert engine.read_bytes()[:4] == RTX_MAGIC
    assert "probs" in result.stdout.splitlines()[-1]


@pytest.mark.parametrize("precision", [(), ("--fp16",)], ids=["fp32", "fp16"])
def test_convert_dynamic_time_and_batch(invoke, tmp_path, precision):
    result, engine = convert(invoke, tmp_path, "seq_classifier", *CLASSIFIER_DYNAMIC, *precision)
    assert result.exit_code == 0, result.stderr
    assert engine.stat().st_size > 0


def test_state_io_adds_state_inputs_and_outputs(invoke, tmp_path):
    result, _ = convert(invoke, tmp_path, "captioner", "--state", "io")
    assert result.exit_code == 0, result.stderr
    inputs, outputs = result.stdout.splitlines()[-2:]
    for layer in ("lstm1", "lstm2"):
        assert f"{layer}/h_0, {layer}/c_0" in inputs
        assert f"{layer}/h_T, {layer}/c_T" in outputs


@pytest.mark.parametrize("fill,expected_inputs", [
    (0, "inputs: x"), (1, "inputs: x, lstm1/h_0, lstm1/c_0")])
def test_state_auto_follows_a_constant_cont(invoke, tmp_path, fill, expected_inputs):
    """A constant cont of 0 masks the carried state (zero state is exact); a constant 1 at
    t = 0 carries the previous call's state in, so it becomes engine I/O."""
    text = """
    layer { name: "input" type: "Input" top: "x" input_param { shape { dim: 4 dim: 1 dim: 3 } } }
    layer { name: "cont" type: "DummyData" top: "cont"
            dummy_data_param { shape { dim: 4 dim: 1 } data_filler { value: FILL } } }
    layer { name: "lstm1" type: "LSTM" bottom: "x" bottom: "cont" top: "h"
            recurrent_param { num_output: 2 } }
    """
    net, weights = tmp_path / "net.prototxt", tmp_path / "net.caffemodel"
    net.write_text(text.replace("FILL", str(fill)))
    rng = np.random.default_rng(0)
    write_caffemodel(weights, [("lstm1", "LSTM", [rng.normal(size=s).astype(np.float32)
                                                  for s in ((8, 3), (8,), (8, 2))])])
    result = invoke("convert", net, "-w", weights, "-o", tmp_path / "e.engine")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines()[-2] == expected_inputs




@pytest.mark.parametrize("flags,needle", [
    (["--shape", "nope:1x1:2x2:3x3"], "--shape names 'nope'"),
    (["--shape", "data:1x2x1:12x2x8:100x2x16", "--shape", "cont:1x2:12x2:100x2"],
     "at the --shape MIN sizes"),
    (["--shape", "data:1x2:12x2:64x2"], "--shape data has 2 dims"),
])
def test_bad_shapes_give_one_error_line_and_no_file(tmp_path, flags, needle):
    net, weights = sample("seq_classifier")
    engine = tmp_path / "e.engine"
    proc = run_cli("convert", net, "-w", weights, "-o", engine, *flags)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], lines
    assert list(tmp_path.iterdir()) == []


def test_malformed_shape_is_a_usage_error(tmp_path):
    net, weights = sample("seq_classifier")
    proc = run_cli("convert", net, "-w", weights, "-o", tmp_path / "e.engine",
                   "--shape", "data:1x2:3:4")
    assert proc.returncode == 2 and "dims are integers" not in proc.stderr
    proc = run_cli("convert", net, "-w", weights, "-o", tmp_path / "e.engine",
                   "--shape", "data:1xa")
    assert proc.returncode == 2 and "dims are integers joined by 'x'" in proc.stderr


def test_missing_weights_fail_before_building(tmp_path):
    net, _ = sample("seq_classifier")
    weights = tmp_path / "w.caffemodel"
    write_caffemodel(weights, [("classifier", "InnerProduct", [np.zeros((5, 16), np.float32),
                                                                np.zeros(5, np.float32)])])
    proc = run_cli("convert", net, "-w", weights, "-o", tmp_path / "e.engine")
    assert proc.returncode == 1 and "no weights for layer(s) lstm1" in proc.stderr
    assert not (tmp_path / "e.engine").exists()


def test_progress_comes_from_tensorrt_progress_monitor():
    from caffe_lstm.backends.tensorrt.build import BuildOptions, build_engine
    from caffe_lstm.backends.tensorrt.runtime import load_runtime
    from caffe_lstm.frontend.loader import load_net
    from caffe_lstm.passes import run_passes

    net, weights = sample("seq_classifier")
    graph = run_passes(load_net(net, weights).graph)
    seen = []
    build_engine(load_runtime("tensorrt-rtx"), graph,
                 BuildOptions(progress=lambda *event: seen.append(event)))
    phases = {phase for phase, _, _ in seen}
    assert "Building engine" in phases
    assert any(step == steps > 0 for _, step, steps in seen)  # some phase ran to completion


@pytest.mark.skipif(shutil.which("script") is None, reason="needs util-linux `script` for a tty")
def test_progress_bar_on_a_terminal(tmp_path):
    """`script` gives the command a pseudo-terminal; the bar is drawn there and cleared."""
    net, weights = sample("seq_classifier")
    command = (f"{sys.executable} -m caffe_lstm convert {net} -w {weights} "
               f"-o {tmp_path / 'e.engine'}")
    proc = subprocess.run(["script", "-qec", command, "/dev/null"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout
    assert "Building engine" in proc.stdout and "[####" in proc.stdout
    assert "wrote " in proc.stdout.split("\r")[-1]


def test_readme_worked_example_deepspeech_relu(invoke, tmp_path):
    """The README's worked example, command by command."""
    net = sample("deepspeech_relu")[0]
    weights, engine = tmp_path / "ds.caffemodel", tmp_path / "ds.engine"
    assert invoke("inspect", net).exit_code == 0
    assert invoke("weights", "init", net, "-o", weights, "--seed", 3).exit_code == 0
    result = invoke("verify", net, "-w", weights)
    columns = 3 if importlib.util.find_spec("onnxruntime") else 2  # + the ONNX model's
    assert result.exit_code == 0 and result.stdout.count(" ok") == columns, result.stdout
    result = invoke("convert", net, "-w", weights, "-o", engine, "--fp16", "--state", "zero",
                    "--shape", "frames:1x1x161:50x2x161:500x8x161", "--shape",
                    "cont:1x1:50x2:500x8")
    assert result.exit_code == 0, result.stderr
    assert engine.read_bytes()[:4] == RTX_MAGIC
    result = invoke("weights", "export", net, "-w", weights, "--layer", "rnn1", "--layout", "onnx",
                    "-o", tmp_path / "rnn1.npz")
    assert result.exit_code == 0, result.stderr
    with np.load(tmp_path / "rnn1.npz") as arrays:
        assert arrays["W"].shape == (1, 256, 161) and arrays["B"].shape == (1, 512)
