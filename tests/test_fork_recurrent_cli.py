"""samples/fork_recurrent end to end through the CLI: ``verify`` (numpy equations, the rewritten
graph, the TensorRT network walked on the CPU and onnxruntime agree to 1e-5), ``convert``,
``export``, ``run`` against ports of the forks' own loops, and bad fork fields refused in one
line with nothing left behind."""

from __future__ import annotations

import re

import numpy as np
import pytest

from caffe_lstm.frontend.caffemodel import read_caffemodel
from tests.helpers import apollocaffe_lstm_unit, junhyukoh_lstm, run_cli, sample

NET, WEIGHTS = sample("fork_recurrent")
OUTPUTS = ("simple", "h_rest", "u2_h", "u2_c", "stack")
UNIT1 = 'name: "unit1" type: "LstmUnit" bottom: "h_last" bottom: "memory" top: "u1_h" top: "u1_c"\n'


def fork_inputs(path, seed=0):
    """x (8, 3, 2, 2): T·N = 4·2 rows; the clip resets stream 1 at t = 2 (row 5), the
    stack's cont stream 0 at t = 3."""
    rng = np.random.default_rng(seed)
    clip = np.ones((4, 2), np.float32)
    clip[0] = 0
    clip[2, 1] = 0
    cont = np.ones((5, 2), np.float32)
    cont[0] = 0
    cont[3, 0] = 0
    np.savez(path, x=rng.standard_normal((8, 3, 2, 2)).astype(np.float32), clip=clip.ravel(),
             rows=rng.standard_normal((6, 5)).astype(np.float32),
             memory=rng.standard_normal((2, 4)).astype(np.float32),
             seq=rng.standard_normal((5, 2, 3)).astype(np.float32), cont=cont)
    return path


def _blobs():
    return {layer.name: [b.data.reshape(b.shape) for b in layer.blobs]
            for layer in read_caffemodel(WEIGHTS)}


def test_run_equals_the_forks_loops(tmp_path):
    inputs, out = fork_inputs(tmp_path / "in.npz"), tmp_path / "out.npz"
    done = run_cli("run", NET, "-w", WEIGHTS, "--inputs", inputs, "-o", out,
                   "--outputs", "h,simple,u2_h,u2_c,stack")
    assert done.returncode == 0, done.stderr
    blobs, feeds = _blobs(), np.load(inputs)
    got = np.load(out)
    h = junhyukoh_lstm(feeds["x"], feeds["clip"], *blobs["junhyukoh"], batch_size=2)
    np.testing.assert_allclose(got["h"], h, atol=1e-5)
    simple = junhyukoh_lstm(feeds["rows"], feeds["clip"][:6], *blobs["simple"], batch_size=2)
    np.testing.assert_allclose(got["simple"], simple, atol=1e-5)
    u1_h, u1_c = apollocaffe_lstm_unit(h[6:], feeds["memory"], *blobs["unit1"])
    u2_h, u2_c = apollocaffe_lstm_unit(np.concatenate([u1_h, h[6:]], axis=1), u1_c,
                                       *blobs["unit2"])
    np.testing.assert_allclose(got["u2_h"], u2_h, atol=1e-5)
    np.testing.assert_allclose(got["u2_c"], u2_c, atol=1e-5)
    # the stack: two of junhyukoh's cells (the same as Caffe's) written out, cont as its clip
    level0 = junhyukoh_lstm(feeds["seq"].reshape(10, 3), feeds["cont"], *_fork_order(
        blobs["stack"][:3]), batch_size=2)
    level1 = junhyukoh_lstm(level0, feeds["cont"], *_fork_order(blobs["stack"][3:]), batch_size=2)
    np.testing.assert_allclose(got["stack"], level1.reshape(5, 2, 3), atol=1e-5)


def _fork_order(caffe_blobs):
    """Caffe's LSTM blobs W_xc, b_c, W_hc as the fork's W_x, W_h, b."""
    w_xc, b_c, w_hc = caffe_blobs
    return w_xc, w_hc, b_c


def test_verify_checks_the_rewrite_tensorrt_and_onnxruntime(tmp_path):
    pytest.importorskip("tensorrt_rtx_bindings")
    inputs = fork_inputs(tmp_path / "in.npz", seed=1)
    done = run_cli("verify", NET, "-w", WEIGHTS, "--inputs", inputs, "--runtime", "tensorrt-rtx",
                   "--onnxruntime", "--atol", "1e-5", "--rtol", "1e-5")
    assert done.returncode == 0, done.stderr
    for name in OUTPUTS:
        assert len(re.findall(rf"^{name} .* ok$", done.stdout, re.M)) == 3, done.stdout
    assert "MISMATCH" not in done.stdout


def test_convert_and_export_write_their_files(tmp_path):
    pytest.importorskip("tensorrt_rtx_bindings")
    engine, model = tmp_path / "net.engine", tmp_path / "net.onnx"
    done = run_cli("convert", NET, "-w", WEIGHTS, "-o", engine, "--runtime", "tensorrt-rtx")
    assert done.returncode == 0 and engine.stat().st_size > 0, done.stderr
    done = run_cli("export", NET, "-w", WEIGHTS, "-o", model)
    assert done.returncode == 0 and model.stat().st_size > 0, done.stderr


@pytest.mark.parametrize("old, new, message", [
    ("lstm_simple_param { num_output: 3 batch_size: 2 }",
     "lstm_simple_param { num_output: 3 batch_size: 4 }", "N = batch_size = 4"),
    ("lstm_param { num_output: 4 batch_size: 2 }", "lstm_param { num_output: 4 batch_size: 3 }",
     "N = batch_size = 3"),
    (UNIT1 + "  lstm_unit_param { num_cells: 4 }", UNIT1 + "  lstm_unit_param { num_cells: 5 }",
     "memory must be (N, C) = (2, 5)"),
])
def test_bad_fork_fields_end_in_one_line_and_no_file(tmp_path, old, new, message):
    text = NET.read_text()
    assert old in text
    net = tmp_path / "net.prototxt"
    net.write_text(text.replace(old, new))
    out = tmp_path / "net.onnx"
    done = run_cli("export", net, "-w", WEIGHTS, "-o", out)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
    assert not out.exists()

