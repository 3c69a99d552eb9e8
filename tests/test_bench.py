"""`caffe-lstm bench`: a net's runs timed with numpy, onnxruntime and (on a GPU) an engine, and
concurrent sequences driven through a real Triton server (the bundled tritonserver)."""

from __future__ import annotations

import importlib.util
import json
import re

import numpy as np
import pytest

from caffe_lstm.backends.tensorrt.runtime import has_gpu
from caffe_lstm.serving.server import ServingError, TritonServer, find_triton, free_port
from tests.helpers import assert_one_error_line, sample

LATENCY_KEYS = {"min", "median", "p90", "p99", "max", "mean"}
SEQ = sample("seq_classifier")


def _needs_onnxruntime(backend: str) -> None:
    if backend == "onnxruntime" and importlib.util.find_spec("onnxruntime") is None:
        pytest.skip("onnxruntime is not installed: pip install 'caffe-lstm[onnx]'")


def _timing(invoke, *args: object) -> dict:
    result = invoke("bench", *args, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("backend", ["numpy", "onnxruntime"])
@pytest.mark.parametrize("name", ["seq_classifier", "captioner"])
def test_bench_prints_its_table_and_json_for_the_samples(invoke, name, backend):
    _needs_onnxruntime(backend)
    net, weights = sample(name)
    result = invoke("bench", net, "-w", weights, "--backend", backend, "--iterations", 3)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"{name}.prototxt: {backend}, ") and "3 timed run(s)" in lines[0]
    latency = dict(re.findall(r"(min|median|p90|p99|max|mean) (\d+\.\d{3})", lines[2]))
    assert lines[2].startswith("latency ms") and set(latency) == LATENCY_KEYS, lines[2]
    assert float(latency["min"]) <= float(latency["median"]) <= float(latency["max"])
    assert re.fullmatch(r"throughput   \d+\.\d\d runs/s", lines[3]), lines[3]
    assert re.fullmatch(r"peak memory  \d+\.\d MiB resident .*", lines[4]), lines[4]

    timing = _timing(invoke, net, "-w", weights, "--backend", backend, "--iterations", 4,
                     "--warmup", 0)
    assert timing["backend"] == backend and timing["iterations"] == 4 and timing["warmup"] == 0
    ms = timing["latency_ms"]
    assert set(ms) == LATENCY_KEYS and 0 < ms["min"] <= ms["p90"] <= ms["p99"] <= ms["max"]
    assert timing["throughput_per_s"] == pytest.approx(1e3 / ms["mean"])
    assert timing["peak_memory_bytes"] > 2**20


def test_bench_times_the_runs_themselves(invoke):
    """100 times the steps take well over 5 times as long (fastest runs compared: noise only
    slows a run down); the shapes given are the shapes timed."""
    net, weights = SEQ
    short, long = (_timing(invoke, net, "-w", weights, "--iterations", 3, "--shape",
                           f"data:{t}x2x8", "--shape", f"cont:{t}x2") for t in (2, 200))
    assert long["inputs"] == {"data": [200, 2, 8], "cont": [200, 2]}
    assert long["latency_ms"]["min"] > 5 * short["latency_ms"]["min"]


def test_bench_an_exported_onnx_model_takes_its_state_and_given_inputs(invoke, tmp_path):
    """The model was exported with --state auto (io: the sample's cont is an input): bench
    feeds it the state inputs without being told; another net's model is one line."""
    _needs_onnxruntime("onnxruntime")
    net, weights = SEQ
    model = tmp_path / "m.onnx"
    assert invoke("export", net, "-w", weights, "-o", model, "--shape",
                  "data:1x1x8:5x3x8:9x4x8", "--shape", "cont:1x1:5x3:9x4").exit_code == 0
    inputs = tmp_path / "in.npz"
    np.savez(inputs, data=np.ones((5, 3, 8), np.float32), cont=np.ones((5, 3), np.float32))
    timing = _timing(invoke, net, "-w", weights, "--backend", "onnxruntime", "--onnx", model,
                     "--inputs", inputs, "--iterations", 2)
    assert timing["model"] == "ONNX model m.onnx"
    assert timing["inputs"] == {"data": [5, 3, 8], "cont": [5, 3], "lstm1/h_0": [1, 3, 16],
                                "lstm1/c_0": [1, 3, 16]}
    other, other_weights = sample("captioner")
    result = invoke("bench", other, "-w", other_weights, "--backend", "onnxruntime",
                    "--onnx", model)
    assert_one_error_line(result, str(model))


