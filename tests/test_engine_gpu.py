"""Running engines through Polygraphy: on a GPU against numpy (marker gpu), and the one-line
errors without a GPU or without Polygraphy."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests.helpers import assert_one_error_line, run_cli, sample

pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT for RTX is not installed")

from caffe_lstm.backends.tensorrt.engine import _complete_feeds
from caffe_lstm.backends.tensorrt.runtime import has_gpu

NO_GPU = pytest.mark.skipif(has_gpu(), reason="checks the message shown without a GPU")


def _convert(tmp_path, state: str = "zero"):
    """An engine of the seq_classifier sample (TensorRT for RTX builds it without a GPU)."""
    net, weights = sample("seq_classifier")
    path = tmp_path / f"seq_{state}.engine"
    proc = run_cli("convert", net, "-w", weights, "-o", path, "--state", state)
    assert proc.returncode == 0, proc.stderr
    return path


@pytest.fixture
def engine(tmp_path):
    return _convert(tmp_path)


@pytest.fixture
def junk_engine(tmp_path):
    """Any file will do where the error comes before the engine is read."""
    path = tmp_path / "some.engine"
    path.write_bytes(b"not an engine")
    return path


def _run_engine_cli(engine_path):
    net, weights = sample("seq_classifier")
    return run_cli("run", net, "-w", weights, "--backend", "tensorrt", "--engine", engine_path)


@NO_GPU
def test_run_engine_without_a_gpu_says_so(junk_engine):
    line = assert_one_error_line(_run_engine_cli(junk_engine))
    assert line == (f"error: running an engine needs an NVIDIA GPU; none was found, "
                    f"{junk_engine}, run on a GPU machine, or use --backend numpy")


def _hide_polygraphy(folder) -> str:
    """A PYTHONPATH folder where ``import polygraphy`` fails as if it were not installed, and
    where a sitecustomize makes ``has_gpu()`` true: the GPU is checked first, so on this
    machine the missing Polygraphy is reached only with a GPU pretended."""
    (folder / "polygraphy").mkdir()
    (folder / "polygraphy" / "__init__.py").write_text(
        'raise ImportError("No module named \'polygraphy\' (hidden by the test)")\n')
    (folder / "sitecustomize.py").write_text(textwrap.dedent("""\
        import caffe_lstm.backends.tensorrt.runtime as runtime

        runtime.has_gpu = lambda: True
        """))
    return os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))


def test_run_engine_without_polygraphy_says_how_to_install(tmp_path, junk_engine, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", _hide_polygraphy(tmp_path))
    line = assert_one_error_line(_run_engine_cli(junk_engine))
    assert line.startswith("error: running an engine needs Polygraphy, which cannot be "
                           "imported (No module named 'polygraphy' (hidden by the test))")
    assert line.endswith(f", {junk_engine}, install it: pip install 'caffe-lstm[gpu]'")


def _python(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter, away from this process's modules and environment."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120)


def test_importing_the_engine_module_leaves_polygraphy_alone():
    proc = _python("""\
        import sys
        import caffe_lstm.backends.tensorrt.engine
        assert "polygraphy" not in sys.modules, "imported eagerly"
        """)
    assert proc.returncode == 0, proc.stderr


def test_polygraphy_runs_the_rtx_module_we_loaded():
    """Polygraphy imports ``tensorrt_rtx``; the wheels name it ``tensorrt_rtx_bindings``, and
    the engine must be of the very module TrtRunner checks it against."""
    proc = _python("""\
        from caffe_lstm.backends.tensorrt.engine import _import_polygraphy
        from caffe_lstm.backends.tensorrt.runtime import load_runtime

        runtime = load_runtime("tensorrt-rtx")
        _import_polygraphy(runtime, "")
        from polygraphy.backend.trt import runner

        assert runner.trt.ICudaEngine is runtime.trt.ICudaEngine
        """)
    assert proc.returncode == 0, proc.stderr


def test_missing_inputs_are_zeros_of_the_batch_of_the_feeds():
    x = np.ones((5, 3, 4), np.float64)
    declared = {"x": (None, None, 4), "lstm1/h_0": (1, None, 8), "fixed": (2, 7)}
    feeds = _complete_feeds(declared, {"x": x, "not_an_input": x})
    assert list(feeds) == list(declared)
    assert {name: a.shape for name, a in feeds.items()} == {
        "x": (5, 3, 4), "lstm1/h_0": (1, 3, 8), "fixed": (2, 7)}
    assert all(a.dtype == np.float32 for a in feeds.values())
    assert not feeds["lstm1/h_0"].any() and (feeds["x"] == 1).all()


def test_a_dynamic_dimension_no_feed_shares_is_one():
    feeds = _complete_feeds({"x": (5, 3), "h_0": (None, 8)}, {"x": np.ones((5, 3))})
    assert feeds["h_0"].shape == (1, 8)


@NO_GPU
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
@pytest.mark.skipif(not has_gpu(), reason="needs an NVIDIA GPU; this machine has none")
@pytest.mark.parametrize("state", ["zero", "io"])
def test_engine_on_gpu_matches_numpy(tmp_path, state):
    """``io``: the engine's state inputs are not fed, so run_engine feeds them zeros."""
    net, weights = sample("seq_classifier")
    engine_path = _convert(tmp_path, state)
    outs = []
    for backend in ("numpy", "tensorrt"):
        out = tmp_path / f"{backend}.npz"
        args = ["run", net, "-w", weights, "--seed", 3, "-o", out, "--backend", backend]
        proc = run_cli(*args, *(["--engine", engine_path] if backend == "tensorrt" else []))
        assert proc.returncode == 0, proc.stderr
        with np.load(out) as data:
            outs.append(data["probs"])
    np.testing.assert_allclose(outs[1], outs[0], atol=1e-4)
