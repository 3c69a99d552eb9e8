"""Running engines: on a GPU against numpy (marker gpu), and the clear error without one."""

from __future__ import annotations


import numpy as np
import pytest

from tests.conftest import run_cli, sample

pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT for RTX is not installed")

from caffe_lstm.backends.tensorrt.runtime import has_gpu  # noqa: E402




@pytest.fixture
def engine(tmp_path):
    net, weights = sample("seq_classifier")
    path = tmp_path / "seq.engine"
    proc = run_cli("convert", net, "-w", weights, "-o", path, "--state", "zero")
    assert proc.returncode == 0, proc.stderr
    return path


@pytest.mark.skipif(has_gpu(), reason="checks the message shown without a GPU")
def test_run_engine_without_a_gpu_says_so(engine):
    net, weights = sample("seq_classifier")
    proc = run_cli("run", net, "-w", weights, "--backend", "tensorrt", "--engine", engine)
    assert proc.returncode == 1
    assert proc.stderr.strip() == (f"error: running an engine needs an NVIDIA GPU; none was "
                                   f"found, {engine}, run on a GPU machine, or use --backend numpy")


@pytest.mark.skipif(has_gpu(), reason="checks the CPU stand-in used without a GPU")
def test_verify_engine_without_a_gpu_checks_the_network_walk(engine):
    net, weights = sample("seq_classifier")
    proc = run_cli("verify", net, "-w", weights, "--engine", engine)
    assert proc.returncode == 0, proc.stderr
    assert "no GPU here" in proc.stdout and "TensorRT network, fp32 (CPU walk)" in proc.stdout


def test_run_backend_tensorrt_needs_an_engine():
    net, weights = sample("seq_classifier")
    proc = run_cli("run", net, "-w", weights, "--backend", "tensorrt")
    assert proc.returncode == 2 and "--engine" in proc.stderr


@pytest.mark.gpu
@pytest.mark.skipif(not has_gpu(), reason="needs an NVIDIA GPU")
def test_engine_on_gpu_matches_numpy(engine, tmp_path):
    net, weights = sample("seq_classifier")
    outs = []
    for backend in ("numpy", "tensorrt"):
        out = tmp_path / f"{backend}.npz"
        args = ["run", net, "-w", weights, "--seed", 3, "-o", out, "--backend", backend]
        proc = run_cli(*args, *(["--engine", engine] if backend == "tensorrt" else []))
        assert proc.returncode == 0, proc.stderr
        with np.load(out) as data:
            outs.append(data["probs"])
    np.testing.assert_allclose(outs[1], outs[0], atol=1e-4)