@pytest.mark.skipif(has_gpu(), reason="checks the message shown without a GPU")
def test_bench_tensorrt_without_a_gpu_is_one_error_line(invoke, tmp_path):
    engine = tmp_path / "e.engine"
    engine.write_bytes(b"not run: the GPU is looked for first")
    result = invoke("bench", *SEQ[:1], "-w", SEQ[1], "--backend", "tensorrt", "--engine", engine)
    assert_one_error_line(result, "running an engine needs an NVIDIA GPU; none was found")


@pytest.mark.gpu
@pytest.mark.skipif(not has_gpu(), reason="needs an NVIDIA GPU; this machine has none")
def test_bench_an_engine_on_a_gpu(invoke, tmp_path):
    net, weights = SEQ
    engine = tmp_path / "e.engine"
    assert invoke("convert", net, "-w", weights, "-o", engine, "--state", "zero").exit_code == 0
    timing = _timing(invoke, net, "-w", weights, "--backend", "tensorrt", "--engine", engine,
                     "--iterations", 5)
    assert timing["model"] == "engine e.engine" and timing["latency_ms"]["min"] > 0


@pytest.mark.parametrize("args, needle", [
    ((), "bench needs NET.prototxt and -w W.caffemodel"),
    (("{net}",), "bench needs NET.prototxt and -w W.caffemodel"),
    (("{net}", "-w", "{weights}", "--backend", "tensorrt"), "--engine MODEL.engine"),
    (("{net}", "-w", "{weights}", "--engine", "{weights}"), "--engine goes with --backend"),
    (("{net}", "-w", "{weights}", "--onnx", "{weights}"), "--onnx goes with --backend"),
    (("{net}", "-w", "{weights}", "--iterations", "0"), "--iterations"),
    (("--triton", "127.0.0.1:1"), "--triton needs --model NAME"),
    (("{net}", "-w", "{weights}", "--model", "m"), "--model and --seconds go with --triton"),
    (("{net}", "-w", "{weights}", "--seconds", "1"), "--model and --seconds go with --triton"),
    (("--triton", "h:1", "--model", "m", "--concurrency", "1,x"),
     "levels are integers joined by ','"),
    (("--triton", "h:1", "--model", "m", "--concurrency", "0"), "every level must be >= 1"),
])
def test_bench_usage_errors(invoke, args, needle):
    net, weights = SEQ
    result = invoke("bench", *(a.format(net=net, weights=weights) for a in args))
    assert result.exit_code == 2 and needle in result.stderr, result.stderr


def test_timing_figures_worked_out_by_hand():
    """Four runs of 1, 2, 3 and 4 ms: numpy's linear percentiles, 400 runs per second."""
    from caffe_lstm.bench import Timing

    timing = Timing("numpy", "rewritten graph", {}, 0, (0.004, 0.001, 0.003, 0.002), None)
    assert timing.latency_ms == pytest.approx(
        {"min": 1.0, "median": 2.5, "p90": 3.7, "p99": 3.97, "max": 4.0, "mean": 2.5})
    assert timing.throughput == pytest.approx(400.0)
    assert timing.as_dict()["iterations"] == 4


@pytest.mark.parametrize("backend, kwargs, needle", [
    ("cuda", {}, "backend 'cuda' is not one of numpy, onnxruntime, tensorrt"),
    ("numpy", {"iterations": 0}, "iterations must be at least 1"),
    ("tensorrt", {}, "the tensorrt backend times a built engine; none was given"),
    ("numpy", {"model": "m.onnx"}, "the numpy backend runs the net itself"),
])
def test_time_net_refuses_what_it_cannot_time(backend, kwargs, needle):
    from caffe_lstm import CaffeLstmError, load
    from caffe_lstm.bench import time_net

    with pytest.raises(CaffeLstmError, match=needle):
        time_net(load(*SEQ), backend, **kwargs)


