"""Smoke test of the benchmark scripts: each runs with --quick and prints parseable ratios."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import ROOT

pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT for RTX is not installed")

RATIO = r"(\d+\.\d{3})$"
EXPECTED = {
    "engine_size_vs_T.py": [
        rf"^loop: size T=1000 / T=10 = {RATIO}",
        rf"^loop: build time T=1000 / T=10 = {RATIO}",
        rf"^unroll: size T=\d+ / T=10 = {RATIO}",
        rf"^unroll: build time T=\d+ / T=10 = {RATIO}",
    ],
    "onnx_export.py": [
        rf"run time numpy / onnxruntime = {RATIO}",
        rf"^export: extra peak memory / caffemodel size = {RATIO}",
    ],
    "numpy_conv.py": [
        rf"^run time new / old = {RATIO}",
        rf"^fastest run time new / old = {RATIO}",
    ],
    "cpu_runtimes.py": [
        rf"^2-layer: numpy / hand numpy = {RATIO}",
        rf"^long: ort scan / ort native = {RATIO}",
        rf"^one step: ort scan / torch = {RATIO}",
        rf"^long: ort auto / ort native = {RATIO}",
        rf"^2-layer: ort scan / torch, median of the rounds' = {RATIO}",
        rf"^long: scan floor / ort native = {RATIO}",
        rf"^long: ort scan / scan floor = {RATIO}",
    ],
    "build_vs_onnx_parser.py": [
        rf"^build time caffe-lstm / onnx parser = {RATIO}",
        rf"^build time incl\. network construction caffe-lstm / onnx parser = {RATIO}",
        rf"^engine size caffe-lstm / onnx parser = {RATIO}",
    ],
}


def _with_project_on_path() -> dict[str, str]:
    """The environment with the checkout first on PYTHONPATH (the scripts import caffe_lstm)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


@pytest.fixture(scope="module")
def quick_output():
    """stdout of ``python benchmarks/<script> --quick``, run once per script."""
    outputs: dict[str, str] = {}

    def run(script: str) -> str:
        if script not in outputs:
            result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--quick"],
                                    capture_output=True, text=True, timeout=300, cwd=ROOT,
                                    env=_with_project_on_path())
            assert result.returncode == 0, result.stderr
            outputs[script] = result.stdout
        return outputs[script]

    return run


@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_quick_run_prints_ratios(quick_output, script):
    stdout = quick_output(script)
    for pattern in EXPECTED[script]:
        match = re.search(pattern, stdout, re.MULTILINE)
        assert match, f"no line matching {pattern!r} in:\n{stdout}"
        assert float(match.group(1)) > 0


def test_onnx_model_matches_the_caffe_net(quick_output):
    """The ONNX LSTM made from Caffe's blobs computes what the Caffe net computes (checked
    by the script against onnxruntime with cont = 0 at t = 0, 1 after)."""
    pytest.importorskip("onnxruntime")
    match = re.search(r"on y = (\S+)$", quick_output("build_vs_onnx_parser.py"), re.MULTILINE)
    assert match, "the script printed no equivalence line"
    assert float(match.group(1)) < 1e-5


def test_numpy_convolution_agrees_with_the_previous_code(quick_output):
    """The benchmark's two runs (unfolded matmul vs one tensor product per tap) give the same
    outputs."""
    match = re.search(r"of the outputs = (\S+)$", quick_output("numpy_conv.py"), re.MULTILINE)
    assert match, "the script printed no difference line"
    assert float(match.group(1)) < 1e-5


def test_every_cpu_runtime_computes_the_same_lstm(quick_output):
    """numpy, the hand-written loop, both exports, ONNX's own LSTM made by hand and torch agree
    (the script compares each with the numpy executor)."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("torch")
    errors = re.findall(r"vs numpy (\S+)$", quick_output("cpu_runtimes.py"), re.MULTILINE)
    assert len(errors) == 18
    assert max(float(error) for error in errors) < 1e-5


def test_whole_process_against_real_caffe():
    """With a real BVLC Caffe (CAFFE_LSTM_REAL_CAFFE = its build/tools/caffe), ``--caffe`` runs
    both whole processes, prints the ratio, and Caffe's output agrees with caffe-lstm's."""
    caffe = os.environ.get("CAFFE_LSTM_REAL_CAFFE")
    if not caffe:
        pytest.skip("no real Caffe: set CAFFE_LSTM_REAL_CAFFE to its build/tools/caffe")
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cpu_runtimes.py"),
                             "--quick", "--caffe", caffe], capture_output=True, text=True,
                            timeout=300, cwd=ROOT, env=_with_project_on_path())
    assert result.returncode == 0, result.stderr
    ratio = re.search(r"^2-layer: numpy run \(whole process\) / real Caffe \(whole process\) "
                      r"= (\d+\.\d{3}) ", result.stdout, re.MULTILINE)
    assert ratio and float(ratio.group(1)) > 0, result.stdout
    agreement = re.search(r"per \(t, n\) vs caffe-lstm (\S+)$", result.stdout, re.MULTILINE)
    assert agreement and float(agreement.group(1)) < 1e-4, result.stdout


def test_the_scan_floor_is_the_exported_scan_cut_to_its_product(tmp_path):
    """``scan floor`` runs the exported Scan with its body cut to the recurrent product: with
    h the gates' first quarter, h_t = (x_t W_xcᵀ + b_c + h_{t-1} W_hcᵀ)[:, :H], worked out
    here from the caffemodel's blobs."""
    pytest.importorskip("onnxruntime")
    import onnx
    import onnxruntime

    import caffe_lstm

    spec = importlib.util.spec_from_file_location("cpu_runtimes",
                                                  ROOT / "benchmarks" / "cpu_runtimes.py")
    runtimes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runtimes)
    T, N, I, H, layers = runtimes.QUICK_SHAPES["long"]
    (tmp_path / "n.prototxt").write_text(runtimes.prototxt(T, N, I, H, layers))
    caffe_lstm.load(tmp_path / "n.prototxt").write_synthetic_weights(tmp_path / "n.caffemodel",
                                                                     seed=0)
    net = caffe_lstm.load(tmp_path / "n.prototxt", tmp_path / "n.caffemodel")
    model = runtimes.product_only(net.export_onnx(None, state="zero", lstm_op="scan").model)

    scan = next(n for n in onnx.load_from_string(model).graph.node if n.op_type == "Scan")
    body = next(a.g for a in scan.attribute if a.name == "body")
    assert [node.op_type for node in body.node] == ["Gemm", "Split", "Identity"]
    x = np.random.default_rng(3).normal(size=(T, N, I)).astype(np.float32)
    y = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    w_xc, b_c, w_hc = (np.array(blob.data) for blob in net.graph.node("lstm1").weights)
    h = np.zeros((N, H), np.float32)
    for t in range(T):
        h = (x[t] @ w_xc.T + b_c + h @ w_hc.T)[:, :H]
        np.testing.assert_allclose(y[t], h, rtol=1e-5, atol=1e-6)
