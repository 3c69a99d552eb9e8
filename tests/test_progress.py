"""The progress display of long work (`run`, `verify`, `export`): click's progress bar on a
terminal, driven by the library's progress callback; nothing with -q or off a terminal."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

import numpy as np

from caffe_lstm import api
from tests.helpers import ROOT, run_cli, sample

#: A long sequence for the seq_classifier sample: its loop runs 1500 steps.
LONG = ("--shape", "data:1500x1x8", "--shape", "cont:1500x1")


def run_on_terminal(*args: object) -> tuple[int, str]:
    """`caffe-lstm ARGS` with a pseudo-terminal as its stdin, stdout and stderr; (status,
    everything it wrote)."""
    leader, follower = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "caffe_lstm", *map(str, args)],
                               stdin=follower, stdout=follower, stderr=follower, cwd=ROOT)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    text = b"".join(chunks).decode(errors="replace").replace("\r\n", "\n")  # the tty's newlines
    return process.wait(timeout=300), text


def test_a_long_run_shows_its_progress_on_a_terminal_and_nothing_with_q(tmp_path):
    net, weights = sample("seq_classifier")
    status, shown = run_on_terminal("run", net, "-w", weights, *LONG)
    assert status == 0, shown
    # click's bar: the loop's steps, then the layers, each with its position
    assert "__lstm1/loop: steps" in shown and "[####" in shown, shown
    assert "1500/1500" in shown and "layers" in shown, shown
    assert "probs  (1500, 1, 5)" in shown.split("\r")[-1], shown  # the bar's line was cleared

    status, shown = run_on_terminal("-q", "run", net, "-w", weights, *LONG,
                                    "-o", tmp_path / "out.npz")
    assert status == 0 and shown == "", shown
    assert (tmp_path / "out.npz").exists()


def test_no_progress_off_a_terminal():
    net, weights = sample("seq_classifier")
    proc = run_cli("run", net, "-w", weights, *LONG)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert "steps" not in proc.stdout


def test_verify_and_export_show_progress_on_a_terminal(tmp_path):
    net, weights = sample("seq_classifier")
    status, shown = run_on_terminal("verify", net, "-w", weights, "--no-trt", "--shape",
                                    "data:200x1x8", "--shape", "cont:200x1")
    assert status == 0 and "[####" in shown, shown
    for phase in ("equations: layers", "rewritten graph: layers",
                  "rewritten graph: __lstm1/loop: steps"):
        assert phase in shown, phase
    status, shown = run_on_terminal("export", net, "-w", weights, "-o", tmp_path / "m.onnx")
    assert status == 0 and "layers" in shown and "wrote " in shown.split("\r")[-1], shown


def test_the_library_reports_layers_and_loop_steps_through_the_callback():
    """Net.run's callback: every layer of the rewritten net in order, and each of the loop's
    steps; the run's outputs are those of a run without a callback."""
    net = api.load(*sample("seq_classifier"), shapes={"data": (7, 2, 8), "cont": (7, 2)})
    seen: list[tuple[str, int, int]] = []
    with_progress = net.run(seed=1, progress=lambda *event: seen.append(event))
    layers = [event for event in seen if event[0] == "layers"]
    total = len(net.rewritten().graph.nodes)
    assert layers == [("layers", done, total) for done in range(1, total + 1)]
    steps = [event for event in seen if event[0] != "layers"]
    assert steps == [("__lstm1/loop: steps", t, 7) for t in range(1, 8)]
    for name, array in net.run(seed=1).items():
        np.testing.assert_array_equal(with_progress[name], array)