def test_time_net_takes_state_as_net_run_does():
    """state="auto" on a net whose cont is an input: Net.run resolves it to io (the states
    are inputs and outputs), and time_net times that same net (it timed zero state)."""
    from caffe_lstm import load
    from caffe_lstm.bench import time_net

    net = load(*SEQ)
    assert "lstm1/h_T" in net.run(state="auto")
    timed = time_net(net, state="auto", iterations=1, warmup=0)
    assert sorted(timed.inputs) == ["cont", "data", "lstm1/c_0", "lstm1/h_0"]
    assert sorted(time_net(net, state="zero", iterations=1, warmup=0).inputs) == ["cont", "data"]


# ---- a running Triton server ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(module_scratch):
    """The seq_classifier sample served one step per request, as `caffe-lstm triton --backend
    python` writes it (max batch 32)."""
    for module in ("tritonclient", "grpc"):
        if importlib.util.find_spec(module) is None:
            pytest.skip("tritonclient[grpc] is not installed: pip install 'caffe-lstm[serve]'")
    try:
        find_triton()
    except ServingError as exc:
        pytest.skip(f"the bundled Triton server cannot start here: {exc.line()}")
    from click.testing import CliRunner

    from caffe_lstm.cli import cli

    repository = module_scratch.mktemp("bench") / "repo"
    result = CliRunner().invoke(cli, [str(a) for a in (
        "triton", *SEQ[:1], "-w", SEQ[1], "-o", repository, "--backend", "python",
        "--max-batch", 32, "--shape", "data:1x1x8", "--shape", "cont:1x1")])
    assert result.exit_code == 0, result.output
    with TritonServer(repository) as running:
        yield running


def test_bench_triton_reports_steps_per_second_and_tritons_mean_batch(invoke, server):
    """1, 8 and 32 concurrent sequences of 4 steps, 2 measured per client: every request is
    counted, one sequence alone is never batched, 32 at once are."""
    result = invoke("bench", "--triton", server.grpc_url, "--model", "seq_classifier",
                    "--concurrency", "1,8,32", "--steps", 4, "--iterations", 2, "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    levels = {level["concurrency"]: level for level in report["levels"]}
    assert sorted(levels) == [1, 8, 32]
    for count, level in levels.items():
        assert level["steps"] == count * 4 * 2 and level["steps_per_s"] > 0
        assert 0 < level["p50_ms"] <= level["p99_ms"]
    assert levels[1]["mean_batch"] == 1.0
    assert levels[32]["mean_batch"] > 1.0, levels[32]

    result = invoke("bench", "--triton", server.grpc_url, "--model", "seq_classifier",
                    "--concurrency", "1,8", "--steps", 3, "--iterations", 1)
    assert result.exit_code == 0, result.stderr
    rows = re.findall(r"^\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$", result.stdout,
                      re.MULTILINE)
    assert [int(row[0]) for row in rows] == [1, 8] and float(rows[0][4]) == 1.0, result.stdout


def test_bench_triton_with_given_inputs_and_over_a_time_window(invoke, server, tmp_path):
    inputs = tmp_path / "steps.npz"
    np.savez(inputs, data=np.ones((3, 1, 1, 8), np.float32), cont=np.ones((3, 1, 1)))
    report = json.loads(invoke(
        "bench", "--triton", server.grpc_url, "--model", "seq_classifier", "--concurrency", 2,
        "--steps", 5, "--seconds", 0.3, "--warmup", 0, "--inputs", inputs, "--json").stdout)
    (level,) = report["levels"]
    assert level["seconds"] >= 0.3 and level["steps"] % 5 == 0 and level["steps"] > 0

    np.savez(inputs, data=np.ones((3, 7), np.float32), cont=np.ones(3))
    result = invoke("bench", "--triton", server.grpc_url, "--model", "seq_classifier",
                    "--inputs", inputs)
    assert_one_error_line(result, "input 'data' has shape (3, 7), not steps x (1, 1, 8)")


def test_bench_triton_on_a_server_that_is_not_there_or_a_model_it_lacks(invoke, server):
    result = invoke("bench", "--triton", f"127.0.0.1:{free_port()}", "--model", "m")
    assert_one_error_line(result, "no Triton server answers at 127.0.0.1:")
    result = invoke("bench", "--triton", server.grpc_url, "--model", "nothing_here")
    assert_one_error_line(result, "Triton has no ready model 'nothing_here'")
